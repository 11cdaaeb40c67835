"""cuda/games.h compiles unchanged as plain C++17, without any system header (as under
NVRTC, which ships none), and with nvcc for the GPU."""
import shutil
import subprocess

import pytest

from conftest import REPO

CUDA_DIR = REPO / "cuda"

USE = r"""
#include "games.h"
HS_HD int32_t hs_games_probe(const uint8_t* ram, int32_t n) {
  int32_t acc = 0;
  for (int32_t i = 0; i < n; ++i) {
    int32_t game = 1 + i % (hs::kNumGames - 1);
    hs::GameState g;
    hs::game_reset(game, g);
    hs::game_set_mode(game, g, 0, ram);
    int32_t r = 0;
    hs::game_step(game, g, ram, &r);
    acc += r + hs::game_lives(game, g) + (hs::game_terminal(game, g) ? 1 : 0);
    acc += hs::game_name(game)[0];
  }
  return acc;
}
"""

KERNEL = USE + r"""
__global__ void hs_games_kernel(const uint8_t* ram, int32_t* out) {
  out[threadIdx.x] = hs_games_probe(ram + 128 * threadIdx.x, 57);
}
"""


def _compile(cmd, cwd):
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


def test_compiles_as_strict_cpp17(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "use.cpp").write_text(USE)
    _compile([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fno-exceptions", "-fno-rtti",
              "-I", str(CUDA_DIR), "-c", "use.cpp", "-o", "use.o"], tmp_path)


def test_compiles_without_system_headers(tmp_path):
    """Mimic NVRTC: no include paths at all and the __CUDACC_RTC__ branch of the prelude."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    (tmp_path / "use.cpp").write_text(USE)
    _compile([cxx, "-std=c++17", "-nostdinc", "-nostdinc++", "-fsyntax-only", "-Wall", "-Werror",
              "-D__CUDACC_RTC__", "-D__host__=", "-D__device__=", "-D__forceinline__=inline",
              "-D__constant__=", "-I", str(CUDA_DIR), "use.cpp"], tmp_path)


def test_compiles_with_nvcc(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    (tmp_path / "k.cu").write_text(KERNEL)
    _compile([nvcc, "-std=c++17", "-arch=sm_90", "-Werror", "all-warnings", "-I", str(CUDA_DIR), "-c", "k.cu", "-o", "k.o"],
             tmp_path)
