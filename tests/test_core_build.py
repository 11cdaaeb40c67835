"""The portable core: generated code is current, headers ship, nvcc compiles it."""
import pathlib
import shutil
import subprocess
import sys

import pytest

import hybridsim
from build_util import strict_cxx_check
from hybridsim import _core

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_generated_opcode_switch_is_current():
    generator = REPO / "tools" / "gen_m6502.py"
    if not generator.exists():
        pytest.skip("not running from a source checkout")
    result = subprocess.run([sys.executable, str(generator), "--check"])
    assert result.returncode == 0, "cuda/m6502_ops.inc is stale: run python tools/gen_m6502.py"


def test_core_headers_are_installed_with_the_package():
    include = pathlib.Path(hybridsim.core_include_dir())
    for name in ("hs_prelude.h", "m6502.h", "m6502_ops.inc", "cpu_harness.h", "cpu_kernels.cu"):
        assert (include / name).is_file(), f"{name} missing from {include}"


def test_extension_reports_openmp():
    assert isinstance(_core.openmp_enabled(), bool)
    assert _core.openmp_max_threads() >= 1


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_core_compiles_with_nvcc(arch, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    include = hybridsim.core_include_dir()
    result = subprocess.run(
        [nvcc, "-std=c++17", f"-arch={arch}", "-Werror", "all-warnings", "-c",
         "-I", include, str(pathlib.Path(include) / "cpu_kernels.cu"),
         "-o", str(tmp_path / f"cpu_kernels_{arch}.o")],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


def test_core_compiles_as_strict_host_cpp(tmp_path):
    """g++ with warnings as errors, and no libc beyond the prelude's stdint."""
    strict_cxx_check(tmp_path, "core_check",
                     '#include "cpu_harness.h"\n'
                     "int main() { static uint8_t m[65536]; uint16_t r[6] = {0,0,0,0,0xFF,0x24};\n"
                     "  uint64_t c; int j; return (int)hs::flat_run(m, r, 10, 0, &c, &j) - 10; }\n")


@pytest.mark.parametrize("source,extra", [("cpu_kernels.cu", ()),
                                          ("console_kernels.cu", (b"-G",))])
def test_core_compiles_with_nvrtc(source, extra):
    """NVRTC has no libc headers: the core must compile there unchanged. The console
    kernels inline the whole emulator, so they skip the optimiser (-G): minutes -> 1 s."""
    from nvrtc import compile_to_ptx, nvrtc_library
    lib = nvrtc_library()
    if lib is None:
        pytest.skip("NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12 or set HYBRIDSIM_NVRTC_LIB)")
    rc, log, ptx = compile_to_ptx(lib, pathlib.Path(hybridsim.core_include_dir()) / source,
                                  extra=extra)
    assert rc == 0, log[-4000:]
    assert b".entry " in ptx
