"""The GPU backend's CUDA sources compile without a GPU: nvcc for sm_80 and sm_90, and the
NVRTC library (what CuPy's RawModule runs) through ctypes; the host-emulation build
(g++ with the thread-index shim) compiles warning-free; the kernel list in
hybridsim/gpu.py matches the kernels in the source."""
import concurrent.futures
import contextlib
import errno
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

import hybridsim
from hybridsim import gpu

SOURCES = ("vector_kernels.cu", "console_kernels.cu")


def _source(name):
    return pathlib.Path(hybridsim.core_include_dir()) / name


def test_gpu_sources_ship_with_the_package():
    for name in SOURCES:
        assert _source(name).is_file()


def test_kernel_table_matches_the_source():
    """Every extern "C" kernel of vector_kernels.cu is in gpu.KERNELS with its parameter
    count (the launcher packs arguments by that table)."""
    text = _source("vector_kernels.cu").read_text()
    found = {}
    for m in re.finditer(r'extern "C" __global__ void (\w+)\(([^)]*)\)', text):
        found[m.group(1)] = len([p for p in m.group(2).split(",") if p.strip()])
    assert set(found) == set(gpu.KERNELS)
    for name, count in found.items():
        assert len(gpu.KERNELS[name]) == count, name


@pytest.mark.parametrize("name", SOURCES)
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_gpu_kernels_compile_with_nvcc(name, arch, tmp_path):
    """Front end and unoptimised PTX (-G) for the A100 and H100/H200 generations;
    an optimised build of the inlined emulator takes minutes (scripts/device_check.sh
    does it on the device machine)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    result = subprocess.run(
        [nvcc, "-std=c++17", f"-arch={arch}", "--ptx", "-G", "-Werror", "all-warnings",
         "-I", hybridsim.core_include_dir(), str(_source(name)), "-o", str(tmp_path / "k.ptx")],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    if name == "vector_kernels.cu":
        ptx = (tmp_path / "k.ptx").read_text()
        for kernel in gpu.KERNELS:
            assert f".entry {kernel}(" in ptx, kernel


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_vector_kernels_compile_with_nvrtc(arch):
    """The source CuPy compiles (#include "vector_kernels.cu" with the package's include
    path), through the NVRTC library without a driver (PLATFORM_NOTES.md)."""
    from nvrtc import compile_to_ptx, nvrtc_library
    lib = nvrtc_library()
    if lib is None:
        pytest.skip("NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12 or set HYBRIDSIM_NVRTC_LIB)")
    rc, log, ptx = compile_to_ptx(lib, _source("vector_kernels.cu"), arch=arch, extra=(b"-G", b"-DNDEBUG"))
    assert rc == 0, log[-4000:]
    for kernel in gpu.KERNELS:
        assert b".entry " + kernel.encode() + b"(" in ptx, kernel


def test_emulation_shim_builds(tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    lib = gpu.build_emulation_library(cache_dir=tmp_path, opt="-O0")
    dev = gpu.HostEmulatedDevice(lib)
    import numpy as np
    sizes = np.zeros(8, np.int64)
    dev.launch("hs_vec_sizes", 1, 1, (sizes,))
    from hybridsim import _vector
    assert sizes[0] == _vector.ALE_ENV_BYTES and sizes[1] == _vector.VEC_STATE_BYTES
    assert sizes[3] == _vector.FRAME_REPLAY_BYTES
    assert sizes[7] == gpu.SHARED_RAM_STRIDE
    assert sizes[6] == _vector.FRAME_BYTES and sizes[5] == _vector.RESIZE_PLAN_BYTES


def test_gpu_backend_reports_why_it_cannot_run():
    """Without CuPy or a device, backend='gpu' fails with the reason (and tests that need
    a device skip with it: tests/test_gpu_device.py)."""
    reason = gpu.cupy_unavailable_reason()
    if reason is None:
        pytest.skip("CuPy and a CUDA device are present")
    with pytest.raises(RuntimeError, match="need CuPy and a CUDA device"):
        hybridsim.AtariVectorEnv("pong", 2, backend="gpu")


@pytest.mark.parametrize("part", gpu.ALL_PARTS)
def test_module_parts_hold_their_kernels(part):
    """Each NVRTC module part (gpu.part_defines) holds the small kernels only, or one
    emulator kernel only: what CupyDevice looks up in it is there."""
    from nvrtc import compile_to_ptx, nvrtc_library
    lib = nvrtc_library()
    if lib is None:
        pytest.skip("NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12 or set HYBRIDSIM_NVRTC_LIB)")
    extra = (b"-G",) + tuple(d.encode() for d in gpu.part_defines(part))
    rc, log, ptx = compile_to_ptx(lib, _source("vector_kernels.cu"), extra=extra)
    assert rc == 0, log[-4000:]
    for kernel in gpu.KERNELS:
        here = gpu.KERNEL_PART.get(kernel, "base") == part or (part != "base" and kernel not in gpu.KERNEL_PART)
        assert (b".entry " + kernel.encode() + b"(" in ptx) == here, (part, kernel)


class _FakeCupy:
    """CuPy stood in for: RawModule.compile sleeps `delay` seconds and writes an entry into
    $CUPY_CACHE_DIR the first time a (code, options) build is asked for, and finds it there
    afterwards, as CuPy's disk cache does (which reads no included header); `compiles`
    records the slow builds."""

    def __init__(self, delays):
        import types
        self.delays = delays
        self.compiles = []
        fake = self

        class RawModule:
            def __init__(self, code, options, backend):
                self.code, self.options = code, options

            def compile(self):
                entry = pathlib.Path(os.environ["CUPY_CACHE_DIR"],
                                     hashlib.md5(repr((self.code, self.options)).encode()).hexdigest())
                if entry.exists():
                    return
                fake.compiles.append(self.options)
                time.sleep(fake.delays.pop(0))
                entry.write_text("cubin")

        class Device(contextlib.nullcontext):
            compute_capability = "90"

        self.RawModule = RawModule
        self.cuda = types.SimpleNamespace(Device=Device)


def _fake_cupy(monkeypatch, tmp_path, delays):
    fake = _FakeCupy(delays)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    gpu._cupy_module.cache_clear()
    return fake


def test_a_slow_kernel_build_says_so_and_a_fast_one_says_nothing(monkeypatch, capsys, tmp_path):
    """A first NVRTC build takes minutes: after SLOW_BUILD_NOTICE_SECONDS the user is told
    what is compiling and where it will be cached, then how long it took; a build loaded
    from CuPy's cache prints nothing."""
    include = hybridsim.core_include_dir()
    fake = _fake_cupy(monkeypatch, tmp_path, [0.0, 0.6])
    monkeypatch.setattr(gpu, "SLOW_BUILD_NOTICE_SECONDS", 0.2)
    try:
        gpu._cupy_module(0, gpu.NVRTC_OPTIONS, include, None, "base")
        assert capsys.readouterr().err == ""
        mod = gpu._cupy_module(0, gpu.NVRTC_OPTIONS, include, None, "split")
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2, err
        assert err[0].startswith("hybridsim: compiling the CUDA kernels (split) with NVRTC for device 0")
        assert str(tmp_path) in err[0] and err[0].endswith("...")
        assert err[1].endswith("done after 1 s") or err[1].endswith("done after 0 s"), err[1]
        assert "-DHS_VEC_NO_FUSED" in mod.options
        assert len(fake.compiles) == 2
    finally:
        gpu._cupy_module.cache_clear()


def test_ranks_sharing_a_kernel_cache_compile_once(monkeypatch, tmp_path):
    """Two ranks of a node (here two threads, devices 0 and 1 of one arch) asking for the
    same cold module: one compiles while the other waits on the cache's build lock, then
    loads the build from the cache, instead of both compiling at once."""
    include = hybridsim.core_include_dir()
    fake = _fake_cupy(monkeypatch, tmp_path, [1.0, 1.0])
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda d: gpu._cupy_module(d, gpu.NVRTC_OPTIONS, include, None, "fused"), (0, 1)))
        assert len(fake.compiles) == 1
        assert list(tmp_path.glob(".build-*.lock"))
        # without the shared disk cache each process must build its own: no lock taken
        monkeypatch.setenv("CUPY_CACHE_IN_MEMORY", "1")
        monkeypatch.setattr(gpu, "build_lock", None)  # would raise if called
        gpu._cupy_module(2, gpu.NVRTC_OPTIONS, include, None, "fused")
    finally:
        gpu._cupy_module.cache_clear()


def test_changed_core_sources_are_a_new_nvrtc_build(monkeypatch, tmp_path):
    """CuPy's kernel cache keys on the code string and options, not on the headers the code
    includes: after an edit under cuda/ (a kept ~/.cupy cache, a new hybridsim) the module
    must be rebuilt, not loaded stale from the cache."""
    include = tmp_path / "cuda"
    shutil.copytree(hybridsim.core_include_dir(), include)
    fake = _fake_cupy(monkeypatch, tmp_path / "cache", [0.0, 0.0, 0.0])
    (tmp_path / "cache").mkdir()
    try:
        gpu._cupy_module(0, gpu.NVRTC_OPTIONS, str(include), None, "base")
        gpu._cupy_module.cache_clear()
        gpu._cupy_module(0, gpu.NVRTC_OPTIONS, str(include), None, "base")
        assert len(fake.compiles) == 1  # unchanged sources: loaded from the cache
        gpu._cupy_module.cache_clear()
        header = include / "m6502.h"
        header.write_text(header.read_text() + "\n// edited\n")
        gpu._cupy_module(0, gpu.NVRTC_OPTIONS, str(include), None, "base")
        assert len(fake.compiles) == 2
    finally:
        gpu._cupy_module.cache_clear()


def test_build_lock_waits_for_its_holder_then_gives_up_after_the_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu, "SLOW_BUILD_NOTICE_SECONDS", 0.1)
    with gpu.build_lock(tmp_path, "k", "test build") as held:
        assert held
        start = time.monotonic()
        with gpu.build_lock(tmp_path, "k", "test build", wait_limit=0.5) as second:
            waited = time.monotonic() - start
            assert not second
        with gpu.build_lock(tmp_path, "other", "test build", wait_limit=0.5) as other:
            assert other  # another key is another build
    assert 0.5 <= waited < 5
    err = capsys.readouterr().err
    assert "waiting for another process's test build (lock " in err
    assert "after 0 s; building without it" in err or "after 1 s; building without it" in err
    with gpu.build_lock(tmp_path, "k", "test build", wait_limit=0.0) as again:
        assert again  # released when its holder's block ended


def test_build_lock_without_flock_builds_anyway(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(gpu.fcntl, "flock", no_flock)
    with gpu.build_lock(tmp_path, "k", "test build", wait_limit=60) as held:
        assert not held
    monkeypatch.undo()
    (tmp_path / "file").write_text("")  # a cache directory that cannot be made
    with gpu.build_lock(tmp_path / "file" / "below", "k", "test build") as held:
        assert not held


_FAKE_CXX = """#!/bin/sh
# stands in for g++: logs the call, takes a second, writes the -o file
echo "$$" >> "{log}"
sleep 1
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then printf fake > "$2"; fi
  shift
done
"""


def test_processes_sharing_a_cache_build_the_emulation_library_once(tmp_path):
    """Two processes asking for the host-emulation library of a cold cache: the compiler
    runs once, and both get the same library."""
    log = tmp_path / "cxx.log"
    cxx = tmp_path / "fake-cxx"
    cxx.write_text(_FAKE_CXX.format(log=log))
    cxx.chmod(0o755)
    env = dict(os.environ, CXX=str(cxx))
    code = ("import sys; from hybridsim import gpu; "
            "print(gpu.build_emulation_library(cache_dir=sys.argv[1]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "cache")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len({out.strip() for out, _ in outs}) == 1
    assert len(log.read_text().split()) == 1
