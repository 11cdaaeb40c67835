"""The launch files as installed with the package (hybridsim/mpi_launch): `hybridsim
launchers DEST` copies them out, the `hybridsim-mpirun` script runs the installed wrapper.
(test_slurm.py submits such a copy to a real Slurm cluster.)"""
import os
import pathlib
import re
import stat
import subprocess
import sys

import pytest

import hybridsim
from hybridsim import launchers

REPO = pathlib.Path(__file__).resolve().parent.parent
CHECKOUT_LAUNCH = REPO / "mpi_launch"


def hybridsim_command(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "hybridsim", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=env)


def fake_mpiexec(folder):
    """A hydra mpiexec that only answers --version (enough for --dry-run)."""
    path = pathlib.Path(folder) / "mpiexec"
    path.write_text("#!/bin/bash\n[ \"$1\" = --version ] && echo 'HYDRA build details:'\nexit 0\n")
    path.chmod(0o755)
    return path


def test_the_package_carries_every_launch_file_with_its_mode():
    tracked = subprocess.run(["git", "ls-files", "mpi_launch"], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout:
        assert sorted(launchers.LAUNCH_FILES) == sorted(n.split("/", 1)[1] for n in tracked.stdout.split())
    folder = launchers.launch_dir()
    package = pathlib.Path(hybridsim.__file__).resolve().parent
    if package.parent != REPO:  # an installed hybridsim: its own copy, not the checkout's
        assert folder == package / "mpi_launch"
    for name, executable in launchers.LAUNCH_FILES.items():
        assert os.access(folder / name, os.X_OK) == executable, name
        if CHECKOUT_LAUNCH.is_dir():
            assert (folder / name).read_bytes() == (CHECKOUT_LAUNCH / name).read_bytes(), name


def test_launchers_without_a_destination_prints_where_they_are():
    done = hybridsim_command("launchers")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(launchers.launch_dir())


def test_launchers_copies_the_files_and_never_overwrites_an_edited_one(tmp_path):
    done = hybridsim_command("launchers", "site", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "site" / "mpi_launch"
    assert f"wrote 7 launch files into {copy}\n" in done.stdout
    # (the child names this interpreter by its normalized path: CI starts pytest as ../.venv/bin/python)
    submit = re.search(r"HYBRIDSIM_DIR=(\S+) PYTHON=(\S+) (?:MPIEXEC=(\S+) )?GAME=pong", done.stdout)
    assert submit and submit[1] == str(tmp_path / "site"), done.stdout
    assert os.path.samefile(submit[2], sys.executable)
    beside = launchers.python_mpiexec()  # pip's MPICH installed for this Python, if it is
    assert (submit[3] is None) == (beside is None) and (beside is None or os.path.samefile(submit[3], beside))
    for name, executable in launchers.LAUNCH_FILES.items():
        assert (copy / name).read_bytes() == (launchers.launch_dir() / name).read_bytes()
        assert stat.S_IMODE((copy / name).stat().st_mode) == (0o755 if executable else 0o644), name
    assert sorted(p.name for p in copy.rglob(".*")) == []  # no temporary file left
    (copy / "rank_env.sh").chmod(0o644)  # a copy that lost its modes gets them back
    again = hybridsim_command("launchers", str(tmp_path / "site"))
    assert again.returncode == 0 and "wrote 0 launch files" in again.stdout
    assert "(7 already there, identical)" in again.stdout
    assert stat.S_IMODE((copy / "rank_env.sh").stat().st_mode) == 0o755

    template = copy / "slurm" / "single_node.sbatch"
    template.write_text(template.read_text().replace("--time=24:00:00", "--time=02:00:00"))
    (copy / "rank_env.sh").unlink()
    refused = hybridsim_command("launchers", str(tmp_path / "site"))
    assert refused.returncode == 2
    assert (f"hybridsim launchers: error: 1 launch file(s) already exist with other contents (edited, or "
            f"copied by another hybridsim version), left as they are: {template}; ") in refused.stderr
    assert "--time=02:00:00" in template.read_text()
    assert not (copy / "rank_env.sh").exists()  # refused before anything was written
    replaced = hybridsim_command("launchers", str(tmp_path / "site"), "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert "wrote 2 launch files" in replaced.stdout and "replaced slurm/single_node.sbatch" in replaced.stdout
    assert template.read_bytes() == (launchers.launch_dir() / "slurm" / "single_node.sbatch").read_bytes()
    assert stat.S_IMODE(template.stat().st_mode) == 0o755 and (copy / "rank_env.sh").is_file()
    assert sorted(p.name for p in copy.rglob(".*")) + sorted(p.name for p in copy.rglob("*.tmp")) == []


@pytest.mark.parametrize("case", ["a file", "a folder in the way", "a file where a folder goes", "under a file",
                                  "the installed folder", "an empty path"])
def test_launchers_refuses_a_destination_it_cannot_use(tmp_path, case):
    dest = tmp_path / "x"
    if case == "a file":
        (dest / "mpi_launch").parent.mkdir()
        (dest / "mpi_launch").write_text("")
        message = f"the launch folder {dest / 'mpi_launch'}: is a file, not a directory"
    elif case == "a folder in the way":
        (dest / "mpi_launch" / "rank_env.sh").mkdir(parents=True)
        message = f"in the way of the launch files: {dest / 'mpi_launch' / 'rank_env.sh'} (not a file)"
    elif case == "a file where a folder goes":  # refused before a file is written
        (dest / "mpi_launch").mkdir(parents=True)
        (dest / "mpi_launch" / "slurm").write_text("")
        message = f"in the way of the launch files: {dest / 'mpi_launch' / 'slurm'} (a file where a folder of them goes)"
    elif case == "under a file":
        tmp_path.joinpath("f").write_text("")
        dest = tmp_path / "f" / "x"
        message = f"the launch folder {dest / 'mpi_launch'}: {tmp_path / 'f'} is a file, not a directory"
    elif case == "the installed folder":
        dest = launchers.launch_dir().parent
        message = "is where the launch files are installed"
    else:
        dest = ""
        message = "dest: an empty path"
    done = subprocess.run([sys.executable, "-m", "hybridsim", "launchers", str(dest), "--overwrite"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "mpi_launch").exists()
    if case == "a file where a folder goes":
        assert [p.name for p in (dest / "mpi_launch").iterdir()] == ["slurm"]


def test_a_copied_template_finds_its_launch_files(tmp_path):
    """The copy runs as the checkout does: a template given HYBRIDSIM_DIR=DEST gets past its
    mpi_launch/ check (and then stops on the sweep index, before anything needs Slurm)."""
    assert hybridsim_command("launchers", str(tmp_path / "site")).returncode == 0
    env = dict(os.environ, HYBRIDSIM_DIR=str(tmp_path / "site"), GAMES="pong", SEEDS="1",
               SLURM_ARRAY_TASK_ID="5", SWEEP_DIR=str(tmp_path / "sweep"))
    done = subprocess.run(["bash", str(tmp_path / "site" / "mpi_launch" / "slurm" / "array.sbatch")],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "task 5, but GAMES x SEEDS has 1 pairs" in done.stdout, \
        done.stdout + done.stderr


def test_hybridsim_mpirun_runs_the_installed_wrapper_with_this_python(tmp_path):
    fake = fake_mpiexec(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON" and not k.startswith("SLURM_")}
    script = pathlib.Path(sys.executable).parent / "hybridsim-mpirun"  # pip's console script
    start = [str(script)] if script.is_file() else [
        sys.executable, "-c", "import sys; from hybridsim.launchers import mpirun; sys.exit(mpirun())"]
    args = ["--ranks-per-node", "2", "--threads-per-rank", "1", "--no-bind", "--mpiexec", str(fake),
            "--dry-run", "--", "--game", "pong"]
    done = subprocess.run([*start, *args], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    rank_env = str(launchers.launch_dir() / "rank_env.sh")
    python, *rest = words[words.index(rank_env) + 1:]
    # the console script's own interpreter: this venv's python, maybe by another of its names
    assert os.path.samefile(python, sys.executable), python
    assert rest == ["-m", "mpi4py", "-m", "hybridsim", "train", "--game", "pong", "--num-threads", "1",
                    "--torch-threads", "1"]
    chosen = subprocess.run([*start, *args], capture_output=True, text=True, timeout=60,
                            env={**env, "PYTHON": "/opt/other/python3"})
    assert f"{rank_env} /opt/other/python3 -m mpi4py" in chosen.stdout, chosen.stdout + chosen.stderr
    bad = subprocess.run([*start, "--ranks-per-node", "0"], capture_output=True, text=True, timeout=60,
                         env=env)
    assert bad.returncode == 2 and "hybridsim-mpirun" in bad.stderr, bad.stderr

    # no --mpiexec: the mpiexec beside this Python, not another MPI's first on PATH
    beside = launchers.python_mpiexec()
    if beside is None:
        return
    other = tmp_path / "other"
    other.mkdir()
    fake_mpiexec(other)
    path_first = {**{k: v for k, v in env.items() if k != "MPIEXEC"},
                  "PATH": f"{other}{os.pathsep}{env.get('PATH', '')}"}
    default = subprocess.run([*start, "--ranks-per-node", "1", "--threads-per-rank", "1", "--no-bind", "--dry-run",
                              "--", "--game", "pong"], capture_output=True, text=True, timeout=60, env=path_first)
    assert default.returncode == 0, default.stderr
    assert os.path.samefile(default.stdout.split()[0], beside), default.stdout


def test_hybridsim_mpirun_leaves_the_launcher_to_an_mpi_flavour_given(monkeypatch):
    """pip's MPICH is the default launcher, but not when --mpi-flavor names the kind wanted
    (its hydra would be refused as not Open MPI), nor over $MPIEXEC."""
    beside = launchers.python_mpiexec()
    if beside is None:
        pytest.skip("no pip MPICH installed for this Python")
    started = []
    monkeypatch.setattr(os, "execve", lambda program, args, env: started.append(env))
    monkeypatch.delenv("MPIEXEC", raising=False)
    launchers.mpirun(["--dry-run", "--", "--game", "pong"])
    launchers.mpirun(["--mpi-flavor", "openmpi", "--dry-run", "--", "--game", "pong"])
    launchers.mpirun(["--mpi-flavor=openmpi", "--dry-run", "--", "--game", "pong"])
    monkeypatch.setenv("MPIEXEC", "/opt/site/mpiexec")
    launchers.mpirun(["--dry-run", "--", "--game", "pong"])
    assert [env.get("MPIEXEC") for env in started] == [beside, None, None, "/opt/site/mpiexec"]  # in-process
