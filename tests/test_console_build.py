"""The console headers keep the core's portability contract (g++ strict, nvcc, NVRTC)."""
import pathlib
import shutil
import subprocess

import pytest

import hybridsim

HEADERS = ("mt19937.h", "riot.h", "cart.h", "tia.h", "console.h", "palette.h", "ale_env.h",
           "console_kernels.cu")


def test_console_headers_ship_with_the_package():
    include = pathlib.Path(hybridsim.core_include_dir())
    for name in HEADERS:
        assert (include / name).is_file(), f"{name} missing from {include}"


def test_console_compiles_as_strict_host_cpp(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "console_check.cpp"
    src.write_text('#include "ale_env.h"\n#include "palette.h"\n'
                   "static hs::AleEnv env;\n"
                   "int main() { return (int)sizeof(env) > 0 && hs::tia_motion(0, 1) == -1 ? 0 : 1; }\n")
    result = subprocess.run([cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror",
                             "-I", hybridsim.core_include_dir(), str(src), "-o",
                             str(tmp_path / "console_check")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert subprocess.run([str(tmp_path / "console_check")]).returncode == 0


def test_console_kernels_compile_with_nvcc(tmp_path):
    """Front end and PTX only (about 20 s); ptxas on the inlined emulator takes minutes."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    include = hybridsim.core_include_dir()
    result = subprocess.run(
        [nvcc, "-std=c++17", "-arch=compute_90", "--ptx", "-Werror", "all-warnings", "-I", include,
         str(pathlib.Path(include) / "console_kernels.cu"), "-o", str(tmp_path / "console.ptx")],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


def test_console_kernels_compile_with_nvrtc():
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    include = pathlib.Path(hybridsim.core_include_dir())
    source = (include / "console_kernels.cu").read_text()
    headers = sorted(p.name for p in include.iterdir() if p.suffix in (".h", ".inc"))
    try:
        prog = nvrtc.createProgram(source, "console_kernels.cu",
                                   [(include / h).read_text() for h in headers], headers)
    except Exception as exc:  # the NVRTC library itself is missing
        pytest.skip(f"NVRTC unavailable: {exc}")
    try:
        nvrtc.compileProgram(prog, ["-arch=compute_90", "-std=c++17"])
    except Exception:
        log = nvrtc.getProgramLog(prog)
        pytest.fail(f"NVRTC failed:\n{log[-4000:]}")
    assert len(nvrtc.getPTX(prog)) > 0
