"""Training under a system MPI: Debian's Open MPI `mpirun`, through mpi_launch/hybridsim-mpirun
and directly (test_dist.py and test_slurm.py use pip's MPICH). Skipped without Open MPI
(scripts/ci_install_system.sh installs openmpi-bin) or without an mpi4py that can load it
(the PyPI wheels 4.1+ carry an Open MPI build next to the MPICH one)."""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ale_py")
pytest.importorskip("mpi4py")

from mpi_util import FAULT_SCRIPT  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
WRAPPER = REPO / "mpi_launch" / "hybridsim-mpirun"
TRAIN_ARGS = ["--game", "pong", "--backend", "cpu", "--total-frames", "1280", "--num-minibatches", "2",
              "--num-threads", "1", "--torch-threads", "1", "--noop-max", "5", "--log-every", "0"]
# 2 ranks x 1 core each: bound where this machine has 2 cores (the wrapper refuses to
# bind more cores than the node has)
BIND_2X1 = [] if (os.cpu_count() or 1) >= 2 else ["--no-bind"]


def open_mpi_mpirun() -> str:
    """Open MPI's mpirun (Debian installs it as mpirun.openmpi), else skip."""
    for name in ("mpirun.openmpi", "mpirun"):
        exe = shutil.which(name)
        if exe:
            version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
            if "Open MPI" in version or "OpenRTE" in version:  # mpirun.openmpi says OpenRTE
                break
    else:
        pytest.skip("no Open MPI mpirun (scripts/ci_install_system.sh installs openmpi-bin)")
    import mpi4py
    package = pathlib.Path(mpi4py.__file__).parent
    if not (package / "_mpiabi.py").exists() or not list(package.glob("MPI.openmpi*")):
        pytest.skip("this mpi4py has no Open MPI build (the PyPI wheels 4.1+ have one)")
    return exe


def job_env(**extra) -> dict:
    import hybridsim
    home = str(pathlib.Path(hybridsim.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")])),
               **extra)
    if os.geteuid() == 0:  # Open MPI refuses root unless both are set (mpirun(1))
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("MPI4PY_MPIABI", None)
    env.pop("MPI4PY_LIBMPI", None)
    return env


def final_parameters(run_dir):
    state = torch.load(pathlib.Path(run_dir) / "checkpoint.pt", weights_only=False)
    return torch.cat([v.flatten().float() for v in state["model"].values()]), state


def test_wrapper_trains_two_open_mpi_ranks_like_one_rank(tmp_path):
    """The wrapper picks mpi4py's Open MPI build (pip's mpich would otherwise abort in
    MPI_Init under Open MPI's mpirun), binds each rank to its own core, and 2 ranks x 4
    environments end with the parameters of 1 process x 8."""
    exe = open_mpi_mpirun()
    one = subprocess.run([sys.executable, "-m", "hybridsim", "train", *TRAIN_ARGS, "--num-envs", "8",
                          "--log-dir", str(tmp_path / "one")], capture_output=True, text=True, timeout=600,
                         env=job_env())
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", *BIND_2X1,
                          "--gpus-per-node", "0", "--mpiexec", exe, "--python", sys.executable, "--",
                          *TRAIN_ARGS, "--num-envs", "4", "--log-dir", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=600,
                         env=job_env(HYBRIDSIM_RANK_ENV_VERBOSE="1"))
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-3000:]
    assert "MPI: openmpi" in two.stderr
    ranks = [line for line in two.stderr.splitlines() if line.startswith("rank_env.sh:")]
    assert len(ranks) == 2 and all("CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1" in r for r in ranks), ranks
    if not BIND_2X1 and len(os.sched_getaffinity(0)) >= 2:
        cpus = sorted(r.split("Cpus_allowed_list: ")[-1].strip() for r in ranks)
        assert len(set(cpus)) == 2 and all(c.isdigit() for c in cpus), ranks
    p1, s1 = final_parameters(tmp_path / "one")
    p2, s2 = final_parameters(tmp_path / "two")
    assert s2["world_size"] == 2 and s1["frames"] == s2["frames"] and s1["updates"] == s2["updates"]
    torch.testing.assert_close(p1, p2, rtol=1e-4, atol=1e-5)
    for rank in (0, 1):
        assert (tmp_path / "two" / f"traj_rank{rank:05d}.h5").is_file()


def test_sigusr1_to_the_wrapper_checkpoints_and_ends_with_status_3(tmp_path):
    """What the Slurm templates do before the time limit, under Open MPI: SIGUSR1 to the
    wrapper (exec'd into mpirun, which forwards it to the ranks) ends the job with status 3,
    which the templates requeue on, after a checkpoint the run resumes from."""
    exe = open_mpi_mpirun()
    run = tmp_path / "run"
    job = subprocess.Popen([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", *BIND_2X1,
                            "--gpus-per-node", "0", "--mpiexec", exe, "--python", sys.executable, "--",
                            *TRAIN_ARGS, "--total-frames", "10000000", "--num-envs", "2", "--log-dir", str(run)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=job_env())
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.csv").is_file() or len((run / "metrics.csv").read_text().splitlines()) < 3:
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()[0][-3000:]
            time.sleep(0.5)
        job.send_signal(signal.SIGUSR1)
        output = job.communicate(timeout=120)[0]
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 3, output[-3000:]
    stopped = re.findall(r"stopped by a signal at ([\d,]+) frames", output)
    assert len(stopped) == 1, output[-3000:]  # rank 0 reports it
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["frames"] == int(stopped[0].replace(",", "")) > 0 and state["world_size"] == 2


@pytest.mark.parametrize("mode", ["kill", "exception"])
def test_a_failing_open_mpi_rank_ends_the_whole_job(tmp_path, mode):
    exe = open_mpi_mpirun()
    script = tmp_path / "faulty.py"
    script.write_text(FAULT_SCRIPT)
    start = time.monotonic()
    result = subprocess.run([exe, "-n", "2", "--oversubscribe", "-x", "MPI4PY_MPIABI=openmpi", "-x", "PYTHONPATH",
                             sys.executable, "-m", "mpi4py", str(script), mode, str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=180, env=job_env())
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    assert time.monotonic() - start < 150
    if mode == "exception":
        assert "injected failure on rank 1" in output, output[-2000:]
    else:
        assert "signal 9" in output.lower() or "killed" in output.lower(), output[-2000:]


def test_rank_env_failing_on_one_open_mpi_rank_ends_the_job():
    """rank_env.sh exits with status 2 on a rank whose GPU slot is missing; Open MPI's
    mpirun then ends the other rank (here a 60 s sleep) at once."""
    exe = open_mpi_mpirun()
    start = time.monotonic()
    result = subprocess.run([exe, "-n", "2", "--oversubscribe", "-x", "HYBRIDSIM_GPUS_PER_NODE=2",
                             "-x", "CUDA_VISIBLE_DEVICES=0", str(REPO / "mpi_launch" / "rank_env.sh"),
                             "sleep", "60"], capture_output=True, text=True, timeout=90, env=job_env())
    assert result.returncode == 2, result.stdout + result.stderr
    assert "local rank 1 wants GPU slot 1 of CUDA_VISIBLE_DEVICES (0)" in result.stderr
    assert time.monotonic() - start < 30
