"""cuda/vector_env.h keeps the core's contract: strict g++, NVRTC (the GPU backend calls
vec_execute from a kernel, one environment per thread)."""
import pathlib

import pytest

import hybridsim
from build_util import strict_cxx_check

KERNEL = r'''
#include "vector_env.h"
extern "C" __global__ void vector_step(const hs::VecConfig* cfg, const hs::pp::ResizePlan* plan,
                                       const uint8_t* rom, hs::AleEnv* envs, hs::VecEnvState* states,
                                       hs::VecEnvBuffers* bufs, const int32_t* actions,
                                       hs::VecOutput* outs, int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) hs::vec_execute(*cfg, *plan, rom, envs[k], states[k], bufs[k], false, actions[k], 1.0f, outs[k]);
}
'''


def test_vector_env_compiles_as_strict_host_cpp(tmp_path):
    strict_cxx_check(tmp_path, "vector_check",
                     '#include "vector_env.h"\n'
                     "static hs::VecConfig cfg;\n"
                     "int main() { hs::MT19937 g; hs::mt_seed(g, 5); hs::vec_config_palette(cfg, false);\n"
                     "  int v = hs::vec_uniform_int(g, 29); return (v >= 0 && v <= 29) ? 0 : 1; }\n")


def test_vector_env_compiles_with_nvrtc(tmp_path):
    from nvrtc import compile_to_ptx, nvrtc_library
    lib = nvrtc_library()
    if lib is None:
        pytest.skip("NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12 or set HYBRIDSIM_NVRTC_LIB)")
    src = tmp_path / "vector_kernels.cu"
    src.write_text(KERNEL)
    rc, log, ptx = compile_to_ptx(lib, src, extra=(b"-G",))
    assert rc == 0, log[-4000:]
    assert b".entry vector_step" in ptx


def test_vector_header_ships_with_the_package():
    assert (pathlib.Path(hybridsim.core_include_dir()) / "vector_env.h").is_file()


def test_vector_env_compiles_with_nvcc(tmp_path):
    """Front end and unoptimised PTX (-G), as the console kernels are checked."""
    import shutil
    import subprocess
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    src = tmp_path / "vector_kernels.cu"
    src.write_text(KERNEL)
    result = subprocess.run([nvcc, "-std=c++17", "-arch=compute_90", "--ptx", "-G", "-Werror", "all-warnings",
                             "-I", hybridsim.core_include_dir(), str(src), "-o", str(tmp_path / "v.ptx")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
