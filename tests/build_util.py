"""Compile-and-run checks shared by the build tests."""
import shutil
import subprocess

import pytest

import hybridsim


def strict_cxx_check(tmp_path, name: str, source: str) -> None:
    """Compile `source` against the core with g++ -Wall -Wextra -Werror, then run it (exit 0)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / f"{name}.cpp"
    src.write_text(source)
    exe = tmp_path / name
    result = subprocess.run([cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror",
                             "-I", hybridsim.core_include_dir(), str(src), "-o", str(exe)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert subprocess.run([str(exe)]).returncode == 0
