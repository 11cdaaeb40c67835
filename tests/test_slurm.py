"""mpi_launch/: the hybridsim-mpirun wrapper and the Slurm batch templates, run on a real
one-node Slurm cluster started by tests/slurm_cluster.py (skipped without slurm-wlm and
munge: scripts/ci_install_system.sh installs them)."""
import csv
import math
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("ale_py")
pytest.importorskip("mpi4py")

from mpi_util import mpiexec_or_skip  # noqa: E402
from slurm_cluster import SlurmCluster, missing_requirements  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCH = REPO / "mpi_launch"
WRAPPER = LAUNCH / "hybridsim-mpirun"
TINY = "--num-minibatches 1 --log-every 0 --noop-max 5"
# 2 ranks x 1 core each: bound where this machine has 2 cores (the wrapper refuses to
# bind more cores than the node has)
NODE_CORES = int(os.environ.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1)
BIND_2X1 = [] if NODE_CORES >= 2 else ["--no-bind"]


def hydra_mpiexec():
    exe = mpiexec_or_skip()
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    if "HYDRA" not in version:
        pytest.skip(f"{exe} is not MPICH's hydra mpiexec")
    return exe


def python_path():
    """PYTHONPATH for the jobs: where this test's hybridsim comes from (installed, or a
    checkout built in place), first."""
    import hybridsim
    home = str(pathlib.Path(hybridsim.__file__).resolve().parent.parent)
    return os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")]))


def job_env(**settings):
    """Environment for sbatch: the template settings plus this interpreter and MPI."""
    env = {"PYTHON": sys.executable, "MPIEXEC": mpiexec_or_skip(), "HYBRIDSIM_DIR": str(REPO),
           "BACKEND": "ale-py", "NUM_ENVS": "2", "EXTRA_ARGS": TINY}
    env["PYTHONPATH"] = python_path()
    env.update({k: str(v) for k, v in settings.items()})
    return env


def metrics_frames(log_dir):
    path = pathlib.Path(log_dir) / "metrics.csv"
    if not path.exists():
        return []
    with open(path) as f:
        return [int(row["frames"]) for row in csv.DictReader(f) if row.get("frames", "").isdigit()]


@pytest.fixture(scope="module")
def cluster():
    why = missing_requirements()
    if why:
        pytest.skip(why)
    c = SlurmCluster().start()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(c.conf)  # for any Slurm command a test runs
    try:
        yield c
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        c.stop()


def read(path):
    return pathlib.Path(path).read_text(errors="replace") if pathlib.Path(path).exists() else "(no file)"


# The template asks for 4 ranks x 8 cores for 24 h; this machine's cluster gets 2 x 1 for
# 10 minutes (the fixture cancels every job at the end; Slurm's limit is the backstop). The
# USR1 warning comes 5 s before that limit rather than 300 s, and sbatch(1) allows it up to
# 60 s early: still minutes after these ~35 s jobs end. The USR1 test sends its own.
SMALL_JOB = ["--ntasks-per-node=2", "--cpus-per-task=1", "--time=10", "--signal=B:USR1@5"]


def test_single_node_template_trains_to_the_budget(cluster, tmp_path):
    log_dir, out = tmp_path / "run", tmp_path / "job.out"
    job = cluster.sbatch(LAUNCH / "slurm" / "single_node.sbatch", *SMALL_JOB, f"--output={out}",
                         env=job_env(LOG_DIR=log_dir, TOTAL_FRAMES=2000), cwd=tmp_path)
    info = cluster.wait_job(job, timeout=170)
    assert info["JobState"] == "COMPLETED", read(out)
    for name in ("checkpoint.pt", "metrics.csv", "traj_rank00000.h5", "traj_rank00001.h5"):
        assert (log_dir / name).is_file(), f"{name} missing\n{read(out)}"
    assert metrics_frames(log_dir)[-1] >= 2000
    import torch
    assert torch.load(log_dir / "checkpoint.pt", weights_only=False)["frames"] >= 2000
    assert "resuming" not in read(out)
    assert_placement_logged(read(out), ranks=2)


def assert_placement_logged(text, ranks):
    """The template logged hybridsim-mpirun --check: one line per rank, one core each
    (--cpus-per-task=1), different cores where the machine has them."""
    lines = [line.strip() for line in text.splitlines() if line.startswith("  rank ")]
    assert [line.split()[1] for line in lines] == [f"{r}/{ranks}" for r in range(ranks)], text
    assert all(" OMP_NUM_THREADS=1 engine threads 1 " in line for line in lines), lines
    if len(os.sched_getaffinity(0)) >= ranks:
        cores = [line.split(" cores ")[1].split()[0] for line in lines]
        assert len(set(cores)) == ranks and all(c.isdigit() for c in cores), lines


def test_usr1_checkpoints_requeues_and_resumes(cluster, tmp_path):
    log_dir, out, budget = tmp_path / "run", tmp_path / "job.out", tmp_path / "budget"
    job = cluster.sbatch(LAUNCH / "slurm" / "single_node.sbatch", *SMALL_JOB, f"--output={out}",
                         env=job_env(LOG_DIR=log_dir, TOTAL_FRAMES=10**9, TOTAL_FRAMES_FILE=budget),
                         cwd=tmp_path)
    deadline = time.monotonic() + 90
    while len(metrics_frames(log_dir)) < 3:
        info = cluster.job_info(job)
        assert time.monotonic() < deadline and info.get("JobState") in ("PENDING", "RUNNING"), \
            f"{info.get('JobState')}\n{read(out)}"
        time.sleep(0.5)
    # What Slurm does at `--signal=B:USR1@T` before the time limit, sent now. The budget
    # file is read when the job starts again: the resumed run trains 2000 more frames.
    budget.write_text(str(metrics_frames(log_dir)[-1] + 2000))
    subprocess.run(["scancel", "--signal=USR1", "--batch", str(job)], env=cluster.env,
                   check=True, timeout=30)
    # Slurm holds a requeued job back for about two minutes (Reason=BeginTime). Once the
    # first run has fully ended (its slurmstepd done, the node idle), skip that wait as an
    # administrator would, but not within the second of the requeue: the requeue revokes
    # the job's credential at a time in whole seconds, and slurmd refuses a launch whose
    # credential was created in that same second or before (Slurm 22.05
    # src/common/slurm_cred.c, slurm_cred_revoked: cred->ctime <= revoked), so the job
    # "ran" with exit status 1 and no output ("Killing non-startable batch JobId=N: Job
    # credential revoked" in slurmctld's log, "Job N already killed, do not launch batch
    # job" in slurmd's). Slurm's own two-minute hold is what normally keeps clear of it.
    cluster.wait_job(job, timeout=90, until=lambda i: i.get("Restarts") == "1")
    requeued_by = time.time()  # the requeue (and revocation) happened at or before this
    cluster.wait_step_done(f"{job}.batch", timeout=60)
    cluster.wait_node_idle(timeout=60)
    time.sleep(max(0.0, math.floor(requeued_by) + 1.5 - time.time()))  # into a later second
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and cluster.job_info(job).get("JobState") == "PENDING":
        # (its Reason reads None, not BeginTime, until the scheduler has looked at it)
        cluster.scontrol("update", f"JobId={job}", "StartTime=now")
        time.sleep(2)
    info = cluster.wait_job(job, timeout=150)
    text = read(out)
    assert info["JobState"] == "COMPLETED" and info.get("Restarts") == "1", \
        f"{info}\n{text}\n{cluster.daemon_logs(60)}"
    assert "requeueing" in text and "resuming from" in text, text
    assert "Abort(" not in text, text  # the stop's status 3 is no MPI_Abort (dist.finalize_stopped_job)
    frames = metrics_frames(log_dir)
    stopped = int(text.split("stopped by a signal at ")[1].split()[0].replace(",", ""))
    target = int(budget.read_text())
    assert stopped in frames and frames == sorted(frames), frames  # continued, not restarted
    assert frames[-1] >= target > stopped
    import torch
    assert torch.load(log_dir / "checkpoint.pt", weights_only=False)["frames"] == frames[-1]


def test_multi_node_template_on_one_node(cluster, tmp_path):
    # This cluster has one node: the template's path (node list from Slurm, hydra's srun
    # proxies, ranks per node) with --nodes=1. Submitted as a pip-installed hybridsim's
    # user would: a copy made by `hybridsim launchers`, outside any checkout.
    log_dir, out, site = tmp_path / "run", tmp_path / "job.out", tmp_path / "site"
    copied = subprocess.run([sys.executable, "-m", "hybridsim", "launchers", str(site)], capture_output=True,
                            text=True, timeout=60, env=dict(os.environ, PYTHONPATH=python_path()))
    assert copied.returncode == 0, copied.stderr
    job = cluster.sbatch(site / "mpi_launch" / "slurm" / "multi_node.sbatch", "--nodes=1", *SMALL_JOB,
                         f"--output={out}", env=job_env(LOG_DIR=log_dir, TOTAL_FRAMES=1000, HYBRIDSIM_DIR=site),
                         cwd=tmp_path)
    info = cluster.wait_job(job, timeout=170)
    assert info["JobState"] == "COMPLETED", read(out)
    assert "1 nodes x 2 ranks" in read(out)
    assert_placement_logged(read(out), ranks=2)
    assert (log_dir / "traj_rank00001.h5").is_file() and metrics_frames(log_dir)[-1] >= 1000


def test_array_template_sweeps_games_and_seeds(cluster, tmp_path):
    import torch
    sweep = tmp_path / "sweep"
    job = cluster.sbatch(LAUNCH / "slurm" / "array.sbatch", "--array=0-1", "--ntasks-per-node=1",
                         "--cpus-per-task=1", "--time=3", "--signal=B:USR1@5",
                         f"--output={tmp_path}/%A_%a.out",
                         env=job_env(GAMES="pong breakout", SEEDS="7", SWEEP_DIR=sweep,
                                     TOTAL_FRAMES=800), cwd=tmp_path)
    for task, game in enumerate(["pong", "breakout"]):
        info = cluster.wait_job(f"{job}_{task}", timeout=170)
        out = tmp_path / f"{job}_{task}.out"
        assert info["JobState"] == "COMPLETED", read(out)
        state = torch.load(sweep / f"{game}-seed7" / "checkpoint.pt", weights_only=False)
        assert (state["config"]["game"], state["config"]["seed"]) == (game, 7)
        assert state["frames"] >= 800


@pytest.mark.parametrize("name", ["single_node.sbatch", "multi_node.sbatch", "array.sbatch"])
def test_templates_requeue_on_a_batch_shell_signal(name):
    path = LAUNCH / "slurm" / name
    text = path.read_text()
    for directive in ("#SBATCH --requeue", "#SBATCH --signal=B:USR1@", "#SBATCH --open-mode=append"):
        assert directive in text, directive
    assert "run_preemptible" in text and "hybridsim_resume_flag" in text
    assert subprocess.run(["bash", "-n", str(path)], timeout=30).returncode == 0
    assert os.access(path, os.X_OK)


@pytest.mark.parametrize("template", ["single_node.sbatch", "multi_node.sbatch"])
def test_a_template_logs_what_train_is_given(template, tmp_path):
    """With CONFIG the log line printed the template's defaults (pong, 64 envs, 50M
    frames) while train ran the recipe's (kung_fu_master, 16 envs, 400k): it names the
    arguments train is given. Outside Slurm, with a launcher that only answers --version."""
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/bash\n[ \"$1\" = --version ] && echo 'HYDRA build details:'\nexit 0\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(CONFIG="quickstart", HYBRIDSIM_DIR=str(REPO), MPIEXEC=str(fake), PYTHON=sys.executable,
               CHECK_PLACEMENT="0", LOG_DIR=str(tmp_path / "run"), PYTHONPATH=python_path())
    done = subprocess.run(["bash", str(LAUNCH / "slurm" / template)], capture_output=True, text=True,
                          env=env, timeout=120)
    line = next(line for line in (done.stdout + done.stderr).splitlines() if ": train " in line)
    assert line.endswith(f"train --log-dir {tmp_path / 'run'} --config quickstart"), line
    assert "pong" not in line and "64" not in line


def test_wrapper_dry_run_for_mpich():
    exe = hydra_mpiexec()
    proc = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "3",
                           "--gpus-per-node", "2", "--mpiexec", exe, "--python", sys.executable,
                           "--dry-run", "--", "--backend", "ale-py", "--game", "pong"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    cmd = proc.stdout.split()
    assert cmd[:5] == [exe, "-n", "2", "-ppn", "2"]
    assert "-bind-to core:3" in proc.stdout
    assert "-genv OMP_NUM_THREADS 3" in proc.stdout
    assert "-genv HYBRIDSIM_GPUS_PER_NODE 2" in proc.stdout
    tail = cmd[cmd.index(str(LAUNCH / "rank_env.sh")):]
    assert tail == [str(LAUNCH / "rank_env.sh"), sys.executable, "-m", "mpi4py", "-m", "hybridsim",
                    "train", "--backend", "ale-py", "--game", "pong", "--num-threads", "3",
                    "--torch-threads", "3"]
    two_hosts = subprocess.run([str(WRAPPER), "--hosts", "a,b", "--ranks-per-node", "4",
                                "--threads-per-rank", "1", "--mpiexec", exe, "--dry-run", "--",
                                "--num-threads", "2"], capture_output=True, text=True, timeout=30)
    assert "-n 8 -ppn 4 -hosts a,b" in two_hosts.stdout
    assert two_hosts.stdout.count("--num-threads") == 1
    abbreviated = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1",
                                  "--mpiexec", exe, "--dry-run", "--", "--num-thread", "4", "--torch=2"],
                                 capture_output=True, text=True, timeout=30)
    assert abbreviated.returncode == 0, abbreviated.stderr
    tail = abbreviated.stdout.split()
    assert tail[tail.index("train"):] == ["train", "--num-thread", "4", "--torch=2"]  # argparse's abbreviations


@pytest.mark.parametrize("args, message", [
    (["--ranks-per-node", "0", "--"], "--ranks-per-node must be a positive integer"),
    (["--threads-per-rank", "x", "--"], "--threads-per-rank must be a positive integer"),
    (["--gpus-per-node", "-1", "--"], "--gpus-per-node must be a non-negative integer"),
    (["--hosts", "a,a", "--"], "host listed twice"),
    (["--ranks-per-node", "2"], "missing '--'"),
    (["--frobnicate", "--"], "unknown option '--frobnicate'"),
    (["--mpiexec", "/nonexistent/mpiexec", "--"], "not found"),
    (["--hosts=", "--"], "--hosts needs a value"),
    # bash's arithmetic wraps past 2^63: the length is checked first (was 'must be a positive
    # integer', which it is); a bound above any node's CPUs (999999 was taken: 2e6 ranks)
    (["--ranks-per-node", "99999999999999999999", "--dry-run", "--"],
     "--ranks-per-node 99999999999999999999 is too large: at most 8192 per node"),
    (["--hosts", "a,b", "--ranks-per-node", "100000000", "--dry-run", "--", "--game", "pong"],
     "--ranks-per-node 100000000 is too large: at most 8192"),
    (["--hosts", "a,b", "--ranks-per-node", "8193", "--dry-run", "--", "--game", "pong"],
     "--ranks-per-node 8193 is too large: at most 8192"),
    (["--hosts", "a,b", "--threads-per-rank", "99999", "--dry-run", "--", "--game", "pong"],
     "--threads-per-rank 99999 is too large: at most 8192"),
    (["--gpus-per-node", "99999", "--dry-run", "--", "--game", "pong"], "--gpus-per-node 99999 is too large"),
    (["--hosts", "a,b", "--ranks-per-node", "8192", "--threads-per-rank", "2", "--dry-run", "--", "--game",
      "pong"], "8192 ranks x 2 threads per node would bind 16384 cores, more than any node has"),
    # '--' with nothing after it trained with every default (was status 0)
    (["--dry-run", "--"], "'--' must be followed by the hybridsim train arguments"),
    (["--dry-run", "--", "train"], "'--' must be followed by the hybridsim train arguments"),
    # a bad flavour named before the launcher is looked for (was 'launcher not found' first)
    (["--mpi-flavor", "lam", "--mpiexec", "/nonexistent/mpiexec", "--", "--game", "pong"],
     "--mpi-flavor must be mpich or openmpi, got 'lam'"),
    (["--gpus-per-node", "08", "--"], "--gpus-per-node must be a non-negative integer"),
    (["--python", "/nonexistent/python", "--"], "no Python interpreter at '/nonexistent/python'"),
    # not asked for its --version, still checked (was bash's exit status 127 at the exec)
    (["--mpiexec", "/nonexistent/mpiexec", "--mpi-flavor", "mpich", "--python", sys.executable,
      "--"], "MPI launcher '/nonexistent/mpiexec' not found"),
])
def test_wrapper_rejects_bad_arguments(args, message):
    proc = subprocess.run([str(WRAPPER), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_wrapper_runs_two_local_ranks(tmp_path):
    exe = mpiexec_or_skip()
    env = dict(os.environ, HYBRIDSIM_RANK_ENV_VERBOSE="1",
               PYTHONPATH=python_path())
    proc = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", *BIND_2X1,
                           "--gpus-per-node", "0", "--mpiexec", exe, "--python", sys.executable,
                           "--", "--backend", "ale-py", "--num-envs", "2", "--total-frames", "2000",
                           "--log-dir", str(tmp_path), *TINY.split()],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for name in ("checkpoint.pt", "metrics.csv", "traj_rank00000.h5", "traj_rank00001.h5"):
        assert (tmp_path / name).is_file(), name
    assert metrics_frames(tmp_path)[-1] >= 2000
    ranks = [line for line in proc.stderr.splitlines() if line.startswith("rank_env.sh:")]
    assert len(ranks) == 2, proc.stderr
    assert all("OMP_NUM_THREADS=1" in r and "CUDA_VISIBLE_DEVICES= " in r for r in ranks), ranks
    if len(os.sched_getaffinity(0)) >= 2:  # bound to one core each, different cores
        cpus = sorted(r.split("Cpus_allowed_list: ")[-1].strip() for r in ranks)
        assert len(set(cpus)) == 2 and all(c.isdigit() for c in cpus), ranks


def test_wrapper_check_shows_where_each_rank_lands(tmp_path):
    """--check launches the ranks with the placement a training run gets, each printing
    `hybridsim info --brief`, in rank order: different cores, one thread each, GPUs hidden.
    Unbound ranks see every core, but train's engine still gets the wrapper's one thread."""
    exe = mpiexec_or_skip()
    env = dict(os.environ, PYTHONPATH=python_path())
    for binding in ([BIND_2X1, ["--no-bind"]] if BIND_2X1 == [] else [BIND_2X1]):
        proc = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", *binding,
                               "--gpus-per-node", "0", "--mpiexec", exe, "--python", sys.executable, "--check"],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        lines = proc.stdout.splitlines()
        assert [line.split()[:4] for line in lines] == [["rank", "0/2", "local", "0"], ["rank", "1/2", "local", "1"]], \
            proc.stdout
        assert all("OMP_NUM_THREADS=1 engine threads 1 CUDA_VISIBLE_DEVICES= GPUs " in line for line in lines), lines
        if binding == [] and len(os.sched_getaffinity(0)) >= 2:  # bound to one core each, different cores
            cores = [line.split(" cores ")[1].split()[0] for line in lines]
            assert len(set(cores)) == 2 and all(c.isdigit() for c in cores), lines
    # a Python without hybridsim: one line before the launch (each rank printed a traceback)
    bad = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", *BIND_2X1, "--mpiexec", exe, "--python",
                          "/bin/false", "--check"], capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "--python /bin/false: finds no hybridsim" in bad.stderr, bad.stderr
    # one that has it but whose ranks fail
    fails = tmp_path / "python"
    fails.write_text(f'#!/bin/sh\n[ "$1" = -c ] && exec {sys.executable} "$@"\nexit 1\n')
    fails.chmod(0o755)
    bad = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", *BIND_2X1, "--mpiexec", exe, "--python",
                          str(fails), "--check"], capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode != 0 and "the check's launch failed" in bad.stderr, bad.stderr


def test_wrapper_dry_run_for_open_mpi():
    proc = subprocess.run([str(WRAPPER), "--hosts", "n1,n2", "--ranks-per-node", "4",
                           "--threads-per-rank", "8", "--gpus-per-node", "4", "--mpi-flavor", "openmpi",
                           "--mpiexec", "mpirun", "--python", "python3", "--dry-run", "--",
                           "--game", "pong"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("mpirun -n 8 --host n1:4,n2:4 --map-by ppr:4:node:PE=8 --bind-to core "
                           "-x OMP_NUM_THREADS=8 -x HYBRIDSIM_GPUS_PER_NODE=4 -x PATH"), line
    assert line.endswith("python3 -m mpi4py -m hybridsim train --game pong --num-threads 8 "
                         "--torch-threads 8"), line


@pytest.mark.parametrize("env, expected", [
    ({"MPI_LOCALRANKID": "3", "HYBRIDSIM_GPUS_PER_NODE": "2"}, "1"),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "HYBRIDSIM_GPUS_PER_NODE": "4"}, "1"),
    ({"MPI_LOCALRANKID": "3", "HYBRIDSIM_GPUS_PER_NODE": "2", "CUDA_VISIBLE_DEVICES": "4,6"}, "6"),
    ({"MPI_LOCALRANKID": "1", "HYBRIDSIM_GPUS_PER_NODE": "0", "CUDA_VISIBLE_DEVICES": "0"}, ""),
    ({"MPI_LOCALRANKID": "1", "CUDA_VISIBLE_DEVICES": "2,3"}, "2,3"),
    ({"MPI_LOCALRANKID": "3", "HYBRIDSIM_GPUS_PER_NODE": "2", "CUDA_VISIBLE_DEVICES": ""}, ""),  # hidden stays hidden
])
def test_rank_env_picks_the_gpu_of_the_local_rank(env, expected):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CUDA_VISIBLE_DEVICES", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "HYBRIDSIM_GPUS_PER_NODE", "SLURM_LOCALID")}
    proc = subprocess.run([str(LAUNCH / "rank_env.sh"), "bash", "-c", 'echo "${CUDA_VISIBLE_DEVICES-unset}"'],
                          env={**clean, **env}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected


@pytest.mark.parametrize("env, message", [
    ({"HYBRIDSIM_GPUS_PER_NODE": "08"}, "must be a non-negative integer, got '08'"),
    ({"HYBRIDSIM_GPUS_PER_NODE": "3", "CUDA_VISIBLE_DEVICES": "5,,7"}, "has no entry there"),
])
def test_rank_env_refuses_what_it_cannot_honour(env, message):
    clean = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_LOCALID")}
    proc = subprocess.run([str(LAUNCH / "rank_env.sh"), "true"], capture_output=True, text=True,
                          env={**clean, "MPI_LOCALRANKID": "1", **env}, timeout=30)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_rank_env_without_a_local_rank_fails_clearly():
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                          "PMI_LOCAL_RANK", "SLURM_LOCALID")}
    proc = subprocess.run([str(LAUNCH / "rank_env.sh"), "true"], capture_output=True, text=True,
                          env={**clean, "HYBRIDSIM_GPUS_PER_NODE": "2"}, timeout=30)
    assert proc.returncode == 2 and "no local-rank variable" in proc.stderr


def test_shell_scripts_pass_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    scripts = [WRAPPER, LAUNCH / "rank_env.sh", *sorted((LAUNCH / "slurm").iterdir()),
               REPO / "scripts" / "ci_install_system.sh"]
    scripts = [str(p) for p in scripts if p.suffix in ("", ".sh", ".sbatch")]
    proc = subprocess.run(["shellcheck", "-x", "-s", "bash", *scripts], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def test_templates_fail_clearly_outside_a_checkout_or_past_the_sweep(tmp_path):
    # run as plain bash scripts: these checks come before anything needs Slurm
    env = dict(os.environ, HYBRIDSIM_DIR=str(tmp_path), LOG_DIR=str(tmp_path / "run"))
    proc = subprocess.run(["bash", str(LAUNCH / "slurm" / "single_node.sbatch")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "no mpi_launch/ in HYBRIDSIM_DIR" in proc.stderr, proc.stderr
    env = dict(os.environ, HYBRIDSIM_DIR=str(REPO), GAMES="pong breakout", SEEDS="1",
               SLURM_ARRAY_TASK_ID="2", SWEEP_DIR=str(tmp_path))
    proc = subprocess.run(["bash", str(LAUNCH / "slurm" / "array.sbatch")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "task 2, but GAMES x SEEDS has 2 pairs" in proc.stdout, proc.stdout
    for settings, message in ((dict(SLURM_ARRAY_TASK_ID="-1"), "SLURM_ARRAY_TASK_ID='-1' is not a task index"),
                              (dict(SLURM_ARRAY_TASK_ID="abc"), "SLURM_ARRAY_TASK_ID='abc' is not a task index"),
                              (dict(SLURM_ARRAY_TASK_ID="0", SEEDS="1 1"), "SEEDS lists an entry twice: 1")):
        proc = subprocess.run(["bash", str(LAUNCH / "slurm" / "array.sbatch")], env={**env, **settings},
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and message in proc.stdout, proc.stdout + proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("budget_file, message", [
    ("a_dir", "TOTAL_FRAMES_FILE={} is not a readable file"),  # fell back to 50M frames silently
    ("empty.txt", "total frames must be a number, got ''"),
])
def test_a_budget_file_that_cannot_be_read_ends_the_job_before_its_run_directory(tmp_path, budget_file, message):
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "empty.txt").write_text("")
    path = tmp_path / budget_file
    env = dict(os.environ, HYBRIDSIM_DIR=str(REPO), LOG_DIR=str(tmp_path / "run"), TOTAL_FRAMES_FILE=str(path))
    proc = subprocess.run(["bash", str(LAUNCH / "slurm" / "single_node.sbatch")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and message.format(path) in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("template", ["single_node", "multi_node", "array"])
@pytest.mark.parametrize("extra, why", [
    ("--log-dir '/scratch/my run'", "has quotes, backslashes or line breaks"),
    ('--game "pong"', "has quotes, backslashes or line breaks"),
    ("--note a\\ b", "has quotes, backslashes or line breaks"),
    ("--lr 1e-4\n--model impala", "has quotes, backslashes or line breaks"),  # read took the first line
    ("--log-dir ~/runs/x", "has a word starting with ~, which is not expanded there"),
])
def test_quotes_in_extra_args_are_refused_before_the_run_directory(tmp_path, template, extra, why):
    """EXTRA_ARGS is split on spaces: quotes reached train as literal characters (a run
    directory named "'/scratch/my"), or split a value in two."""
    env = dict(os.environ, HYBRIDSIM_DIR=str(REPO), LOG_DIR=str(tmp_path / "run"), EXTRA_ARGS=extra,
               SWEEP_DIR=str(tmp_path / "run"), SLURM_ARRAY_TASK_ID="0", TOTAL_FRAMES="1000")
    proc = subprocess.run(["bash", str(LAUNCH / "slurm" / f"{template}.sbatch")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"error: EXTRA_ARGS='{extra}' {why}" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "run").exists()


HYDRA_VERSION = "HYDRA build details:\n    Version:                                 5.0.2"


def fake_launcher(tmp_path, version=HYDRA_VERSION):
    """An `mpiexec` that only notes it was started (its arguments, and the srun options hydra
    would take from HYDRA_LAUNCHER_EXTRA_ARGS): what the wrapper refuses before launching.
    Its --version (which the wrapper always asks) prints `version` and is no launch."""
    exe = tmp_path / "mpiexec"
    exe.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then printf "%s\\n" {shlex.quote(version)}; exit 0; fi\n'
                   'echo "$@" > "$0.ran"\n'
                   'echo "${HYDRA_LAUNCHER_EXTRA_ARGS-<unset>}" > "$0.srun"\n')
    exe.chmod(0o755)
    return exe, tmp_path / "mpiexec.ran"


def wrapper_env(**settings):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CUDA_VISIBLE_DEVICES", "HYBRIDSIM_GPUS_PER_NODE", "SLURM_CPUS_ON_NODE",
                          "SLURM_JOB_NUM_NODES", "SLURM_JOB_ID", "HYDRA_LAUNCHER_EXTRA_ARGS")}
    return {**clean, **settings}


@pytest.mark.parametrize("env, message", [
    # bash's arithmetic read 'abc' as a variable worth 0 ('-n 0', or "unbound variable"),
    # and '2x' as bad syntax ("value too great for base")
    ({"SLURM_JOB_NUM_NODES": "abc"}, "SLURM_JOB_NUM_NODES in the environment must be a positive integer, got 'abc'"),
    ({"SLURM_JOB_NUM_NODES": "2x"}, "SLURM_JOB_NUM_NODES in the environment must be a positive integer, got '2x'"),
    ({"SLURM_CPUS_ON_NODE": "abc"}, "SLURM_CPUS_ON_NODE in the environment must be a positive integer, got 'abc'"),
    ({"SLURM_CPUS_ON_NODE": "99999999999999999999"}, "SLURM_CPUS_ON_NODE in the environment must be"),
])
def test_wrapper_refuses_slurm_counts_bash_cannot_read(tmp_path, env, message):
    exe, ran = fake_launcher(tmp_path)
    proc = subprocess.run([str(WRAPPER), "--mpiexec", str(exe), "--python", sys.executable, "--check"],
                          capture_output=True, text=True, timeout=30, env=wrapper_env(**env))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not ran.exists()


OPEN_MPI_VERSION = "mpirun (Open MPI) 4.1.4\n\nReport bugs to https://www.open-mpi.org/community/help/"


@pytest.mark.parametrize("flavor, version, launcher", [
    ("openmpi", HYDRA_VERSION, "MPICH's hydra mpiexec"),
    ("mpich", OPEN_MPI_VERSION, "Open MPI's mpirun"),
    ("mpich", "mpirun.openmpi (OpenRTE) 4.1.4", "Open MPI's mpirun"),  # Debian 12's
])
def test_wrapper_refuses_a_flavour_its_launcher_is_not(tmp_path, flavor, version, launcher):
    """--mpi-flavor naming the other MPI used to reach the launcher, which stopped with its
    own message ('unrecognized argument x' from hydra, 'unknown option "-ppn"' from Open
    MPI). Refused before launching, naming both; a warning with --dry-run, whose command
    may be meant for another machine."""
    exe, ran = fake_launcher(tmp_path, version)
    base = [str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", "--no-bind",
            "--mpiexec", str(exe), "--python", sys.executable, "--check"]
    proc = subprocess.run([*base, "--mpi-flavor", flavor], capture_output=True, text=True, timeout=30,
                          env=wrapper_env())
    assert proc.returncode == 2, proc.stderr
    assert f"--mpi-flavor {flavor}, but '{exe}' is {launcher}" in proc.stderr, proc.stderr
    assert not ran.exists()
    dry = subprocess.run([*base, "--mpi-flavor", flavor, "--dry-run"], capture_output=True, text=True,
                         timeout=30, env=wrapper_env())
    assert dry.returncode == 0 and f"warning: --mpi-flavor {flavor}, but" in dry.stderr, dry.stderr
    # the launcher's own flavour, named or not: launched
    own = "mpich" if flavor == "openmpi" else "openmpi"
    for args in (["--mpi-flavor", own], []):
        ok = subprocess.run([*base, *args], capture_output=True, text=True, timeout=30, env=wrapper_env())
        assert ok.returncode == 0 and f"MPI: {own}" in ok.stderr and ran.exists(), ok.stderr
        ran.unlink()


@pytest.mark.parametrize("version", [
    "Intel(R) MPI Library for Linux* OS, Version 2021.6 Build 20220227 (id: 28877f3f32)",
    "",
    HYDRA_VERSION + "\n    Configure options: --with-pmix=/opt/Open MPI",  # names both
])
def test_a_launcher_of_unknown_flavour_takes_the_flavour_given(tmp_path, version):
    exe, ran = fake_launcher(tmp_path, version)
    base = [str(WRAPPER), "--threads-per-rank", "1", "--mpiexec", str(exe), "--python", sys.executable, "--check"]
    proc = subprocess.run([*base, "--mpi-flavor", "mpich"], capture_output=True, text=True, timeout=30,
                          env=wrapper_env())
    assert proc.returncode == 0 and "warning" not in proc.stderr and ran.exists(), proc.stderr
    unknown = subprocess.run(base, capture_output=True, text=True, timeout=30, env=wrapper_env())
    assert unknown.returncode == 2 and "cannot tell the MPI flavour" in unknown.stderr, unknown.stderr


@pytest.mark.parametrize("kind", ["hydra", "openmpi"])
def test_wrapper_tells_the_installed_launchers_apart(kind):
    """The real --version texts: pip's MPICH 5 hydra mpiexec, Debian's Open MPI 4 mpirun."""
    if kind == "hydra":
        exe, flavor, wrong = hydra_mpiexec(), "mpich", "openmpi"
    else:
        exe, flavor, wrong = shutil.which("mpirun.openmpi"), "openmpi", "mpich"
        if exe is None:
            pytest.skip("no Open MPI mpirun.openmpi (scripts/ci_install_system.sh installs openmpi-bin)")
    base = [str(WRAPPER), "--threads-per-rank", "1", "--mpiexec", exe, "--python", sys.executable, "--check"]
    proc = subprocess.run([*base, "--mpi-flavor", wrong], capture_output=True, text=True, timeout=60,
                          env=wrapper_env())
    assert proc.returncode == 2 and f"--mpi-flavor {wrong}, but '{exe}' is" in proc.stderr, proc.stderr
    dry = subprocess.run([*base, "--dry-run"], capture_output=True, text=True, timeout=60, env=wrapper_env())
    assert dry.returncode == 0 and f"MPI: {flavor}" in dry.stderr and "warning: --mpi-flavor" not in dry.stderr, \
        dry.stderr


@pytest.mark.parametrize("given, expected", [
    (None, "--mpi=none"),
    ("--cpu-bind=none", "--cpu-bind=none --mpi=none"),  # what slurm/preemptible.sh sets
    ("", "--mpi=none"),
    ("--mpi=pmi2", "--mpi=pmi2"),  # an --mpi the user gave stands
    ("--cpu-bind=none --mpi pmix", "--cpu-bind=none --mpi pmix"),
])
def test_wrapper_keeps_slurms_pmi_plugin_off_hydras_proxies(tmp_path, given, expected):
    """hydra starts its proxies inside a job with srun, which gave them MpiDefault's PMI
    plugin (see the cluster test below): the wrapper adds --mpi=none to the srun options
    hydra reads from HYDRA_LAUNCHER_EXTRA_ARGS. Open MPI's mpirun passes it itself. Not
    where hydra uses ssh (outside a job, or -launcher ssh): ssh refused --mpi=none."""
    exe, ran = fake_launcher(tmp_path)
    job = {"SLURM_JOB_ID": "17"}
    env = wrapper_env(**job) if given is None else wrapper_env(HYDRA_LAUNCHER_EXTRA_ARGS=given, **job)
    base = [str(WRAPPER), "--threads-per-rank", "1", "--mpiexec", str(exe), "--python", sys.executable]
    proc = subprocess.run([*base, "--check"], capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 0 and ran.exists(), proc.stderr
    assert (tmp_path / "mpiexec.srun").read_text().strip() == expected
    unchanged = "<unset>" if given is None else given
    for args, where in (([], {k: v for k, v in env.items() if k != "SLURM_JOB_ID"}),
                        (["--mpi-arg=-launcher", "--mpi-arg=ssh"], env),
                        (["--mpi-arg=-bootstrap=ssh"], env)):
        proc = subprocess.run([*base, *args, "--check"], capture_output=True, text=True, timeout=30, env=where)
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "mpiexec.srun").read_text().strip() == unchanged, args
    exe, ran = fake_launcher(tmp_path, OPEN_MPI_VERSION)
    proc = subprocess.run([str(WRAPPER), "--threads-per-rank", "1", "--mpiexec", str(exe), "--python",
                           sys.executable, "--check"], capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 0 and "MPI: openmpi" in proc.stderr, proc.stderr
    assert (tmp_path / "mpiexec.srun").read_text().strip() == ("<unset>" if given is None else given)


def test_hydra_inside_a_job_ignores_the_clusters_pmi_plugin(cluster, tmp_path):
    """SLURM_MPI_TYPE=pmix stands for a site's MpiDefault=pmix. hydra's srun for its proxies
    took it: here srun could not load the plugin ("Invalid MPI type 'pmix'") and mpiexec
    waited for ever; where it loads, the ranks would inherit PMIX_NAMESPACE beside hydra's
    PMI_SIZE, which MPICH's MPI_Init refuses. The wrapper's --mpi=none for that srun: runs."""
    exe = hydra_mpiexec()
    script = tmp_path / "check.sh"
    check = [str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", *BIND_2X1, "--mpiexec", exe,
             "--python", sys.executable, "--check"]
    script.write_text(f'#!/bin/bash\ntimeout 60 {shlex.join(check)}\necho "wrapper exit status $?"\n')
    out = tmp_path / "job.out"
    job = cluster.sbatch(script, "--ntasks-per-node=2", "--cpus-per-task=1", "--time=5", f"--output={out}",
                         env=job_env(SLURM_MPI_TYPE="pmix"), cwd=tmp_path)
    cluster.wait_job(job, timeout=150)
    text = read(out)
    assert "wrapper exit status 0" in text, text
    assert [line.split()[1] for line in text.splitlines() if line.startswith("rank ")] == ["0/2", "1/2"], text


@pytest.mark.parametrize("args, env, message", [
    # local rank 1 would want entry 1 of a one-entry list
    (["--gpus-per-node", "2"], {"CUDA_VISIBLE_DEVICES": "0"},
     "local rank 1 would use entry 1 of CUDA_VISIBLE_DEVICES (0)"),
    (["--gpus-per-node", "3"], {"CUDA_VISIBLE_DEVICES": "5,,7"}, "local rank 1 would use entry 1"),
    # without --gpus-per-node the ranks still get an inherited HYBRIDSIM_GPUS_PER_NODE
    ([], {"CUDA_VISIBLE_DEVICES": "0", "HYBRIDSIM_GPUS_PER_NODE": "2"}, "local rank 1 would use entry 1"),
    ([], {"HYBRIDSIM_GPUS_PER_NODE": "x"}, "HYBRIDSIM_GPUS_PER_NODE in the environment must be"),
])
def test_wrapper_checks_gpu_slots_before_launching(tmp_path, args, env, message):
    """What rank_env.sh would stop on is caught before any rank starts."""
    exe, ran = fake_launcher(tmp_path)
    proc = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", "--no-bind",
                           *args, "--mpiexec", str(exe), "--mpi-flavor", "mpich",
                           "--python", sys.executable, "--check"],
                          capture_output=True, text=True, timeout=30, env=wrapper_env(**env))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not ran.exists()
    # enough entries: launched
    ok = subprocess.run([str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", "1", "--no-bind",
                         "--gpus-per-node", "2", "--mpiexec", str(exe), "--mpi-flavor", "mpich",
                         "--python", sys.executable, "--check"], capture_output=True, text=True,
                        timeout=30, env=wrapper_env(CUDA_VISIBLE_DEVICES="4,6"))
    assert ok.returncode == 0 and ran.exists(), ok.stderr


@pytest.mark.parametrize("env,taskset", [({"SLURM_CPUS_ON_NODE": "2"}, []), ({}, []),
                                         ({}, ["taskset", "-c", "0"]), ({"OMP_NUM_THREADS": "1"}, [])])
def test_wrapper_refuses_to_bind_more_cores_than_the_node_has(tmp_path, env, taskset):
    """hydra's -bind-to core:T fails once T passes the node's cores (and stacks ranks on the
    same cores before that): refused unless --no-bind, which only warns. The node's cores
    are Slurm's count inside a job, else the CPUs the wrapper may use (under `taskset -c 0`
    one, where `nproc --all` counted every CPU of the machine; not OMP_NUM_THREADS, which
    GNU nproc reports where set)."""
    if taskset and not shutil.which("taskset"):
        pytest.skip("taskset is not installed")
    exe, ran = fake_launcher(tmp_path)
    cores = 1 if taskset else int(env.get("SLURM_CPUS_ON_NODE") or len(os.sched_getaffinity(0)))
    base = [*taskset, str(WRAPPER), "--ranks-per-node", "2", "--threads-per-rank", str(cores // 2 + 1),
            "--mpiexec", str(exe), "--mpi-flavor", "mpich", "--python", sys.executable, "--check"]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=30, env=wrapper_env(**env))
    assert proc.returncode == 2 and f"exceed this node's {cores} cores" in proc.stderr, proc.stderr
    assert "--no-bind" in proc.stderr and not ran.exists()
    unbound = subprocess.run([*base, "--no-bind"], capture_output=True, text=True, timeout=30,
                             env=wrapper_env(**env))
    assert unbound.returncode == 0 and "warning:" in unbound.stderr and ran.exists(), unbound.stderr
    # --dry-run prints the command (maybe for another machine): a warning only
    dry = subprocess.run([*base, "--dry-run"], capture_output=True, text=True, timeout=30,
                         env=wrapper_env(**env))
    assert dry.returncode == 0 and "-bind-to core:" in dry.stdout and "warning:" in dry.stderr


RANK_ENV_ERRORS = [
    ({"HYBRIDSIM_GPUS_PER_NODE": "x", "MPI_LOCALRANKID": "1"}, "must be a non-negative integer"),
    ({"HYBRIDSIM_GPUS_PER_NODE": "2"}, "no local-rank variable"),
    ({"HYBRIDSIM_GPUS_PER_NODE": "2", "MPI_LOCALRANKID": "1", "CUDA_VISIBLE_DEVICES": "0"},
     "has no entry there"),
]


@pytest.mark.parametrize("env, message", RANK_ENV_ERRORS)
def test_rank_env_errors_end_a_pmi_job_by_a_signal(env, message):
    """Under hydra (PMI_RANK, PMI_SIZE > 1) a rank that exits before MPI_Init leaves the
    others in MPI_Init for ever, one killed by a signal ends the job: after its message
    rank_env.sh takes SIGTERM. Alone (or one rank) it exits with status 2."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CUDA_VISIBLE_DEVICES", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK", "SLURM_LOCALID",
                          "PMI_RANK", "PMI_SIZE")}
    for pmi, status in (({"PMI_RANK": "1", "PMI_SIZE": "2"}, -signal.SIGTERM),
                        ({"PMI_RANK": "0", "PMI_SIZE": "1"}, 2), ({}, 2)):
        proc = subprocess.run([str(LAUNCH / "rank_env.sh"), "true"], capture_output=True, text=True,
                              env={**clean, **env, **pmi}, timeout=30)
        assert proc.returncode == status and message in proc.stderr, (pmi, proc.returncode, proc.stderr)


def test_rank_env_failure_on_one_rank_ends_a_hydra_job():
    """Local rank 1 has no GPU slot (launched by hand, past the wrapper's own check), rank 0
    waits in MPI_Init: the job must end at once, with rank_env.sh's message. It used to hang."""
    exe = hydra_mpiexec()
    env = wrapper_env(CUDA_VISIBLE_DEVICES="0", HYBRIDSIM_GPUS_PER_NODE="2")
    proc = subprocess.Popen([exe, "-n", "2", str(LAUNCH / "rank_env.sh"), sys.executable, "-c",
                             "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the job hung after local rank 1's rank_env.sh error")
    assert proc.returncode != 0
    assert "rank_env.sh: local rank 1 wants GPU slot 1 of CUDA_VISIBLE_DEVICES (0)" in out + err, out + err


def test_wrapper_dry_run_without_mpi_or_train_arguments():
    """No --mpi-arg, no train arguments (--check), and train arguments that leave nothing to
    add: the empty arrays must expand to nothing (see the static test below)."""
    for args in (["--check"], ["--check", "--"], ["--", "--num-threads", "1", "--torch-threads", "1"]):
        proc = subprocess.run([str(WRAPPER), "--threads-per-rank", "1", "--mpi-flavor", "mpich",
                               "--mpiexec", "mpiexec", "--python", "python3", "--dry-run", *args],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("mpiexec -n 1 -ppn 1 -bind-to core:1 -genv OMP_NUM_THREADS 1 "), proc.stdout
        assert "  " not in proc.stdout and "''" not in proc.stdout, proc.stdout
    proc = subprocess.run([str(WRAPPER), "--threads-per-rank", "1", "--mpi-flavor", "mpich", "--mpiexec",
                           "mpiexec", "--python", "python3", "--dry-run", "--check", "--", "--game", "pong"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "--check starts no training; the arguments after '--' are not used" \
        in proc.stderr, proc.stderr


def test_readme_says_when_a_missing_launcher_stops_a_dry_run():
    """The README said --dry-run turns a missing launcher into a warning; without
    --mpi-flavor the wrapper must ask the launcher its flavour, so it stops (status 2)."""
    base = [str(WRAPPER), "--threads-per-rank", "1", "--mpiexec", "nosuch", "--python", "python3",
            "--dry-run", "--check"]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=30, env=wrapper_env())
    assert proc.returncode == 2 and "MPI launcher 'nosuch' not found" in proc.stderr, proc.stderr
    proc = subprocess.run([*base, "--mpi-flavor", "mpich"], capture_output=True, text=True,
                          timeout=30, env=wrapper_env())
    assert proc.returncode == 0 and "warning: MPI launcher 'nosuch' not found" in proc.stderr, proc.stderr
    readme = " ".join((LAUNCH / "README.md").read_text().split())
    assert ("a missing launcher too, but only with `--mpi-flavor`: without it the flavour must be "
            "asked of the launcher, so `--mpiexec nosuch --dry-run` stops with status 2") in readme


# arrays these scripts never leave empty where they expand them
NEVER_EMPTY = {"cmd", "rank_cmd", "launch", "args", "host_list", "train_args"}


def test_scripts_guard_possibly_empty_arrays():
    """bash < 4.4 (RHEL/CentOS 7) calls an empty "${a[@]}" unbound under set -u: arrays that
    may be empty are expanded as ${a[@]+"${a[@]}"}."""
    bare = re.compile(r'(?<!\[@\]\+)"\$\{(\w+)\[@\]\}"')
    for path in [WRAPPER, LAUNCH / "rank_env.sh", *sorted((LAUNCH / "slurm").iterdir())]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for name in bare.findall(line):
                assert name in NEVER_EMPTY, f"{path.name}:{number}: unguarded \"${{{name}[@]}}\": {line.strip()}"


def _template_with_fake_launcher(tmp_path):
    """A copy of mpi_launch/ whose hybridsim-mpirun only records its arguments."""
    import shutil
    shutil.copytree(LAUNCH / "slurm", tmp_path / "mpi_launch" / "slurm")
    fake = tmp_path / "mpi_launch" / "hybridsim-mpirun"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/args"\n')
    fake.chmod(0o755)
    return tmp_path / "mpi_launch" / "args"


@pytest.mark.parametrize("name", ["single_node.sbatch", "array.sbatch"])
def test_a_recipe_keeps_its_settings_but_those_the_job_sets(tmp_path, name):
    """CONFIG=pong-cpu: the template's own defaults (backend, environments, budget) used to
    override the recipe's; only the settings the job gives now do."""
    args_file = _template_with_fake_launcher(tmp_path)
    base = {k: v for k, v in os.environ.items() if k not in ("GAME", "NUM_ENVS", "SEED", "BACKEND",
                                                              "TOTAL_FRAMES", "LOG_DIR", "CONFIG")}
    base.update(HYBRIDSIM_DIR=str(tmp_path), CHECK_PLACEMENT="0", GAMES="pong", SEEDS="3",
                SLURM_ARRAY_TASK_ID="0", SWEEP_DIR=str(tmp_path / "sweep"))

    def run(**env):
        proc = subprocess.run(["bash", str(tmp_path / "mpi_launch" / "slurm" / name)], cwd=tmp_path,
                              env={**base, **env}, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        args = args_file.read_text().split("\n")
        return args[args.index("--") + 1:]

    recipe = run(CONFIG="pong-cpu")
    assert "--config" in recipe and recipe[recipe.index("--config") + 1] == "pong-cpu"
    assert not {"--backend", "--num-envs", "--total-frames"} & set(recipe), recipe
    if name == "single_node.sbatch":
        assert recipe[recipe.index("--log-dir") + 1] == "runs/pong-cpu" and "--game" not in recipe
    given = run(CONFIG="pong-cpu", NUM_ENVS="8")
    assert given[given.index("--num-envs") + 1] == "8" and "--backend" not in given
    plain = run()
    assert plain[plain.index("--backend") + 1] == "cpu" and "--config" not in plain
    assert plain[plain.index("--total-frames") + 1].isdigit()
