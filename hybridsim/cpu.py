"""The 6507 CPU core on a flat 64 KiB memory: test harness and speed measurement."""
from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from hybridsim import _core

# Klaus Dormann's 6502 functional test: load at $0000, start at $0400, success trap at $3469.
FUNCTIONAL_TEST_START = 0x0400
FUNCTIONAL_TEST_SUCCESS = 0x3469


@dataclasses.dataclass
class CpuRun:
    pc: int
    a: int
    x: int
    y: int
    sp: int
    p: int
    instructions: int
    cycles: int
    jammed: bool
    seconds: float = 0.0


DISPATCHES = ("threaded", "switch")


def run_flat(memory: np.ndarray, pc: int, *, a=0, x=0, y=0, sp=0xFF, p=0x24,
             max_instructions: int = 1, stop_on_trap: bool = False,
             dispatch: str = "threaded") -> CpuRun:
    """Run the core on `memory` (65,536 uint8, modified in place) from the given registers.

    `dispatch`: "threaded" (the host build's jump from handler to handler) or "switch"
    (the opcode switch CUDA builds compile); both run the same opcode handlers.
    """
    if dispatch not in DISPATCHES:
        raise ValueError(f"dispatch must be one of {DISPATCHES}, got {dispatch!r}")
    if memory.dtype != np.uint8 or memory.shape != (65536,) or not memory.flags.c_contiguous:
        raise ValueError("memory must be a contiguous uint8 array of shape (65536,)")
    regs = np.array([pc, a, x, y, sp, p], dtype=np.uint16)
    start = time.perf_counter()
    done, cycles, jammed = _core.cpu_run_flat(memory, regs, max_instructions, stop_on_trap,
                                               dispatch == "switch")
    seconds = time.perf_counter() - start
    return CpuRun(*(int(r) for r in regs), instructions=done, cycles=cycles, jammed=jammed,
                  seconds=seconds)


def load_functional_test(path: str | os.PathLike) -> np.ndarray:
    data = np.fromfile(path, dtype=np.uint8)
    if data.size != 65536:
        raise ValueError(f"{path}: expected a 65,536-byte memory image, got {data.size} bytes")
    return data


def run_functional_test(path: str | os.PathLike, max_instructions: int = 200_000_000,
                        dispatch: str = "threaded") -> CpuRun:
    """Run Klaus Dormann's functional test until it traps; success is PC == $3469."""
    memory = load_functional_test(path)
    return run_flat(memory, FUNCTIONAL_TEST_START, max_instructions=max_instructions,
                    stop_on_trap=True, dispatch=dispatch)
