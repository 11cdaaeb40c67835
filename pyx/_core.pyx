# cython: language_level=3
"""Thin wrappers over the portable C++ core in cuda/ (compiled here with g++)."""
from libc.stdint cimport uint8_t, uint16_t, uint64_t

import numpy as np

cdef extern from "cpu_harness.h" namespace "hs" nogil:
    uint64_t flat_run(uint8_t* mem, uint16_t* regs, uint64_t max_instructions,
                      int stop_on_trap, uint64_t* cycles, int* jammed, int switch_dispatch)

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    static int hs_openmp_enabled(void) { return 1; }
    static int hs_openmp_max_threads(void) { return omp_get_max_threads(); }
    #else
    static int hs_openmp_enabled(void) { return 0; }
    static int hs_openmp_max_threads(void) { return 1; }
    #endif
    """
    int hs_openmp_enabled() nogil
    int hs_openmp_max_threads() nogil


def openmp_enabled():
    """True when the extension was built with OpenMP."""
    return bool(hs_openmp_enabled())


def openmp_max_threads():
    return hs_openmp_max_threads()


def cpu_run_flat(uint8_t[::1] memory,  # IN/OUT: 65,536 bytes
                 uint16_t[::1] regs,   # IN/OUT: pc, a, x, y, sp, p
                 uint64_t max_instructions,
                 bint stop_on_trap=False,
                 bint switch_dispatch=False):
    """Run the 6507 core on a flat 64 KiB memory image.

    Returns (instructions, cycles, jammed). `regs` and `memory` are updated in place.
    switch_dispatch runs the core's switch dispatch (the one CUDA builds use) instead of
    the host's threaded dispatch.
    """
    if memory.shape[0] != 65536:
        raise ValueError(f"memory must hold 65536 bytes, got {memory.shape[0]}")
    if regs.shape[0] != 6:
        raise ValueError(f"regs must hold 6 values (pc, a, x, y, sp, p), got {regs.shape[0]}")
    cdef uint64_t cycles = 0
    cdef int jammed = 0
    cdef uint64_t done
    with nogil:
        done = flat_run(&memory[0], &regs[0], max_instructions, stop_on_trap, &cycles, &jammed,
                        switch_dispatch)
    return int(done), int(cycles), bool(jammed)
