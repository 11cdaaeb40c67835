"""The console headers keep the core's portability contract (g++ strict, nvcc, NVRTC)."""
import pathlib
import shutil
import subprocess

import pytest

import hybridsim
from build_util import strict_cxx_check

HEADERS = ("mt19937.h", "riot.h", "cart.h", "tia.h", "console.h", "palette.h", "ale_env.h",
           "console_kernels.cu")


def test_console_headers_ship_with_the_package():
    include = pathlib.Path(hybridsim.core_include_dir())
    for name in HEADERS:
        assert (include / name).is_file(), f"{name} missing from {include}"


def test_console_compiles_as_strict_host_cpp(tmp_path):
    strict_cxx_check(tmp_path, "console_check",
                     '#include "ale_env.h"\n#include "palette.h"\n'
                     "static hs::AleEnv env;\n"
                     "int main() { return (int)sizeof(env) > 0 && hs::tia_motion(0, 1) == -1 ? 0 : 1; }\n")


def test_hmove_clamp_matches_the_motion_table(tmp_path):
    """HMOVE's per-cycle clamp (cuda/tia.h) against tia_motion, every cycle and nibble."""
    strict_cxx_check(tmp_path, "hmove_check",
                     '#include "tia.h"\n'
                     "int main() {\n"
                     "  int bad = 0;\n"
                     "  for (int cycle = 0; cycle < 76; ++cycle)\n"
                     "    for (int nibble = 0; nibble < 16; ++nibble)\n"
                     "      bad += hs::tia_hmove_motion(hs::tia_hmove_clamp(cycle), nibble) != hs::tia_motion(cycle, nibble);\n"
                     "  return bad == 0 ? 0 : 1;\n"
                     "}\n")


def test_console_kernels_compile_with_nvcc(tmp_path):
    """Front end and unoptimised PTX (-G); optimising the inlined emulator takes minutes."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    include = hybridsim.core_include_dir()
    result = subprocess.run(
        [nvcc, "-std=c++17", "-arch=compute_90", "--ptx", "-G", "-Werror", "all-warnings", "-I", include,
         str(pathlib.Path(include) / "console_kernels.cu"), "-o", str(tmp_path / "console.ptx")],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
