"""The installed package works from outside the source tree."""
import os
import subprocess
import sys

import numpy as np
import pytest

from hybridsim import cpu
from hybridsim.asm6502 import Assembler, opcode_for


def test_import_from_outside_the_source_tree(tmp_path):
    code = "import hybridsim, hybridsim._core; print(hybridsim.__file__)"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr
    assert "site-packages" in result.stdout or "dist-packages" in result.stdout


def test_cli_bench_cpu_runs(tmp_path):
    result = subprocess.run([sys.executable, "-m", "hybridsim", "bench", "--cpu"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "checksum (built in)" in result.stdout


def test_commands_other_than_train_and_eval_start_without_torch():
    # Importing torch takes 2-3 s: `hybridsim games`, `analyze`, `verify` and `replay` and the
    # parser (built from TrainConfig) must not pay for it.
    code = ("import sys\n"
            "from hybridsim import analyze, cli, replay, verify\n"
            "parser = cli.build_parser()\n"
            "parser.parse_args(['train', '--game', 'breakout', '--num-envs', '8'])\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
    result = subprocess.run([sys.executable, "-m", "hybridsim", "games"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "pong" in result.stdout


def test_run_flat_rejects_bad_memory():
    with pytest.raises(ValueError, match="65536"):
        cpu.run_flat(np.zeros(100, dtype=np.uint8), 0)
    with pytest.raises(ValueError, match="uint8"):
        cpu.run_flat(np.zeros(65536, dtype=np.int32), 0)


def test_functional_test_loader_rejects_wrong_size(tmp_path):
    bad = tmp_path / "short.bin"
    bad.write_bytes(b"\0" * 10)
    with pytest.raises(ValueError, match="65,536"):
        cpu.load_functional_test(bad)


def test_assembler_errors_name_the_problem():
    with pytest.raises(ValueError, match="no opcode for LDA in mode ind"):
        opcode_for("LDA", "ind")
    asm = Assembler(0x1000)
    asm.op("BNE", "rel", "nowhere")
    with pytest.raises(ValueError, match="undefined label 'nowhere'"):
        asm.assemble()
    far = Assembler(0x1000)
    far.label("top")
    for _ in range(70):
        far.op("NOP", "abs", 0x2000)
    far.op("BNE", "rel", "top")
    with pytest.raises(ValueError, match="out of range"):
        far.assemble()


def test_the_sdist_carries_what_the_build_needs(tmp_path):
    """An sdist built without pyx/*.pyx installed as a package with no extensions (setup.py
    found nothing to compile): every tracked source the build reads must be in it."""
    import pathlib
    import tarfile
    repo = pathlib.Path(__file__).resolve().parent.parent
    tracked = subprocess.run(["git", "ls-files", "pyx", "cuda", "data", "mpi_launch"], cwd=repo,
                             capture_output=True, text=True)
    if tracked.returncode != 0 or not tracked.stdout:
        pytest.skip("not a git checkout")
    result = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path),
                             "sdist", "-d", str(tmp_path)], cwd=repo, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    (archive,) = tmp_path.glob("hybridsim-*.tar.gz")
    with tarfile.open(archive) as tar:
        inside = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    needed = set(tracked.stdout.split()) | {"setup.py", "setup.cfg", "pyproject.toml", "LICENSE"}
    assert not needed - inside, sorted(needed - inside)
    assert not {n for n in inside if n.startswith("pyx/") and n.endswith(".cpp")}  # generated


def test_a_build_without_a_cpp_compiler_names_it(tmp_path):
    """No traceback and no half-built tree: setuptools' one "error:" line names the compiler."""
    import os
    import pathlib
    repo = pathlib.Path(__file__).resolve().parent.parent
    if not (repo / "setup.py").exists():
        pytest.skip("not a source checkout")
    missing = str(tmp_path / "no-such-g++")
    result = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-temp", str(tmp_path / "t"),
                             "--build-lib", str(tmp_path / "l")], cwd=repo, capture_output=True, text=True,
                            env={**os.environ, "CXX": missing}, timeout=300)
    assert result.returncode != 0
    assert f"error: no C++ compiler: {missing!r}" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "l").rglob("*.so"))


@pytest.mark.parametrize("command", [["games"], ["info", "--brief"], ["launchers"],
                                     ["verify", "--games", "pong", "--frames", "30"]])
def test_a_closed_output_pipe_ends_quietly(command):
    """`hybridsim games | head -2`: stdout's reader has gone. A status of 128 + SIGPIPE, as
    a program the signal ended, and no traceback or 'error: Broken pipe' (status 2, which
    reads as bad settings). Both paths: a print that fails, and the flush at the end."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before anything is written
    try:
        done = subprocess.run([sys.executable, "-m", "hybridsim", *command], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr
