"""The GPU backend's CUDA sources compile without a GPU: nvcc for sm_80 and sm_90, and the
NVRTC library (what CuPy's RawModule runs) through ctypes; the host-emulation build
(g++ with the thread-index shim) compiles warning-free; the kernel list in
hybridsim/gpu.py matches the kernels in the source."""
import contextlib
import pathlib
import re
import shutil
import subprocess

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
    sizes = np.zeros(7, np.int64)
    dev.launch("hs_vec_sizes", 1, 1, (sizes,))
    from hybridsim import _vector
    assert sizes[0] == _vector.ALE_ENV_BYTES and sizes[1] == _vector.VEC_STATE_BYTES
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


def test_a_slow_kernel_build_says_so_and_a_fast_one_says_nothing(monkeypatch, capsys):
    """A first NVRTC build takes minutes: after SLOW_BUILD_NOTICE_SECONDS the user is told
    what is compiling and where it will be cached, then how long it took; a build loaded
    from CuPy's cache prints nothing. CuPy is stood in for by a fake RawModule."""
    import sys
    import time
    import types
    delays = []

    class FakeRawModule:
        def __init__(self, code, options, backend):
            self.options = options

        def compile(self):
            time.sleep(delays.pop(0))

    fake = types.SimpleNamespace(RawModule=FakeRawModule,
                                 cuda=types.SimpleNamespace(Device=lambda k: contextlib.nullcontext()))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(gpu, "SLOW_BUILD_NOTICE_SECONDS", 0.2)
    monkeypatch.setenv("CUPY_CACHE_DIR", "/scratch/cupy-cache")
    gpu._cupy_module.cache_clear()
    try:
        delays.append(0.0)
        gpu._cupy_module(0, gpu.NVRTC_OPTIONS, "/inc", None, "base")
        assert capsys.readouterr().err == ""
        delays.append(0.6)
        mod = gpu._cupy_module(0, gpu.NVRTC_OPTIONS, "/inc", None, "split")
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2, err
        assert err[0].startswith("hybridsim: compiling the CUDA kernels (split) with NVRTC for device 0")
        assert "/scratch/cupy-cache" in err[0] and err[0].endswith("...")
        assert err[1].endswith("done after 1 s") or err[1].endswith("done after 0 s"), err[1]
        assert "-DHS_VEC_NO_FUSED" in mod.options
    finally:
        gpu._cupy_module.cache_clear()
