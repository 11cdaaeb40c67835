"""Data-parallel training over MPI ranks (mpiexec from the pip mpich, or a system MPI)."""
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ale_py")
from hybridsim import dist  # noqa: E402
from mpi_util import FAULT_SCRIPT, mpiexec_or_skip  # noqa: E402


def mpiexec():
    pytest.importorskip("mpi4py")
    return mpiexec_or_skip()


def test_counter_uniforms_depend_only_on_seed_env_and_counter():
    u = dist.counter_uniforms(7, np.arange(8), np.zeros(8, np.uint64))
    again = np.concatenate([dist.counter_uniforms(7, np.arange(4), np.zeros(4, np.uint64)),
                            dist.counter_uniforms(7, np.arange(4, 8), np.zeros(4, np.uint64))])
    np.testing.assert_array_equal(u, again)
    many = dist.counter_uniforms(7, np.repeat(np.arange(100), 100), np.tile(np.arange(100), 100).astype(np.uint64))
    assert 0.0 <= many.min() and many.max() < 1.0
    assert abs(many.mean() - 0.5) < 0.01
    assert len(np.unique(many)) == many.size
    assert not np.array_equal(u, dist.counter_uniforms(8, np.arange(8), np.zeros(8, np.uint64)))


def test_local_comm_is_the_identity():
    comm = dist.LocalComm()
    assert comm.allreduce_sum(3) == 3 and comm.gather("x") == ["x"] and comm.bcast(5) == 5


TRAIN_ARGS = ["--game", "pong", "--backend", "ale-py", "--total-frames", "1280",
              "--num-minibatches", "2", "--num-threads", "1", "--torch-threads", "1",
              "--noop-max", "5", "--log-every", "0", "--checkpoint-every", "100000"]


def final_parameters(run_dir):
    state = torch.load(pathlib.Path(run_dir) / "checkpoint.pt", weights_only=False)
    return torch.cat([v.flatten().float() for v in state["model"].values()]), state


@pytest.fixture(scope="module")
def one_rank_run(tmp_path_factory):
    """run(network) -> (parameters, checkpoint) of one rank stepping all 8 environments;
    each network's run is made once for the tests that compare ranks with it."""
    runs = {}

    def run(network: tuple):
        if network not in runs:
            log_dir = tmp_path_factory.mktemp("one_rank")
            one = subprocess.run([sys.executable, "-m", "hybridsim", "train", *TRAIN_ARGS, "--obs-normalization",
                                  "running", *network, "--num-envs", "8", "--log-dir", str(log_dir)],
                                 capture_output=True, text=True, timeout=600)
            assert one.returncode == 0, one.stderr[-3000:]
            runs[network] = final_parameters(log_dir)
        return runs[network]
    return run


@pytest.mark.parametrize("network", [(), ("--use-lstm",)], ids=["feed-forward", "lstm"])
def test_two_ranks_match_one_rank_with_all_environments(tmp_path, network, one_rank_run):
    """Also with running input statistics, which every rank updates from all ranks' frames,
    and with a recurrent network, whose memories each rank keeps for its environments."""
    exe = mpiexec()
    args = [*TRAIN_ARGS, "--obs-normalization", "running", *network]
    two = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train",
                          *args, "--num-envs", "4", "--log-dir", str(tmp_path / "two")],
                         capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-3000:]
    p1, s1 = one_rank_run(network)
    p2, s2 = final_parameters(tmp_path / "two")
    assert s1["frames"] == s2["frames"] and s1["updates"] == s2["updates"]
    assert s2["world_size"] == 2
    torch.testing.assert_close(p1, p2, rtol=1e-4, atol=1e-5)
    for key in ("normalize.mean", "normalize.var", "normalize.count"):
        torch.testing.assert_close(s1["model"][key], s2["model"][key], rtol=1e-9, atol=1e-9)
    assert abs(float(s2["model"]["normalize.count"]) - s2["frames"] / 4) < 1e-3  # every observation once
    assert (tmp_path / "two" / "traj_rank00001.h5").is_file()
    from hybridsim import trajlog
    steps = trajlog.read_steps(tmp_path / "two" / "trajectories.h5", fields=["env_id"])
    assert sorted(set(steps["env_id"].ravel().tolist())) == list(range(8))


def test_two_ranks_averaging_with_gloo_match_one_rank(tmp_path, one_rank_run):
    """Gradients averaged by torch.distributed (gloo on CPU; nccl takes the same path on
    GPUs), set up from the MPI ranks: the same parameters as one rank with all environments."""
    exe = mpiexec()
    import torch.distributed as tdist
    if not tdist.is_available() or not tdist.is_gloo_available():
        pytest.skip("this torch build has no gloo backend")
    p1, s1 = one_rank_run(())
    gloo = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train",
                           *TRAIN_ARGS, "--obs-normalization", "running", "--num-envs", "4", "--allreduce", "gloo",
                           "--log-trajectories", "false", "--log-dir", str(tmp_path / "gloo")],
                          capture_output=True, text=True, timeout=600)
    assert gloo.returncode == 0, gloo.stdout[-2000:] + gloo.stderr[-3000:]
    assert "gradients averaged by gloo (torch.distributed" in gloo.stdout, gloo.stdout[-2000:]
    p3, s3 = final_parameters(tmp_path / "gloo")
    assert s3["updates"] == s1["updates"] and s3["world_size"] == 2
    torch.testing.assert_close(p1, p3, rtol=1e-4, atol=1e-5)
    for key in ("normalize.mean", "normalize.var", "normalize.count"):
        torch.testing.assert_close(s1["model"][key], s3["model"][key], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("schedule", ["a2c", "impala"])
def test_two_ranks_resume_each_their_own_environments(tmp_path, schedule):
    """The checkpoint holds every rank's environments and running episodes (impala: also
    its actions in flight and trajectories in progress): two ranks stopped at 1,280 frames
    and resumed to 2,560 end exactly like two ranks that ran 2,560 frames at once (constant
    learning rate, so the budget does not change it)."""
    exe = mpiexec()
    envs = (["--num-envs", "2", "--num-minibatches", "2"] if schedule == "a2c" else
            ["--num-envs", "3", "--schedule", "impala", "--env-batch-size", "2", "--learner-batch", "2"])
    args = ["--game", "pong", "--backend", "cpu", *envs,
            "--num-threads", "1", "--torch-threads", "1", "--noop-max", "5", "--log-every", "0",
            "--lr-decay", "false", "--max-episode-frames", "400", "--log-trajectories", "false"]

    def train(log_dir, frames, *extra):
        run = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "hybridsim",
                              "train", *args, "--total-frames", str(frames), "--log-dir",
                              str(tmp_path / log_dir), *extra],
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        # rank 0 reports the run (the others' episode lists are not the run's)
        assert run.stdout.count("frames in") == 1 and run.stdout.count("checkpoint: ") == 1, run.stdout

    train("whole", 2560)
    train("split", 1280)
    half = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
    assert len(half["rank_states"]) == 2
    assert half["rank_states"][0]["env_state"] != half["rank_states"][1]["env_state"]
    train("split", 2560, "--resume")
    p1, s1 = final_parameters(tmp_path / "whole")
    p2, s2 = final_parameters(tmp_path / "split")
    assert s1["frames"] == s2["frames"] and s1["updates"] == s2["updates"]
    assert torch.equal(p1, p2)
    assert s2["episodes"] == s1["episodes"] and len(s1["episodes"]) >= 4


@pytest.mark.parametrize("damage", ["environment state", "trajectory file"])
def test_one_ranks_refused_resume_leaves_the_run_directory_as_it_was(tmp_path, damage):
    """Rank 1's environment state is damaged, or its trajectory file lost its tail: rank 1
    refuses the resume, and rank 0, whose own part loads, must not go on to open (and cut
    back) its trajectory file or metrics, flag its file open, take the disk reserve or
    start TensorBoard before the job ends."""
    exe = mpiexec()
    args = [exe, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train", "--game", "pong",
            "--backend", "cpu", "--num-envs", "2", "--num-minibatches", "1", "--num-threads", "1",
            "--torch-threads", "1", "--noop-max", "5", "--log-dir", str(tmp_path)]
    first = subprocess.run(args + ["--total-frames", "640"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    state["frames"] = 320  # the rank files hold rows after it: a resume would cut them
    rank1 = tmp_path / "traj_rank00001.h5"
    if damage == "environment state":
        state["rank_states"][1]["env_state"] = b"not zlib data"
        message = "rank 1's environment state is damaged"
    else:
        rank1.write_bytes(rank1.read_bytes()[:20000])
        message = f"{rank1}: truncated file"
    torch.save(state, tmp_path / "checkpoint.pt")
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    resumed = subprocess.run(args + ["--total-frames", "1280", "--resume"], capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode != 0
    assert message in resumed.stderr, resumed.stderr[-3000:]
    after = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert sorted(after) == sorted(before) and after == before


def test_a_resume_with_fewer_ranks_cuts_the_left_out_ranks_files_back(tmp_path):
    """Two ranks, killed after their checkpoint (here: a checkpoint moved back to frame
    320, the files holding rows after it), then resumed with one: rank 1's file kept its
    rows of the discarded timeline, and the master file showed them. Then resumed with
    three: rank 1 comes back, rank 2 is new."""
    import h5py
    from hybridsim import trajlog
    exe = mpiexec()
    args = ["-m", "hybridsim", "train", "--game", "pong", "--backend", "cpu", "--num-envs", "2",
            "--num-minibatches", "1", "--num-threads", "1", "--torch-threads", "1", "--noop-max", "5",
            "--log-every", "0", "--log-dir", str(tmp_path)]
    first = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", *args, "--total-frames", "640"],
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    state["frames"] = 320
    for rank, rank_state in enumerate(state["rank_states"]):
        with h5py.File(trajlog.rank_file(tmp_path, rank), "r", locking=False) as f:
            rank_state["traj_rows"] = int((f["steps"]["global_frame"][()].max(axis=1) <= 320).sum())
            assert f["steps"]["global_frame"][()].max() > 320
    torch.save(state, tmp_path / "checkpoint.pt")
    resumed = subprocess.run([sys.executable, *args, "--total-frames", "480", "--resume"], capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "traj_rank00001.h5: its rank is not in this job (1 rank(s)); cut back to the checkpoint at " \
           "frame 320" in resumed.stderr, resumed.stderr[-3000:]
    with h5py.File(trajlog.rank_file(tmp_path, 1), "r", locking=False) as f:  # closed: no SWMR flags
        assert f["steps"]["global_frame"][()].max() <= 320 and "gaps" not in f.attrs
    steps = trajlog.read_steps(tmp_path / "trajectories.h5")
    late = steps["global_frame"] > 320
    assert not np.isin(steps["env_id"][late], [2, 3]).any()  # rank 1's environments, after the cut
    # rank 1 back: its file goes on from frame 480, with a restart and no gap (none was lost);
    # rank 2 never existed before: its new file has no gap from frame 0 to the checkpoint
    # either (analyze reported those steps as lost)
    again = subprocess.run([exe, "-n", "3", sys.executable, "-m", "mpi4py", *args, "--total-frames", "800",
                            "--resume"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "gaps" not in again.stderr and "missing;" not in again.stderr, again.stderr[-3000:]
    with h5py.File(trajlog.rank_file(tmp_path, 1), "r", locking=False) as f:
        assert "gaps" not in f.attrs and trajlog.RETIRED_AT not in f.attrs
        assert trajlog.json_list_attr(f, "restarts")[-1] == 480 and f["steps"]["global_frame"][()].max() > 480
    for rank in (0, 2):
        with h5py.File(trajlog.rank_file(tmp_path, rank), "r", locking=False) as f:
            assert "gaps" not in f.attrs and f["steps"]["action"].shape[0] > 0
    for rank, ranges in enumerate(([[0, 0, 2]], [[0, 2, 4]], [[480, 4, 6]])):  # the ids each file's rows hold
        with h5py.File(trajlog.rank_file(tmp_path, rank), "r", locking=False) as f:
            assert trajlog.json_list_attr(f, "env_ranges") == ranges
    from hybridsim import analyze
    analyze.analyze(tmp_path, plots=False)  # every rank's rows pass the env_ranges check: no false refusal


def test_gradient_backend_choice():
    cpu = torch.device("cpu")
    assert dist.gradient_backend("auto", cpu) == "mpi"
    assert dist.gradient_backend("gloo", cpu) == "gloo"
    with pytest.raises(ValueError, match="allreduce must be one of"):
        dist.gradient_backend("ucx", cpu)
    local = dist.LocalComm()
    assert dist.with_gradient_backend(local, "nccl", cpu) is local  # one process: nothing to set up


def test_ranks_sharing_a_gpu_are_found():
    """NCCL refuses two ranks on one GPU (lazily, at the first collective): the ranks of a
    node with fewer GPUs than ranks are found before it is tried."""
    ids = [("n1", "GPU-a"), ("n1", "GPU-b"), ("n1", "GPU-a"), ("n2", "GPU-a"), None, None]
    assert dist.ranks_sharing_a_gpu(ids) == [[0, 2]]
    assert dist.ranks_sharing_a_gpu([("n1", "GPU-a"), ("n2", "GPU-a")]) == []
    assert dist._gpu_identity(torch.device("cpu")) is None


FIRST_ALLREDUCE_SCRIPT = textwrap.dedent("""
    import sys
    import torch, torch.distributed as tdist
    from mpi4py import MPI
    from hybridsim import dist
    if sys.argv[1] == "fail":
        def refused(*args, **kwargs):
            raise RuntimeError("NCCL error: invalid usage (Duplicate GPU detected)")
        tdist.all_reduce = refused
    comm = dist.with_gradient_backend(dist.MPIComm(MPI.COMM_WORLD), "gloo", torch.device("cpu"))
    print(f"rank {comm.rank}: {type(comm).__name__} initialized={tdist.is_initialized()}", flush=True)
    if isinstance(comm, dist.TorchDistComm):
        comm.close()
""")


@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_a_backend_failing_its_first_allreduce_falls_back_to_mpi(tmp_path, mode):
    """A process group that starts but cannot reduce (NCCL with two ranks on one GPU fails
    only at its first all_reduce) is found at setup, where every rank falls back to MPI,
    instead of failing the first gradient step."""
    exe = mpiexec()
    import torch.distributed as tdist
    if not tdist.is_available() or not tdist.is_gloo_available():
        pytest.skip("this torch build has no gloo backend")
    script = tmp_path / "first_allreduce.py"
    script.write_text(FIRST_ALLREDUCE_SCRIPT)
    r = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", str(script), mode],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    # the ranks' stdout reaches mpiexec interleaved, lines sometimes joined
    lines = sorted(re.findall(r"rank \d: \w+ initialized=\w+?(?=rank|\s|$)", r.stdout))
    if mode == "ok":
        assert lines == [f"rank {k}: TorchDistComm initialized=True" for k in (0, 1)], r.stdout
        assert "warning" not in r.stderr
    else:
        assert lines == [f"rank {k}: MPIComm initialized=False" for k in (0, 1)], r.stdout
        assert "the first gloo allreduce failed" in r.stderr and "using MPI" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("mode", ["kill", "exception"])
def test_a_failing_rank_ends_the_whole_job(tmp_path, mode):
    exe = mpiexec()
    script = tmp_path / "faulty.py"
    script.write_text(FAULT_SCRIPT)
    result = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", str(script), mode,
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    if mode == "exception":
        assert "injected failure on rank 1" in output
    else:
        assert "KILLED BY SIGNAL: 9" in output or "signal 9" in output.lower(), output[-2000:]


@pytest.mark.parametrize("launcher", [["-m", "mpi4py", "-m", "hybridsim"], ["-m", "hybridsim"]])
def test_a_bad_setting_on_one_rank_ends_the_whole_job(tmp_path, launcher):
    """A setting refused on one rank only (before any collective) ends the job with the
    message and exit status 2, with or without mpi4py's runner, instead of leaving the
    other rank waiting in the parameter broadcast."""
    exe = mpiexec()
    common = ["train", "--game", "pong", "--backend", "ale-py", "--total-frames", "1600",
              "--num-threads", "1", "--torch-threads", "1", "--log-dir", str(tmp_path / "run")]
    result = subprocess.run([exe, "-n", "1", sys.executable, *launcher, *common, "--num-envs", "2", ":",
                             "-n", "1", sys.executable, *launcher, *common, "--num-envs", "0"],
                            capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-2000:]
    assert "num_envs must be >= 1, got 0" in output


def test_ranks_with_different_settings_end_the_job(tmp_path):
    """Different budgets on two ranks would leave them in different collectives (a hang):
    the ranks compare their settings at start and stop with the names of those that differ."""
    exe = mpiexec()
    common = [sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train", "--game", "pong",
              "--backend", "ale-py", "--num-envs", "2", "--num-threads", "1", "--torch-threads", "1",
              "--log-dir", str(tmp_path / "run")]
    result = subprocess.run([exe, "-n", "1", *common, "--total-frames", "1600", ":",
                             "-n", "1", *common, "--total-frames", "3200"],
                            capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-2000:]
    assert "different settings (total_frames)" in output


def test_a_log_dir_that_is_not_shared_by_the_ranks_ends_the_job(tmp_path):
    """A node-local --log-dir: each rank's relative path names its own directory here (each
    starts in another working directory), as /scratch/run would on two nodes. The job
    stops at start, naming the blind rank, leaves no directory behind on it, and does not
    set rank 0's earlier unfinished run aside (a run that cannot start changes nothing)."""
    exe = mpiexec()
    node_a, node_b = tmp_path / "node_a", tmp_path / "node_b"
    (node_a / "run").mkdir(parents=True)
    node_b.mkdir()
    (node_a / "run" / "metrics.csv").write_text("frames,x\n1,2\n")  # no checkpoint: would move
    command = [sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train", "--game", "pong",
               "--backend", "ale-py", "--num-envs", "2", "--num-threads", "1", "--torch-threads", "1",
               "--total-frames", "1600", "--log-dir", "run", "--stall-timeout", "6"]  # looks 2 s
    result = subprocess.run([exe, "-n", "1", "-wdir", str(node_a), *command, ":",
                             "-n", "1", "-wdir", str(node_b), *command],
                            capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-2000:]
    assert "--log-dir run is not one directory for all ranks: rank 1 on" in output, output[-2000:]
    assert "a file system that every node mounts" in output
    assert not (node_b / "run").exists()
    assert sorted(p.name for p in (node_a / "run").iterdir()) == ["metrics.csv"]


def test_processes_that_mpi_does_not_connect_are_refused(monkeypatch):
    """A launcher that says it started 2 processes while MPI sees 1 (srun without --mpi,
    an mpi4py built for another MPI) would give two independent rank-0 runs in one
    directory: refused, with the reason."""
    from hybridsim import dist
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "2")
    pytest.importorskip("mpi4py")
    with pytest.raises(RuntimeError, match="started 2 processes but MPI connects 1"):
        dist.init_comm()
    monkeypatch.delenv("PMI_SIZE")
    monkeypatch.delenv("PMI_RANK")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    assert dist.launched_ranks() == 2
    monkeypatch.setenv("SLURM_STEP_ID", "4294967294")  # the batch script's step: runs once
    assert dist.launched_ranks() == 1


def test_mvapich_mpirun_rsh_is_recognised(monkeypatch):
    """MVAPICH's mpirun_rsh says MV2_COMM_WORLD_*, not PMI_*: seen as a launch of 3."""
    for key in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_ID", "HYBRIDSIM_SINGLE_PROCESS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MV2_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("MV2_COMM_WORLD_SIZE", "3")
    assert dist.launched_ranks() == 3
    pytest.importorskip("mpi4py")
    with pytest.raises(RuntimeError, match="started 3 processes but MPI connects 1"):
        dist.init_comm()


def test_local_rank_prefers_the_mpi_launchers_variable_over_slurms(monkeypatch):
    """Under mpiexec in a batch job every rank inherits SLURM_LOCALID=0 from the batch
    step; the MPI launcher's own variable must win (the order of rank_env.sh)."""
    for key in dist.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    assert dist.local_rank() == 0
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("PMI_LOCAL_RANK", "3")
    assert dist.local_rank() == 3
    monkeypatch.setenv("MV2_COMM_WORLD_LOCAL_RANK", "2")
    assert dist.local_rank() == 2
    monkeypatch.setenv("MPI_LOCALRANKID", "1")
    assert dist.local_rank() == 1
    monkeypatch.setenv("MPI_LOCALRANKID", "one")
    with pytest.raises(RuntimeError, match="MPI_LOCALRANKID='one'.*not a local rank"):
        dist.local_rank()


def test_ranks_of_a_node_spread_over_its_visible_gpus(monkeypatch):
    """auto/cuda: local rank L takes GPU L mod count (NCCL refuses two ranks on one GPU);
    an explicit index is kept; the chosen GPU becomes torch's current device."""
    from hybridsim.train import pick_device
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: chosen.append(torch.device(device)))
    assert pick_device("auto", local_rank=6) == torch.device("cuda", 2)
    assert pick_device("cuda", local_rank=3) == torch.device("cuda", 3)
    assert pick_device("cuda:1", local_rank=3) == torch.device("cuda", 1)
    assert chosen == [torch.device("cuda", 2), torch.device("cuda", 3), torch.device("cuda", 1)]
    with pytest.raises(ValueError, match="only 4 CUDA device"):
        pick_device("cuda:4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto", local_rank=6) == torch.device("cpu")


def test_devices_the_learner_cannot_use_are_named():
    """torch accepts "meta" (no data: "Cannot copy out of meta tensor" at the first update)
    and lists its 20 device types for an unknown name; both now say what to use."""
    from hybridsim.train import pick_device
    for name, why in (("meta", "runs on a CPU or a CUDA GPU"), ("xpu", "runs on a CPU or a CUDA GPU"),
                      ("tpu", "is not a device name"), ("cuda:abc", "is not a device name")):
        with pytest.raises(ValueError, match=f"device '{name}'.*{why}.*use cpu, cuda, cuda:K or auto"):
            pick_device(name)


STALL_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from hybridsim import dist
    from hybridsim.train import TrainConfig, Trainer
    mode, log_dir = sys.argv[1], sys.argv[2]
    dist.REPORT_WAIT_SECONDS, dist.RANK0_GRACE_SECONDS = 3.0, 2.0  # the test's time
    stalled = 0 if mode.endswith("rank0") else 1
    cfg = TrainConfig(game="pong", backend="ale-py", num_envs=2, num_minibatches=1,
                      total_frames=10**7, log_dir=log_dir, num_threads=1, torch_threads=1,
                      log_trajectories=False, log_every=1000.0, stall_timeout=4.0)
    trainer = Trainer(cfg)
    learn = trainer.learn
    def stalling_learn(*args):
        learn(*args)
        if trainer.rank == stalled and trainer.updates == 3:
            if mode.startswith("stop"):  # stopped by a signal: it never runs again
                os.kill(os.getpid(), signal.SIGSTOP)
            while True:  # hung: no progress, no collective
                time.sleep(3600)
    trainer.learn = stalling_learn
    trainer.train()
""")


@pytest.mark.parametrize("mode", ["stop", "hang", "stop-rank0", "hang-serialized"])
def test_a_stalled_rank_ends_the_job_within_the_stall_timeout(tmp_path, mode):
    """A rank that stops (SIGSTOP) or hangs leaves the others blocked in a collective,
    where nothing of theirs runs: the watchdog thread ends the job after stall_timeout,
    and says where each rank is and which one the others wait on (a stopped rank cannot
    answer; a stopped rank 0, which reports for all, is named by the rank that saw it;
    without MPI_THREAD_MULTIPLE the watchdogs cannot talk, and each says where it is)."""
    exe = mpiexec()
    script = tmp_path / "stall.py"
    script.write_text(STALL_SCRIPT)
    start = time.monotonic()
    env = dict(os.environ, MPI4PY_RC_THREAD_LEVEL="serialized") if mode == "hang-serialized" else None
    result = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", str(script), mode,
                             str(tmp_path / "run")], capture_output=True, text=True, timeout=120, env=env)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and time.monotonic() - start < 90, output[-2000:]
    assert re.search(r"no training progress for \d+ s \(last: [1-9][\d,]* frames\)", output), output[-2000:]
    if mode == "hang-serialized":
        assert "(this rank: not in a collective, at stall.py:" in output, output[-2000:]
        return
    if mode == "stop-rank0":
        assert "rank 1: no training progress" in output, output[-2000:]
        assert re.search(r"rank 1: no training progress for \d+ s \(last: [\d,]+ frames\) \(this rank: waiting "
                         r"in an all-reduce, at .*\); rank 0 did not end the job in the \d+ s since it was told, "
                         r"so it is likely the one hung", output), output[-2000:]
        return
    assert "Where each rank is:" in output and "the job waits on rank 1\n" in output, output[-2000:]
    assert re.search(r"rank 0: waiting in an all-reduce, at hybridsim/dist.py:\d+ in allreduce_sum", output), \
        output[-2000:]
    rank1 = ("rank 1: no answer in 3 s (stopped" if mode == "stop"
             else "rank 1: not in a collective, at stall.py:")
    assert rank1 in output, output[-2000:]


STARTUP_STALL_SCRIPT = textwrap.dedent("""
    import sys, time
    from hybridsim import train
    from hybridsim.train import TrainConfig, Trainer
    make = train.make_vector_env
    def stuck_on_rank_1(*args, **kwargs):
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 1:
            while True:  # a load that never ends; rank 0 waits in the next collective
                time.sleep(3600)
        return make(*args, **kwargs)
    train.make_vector_env = stuck_on_rank_1
    cfg = TrainConfig(game="pong", backend="ale-py", num_envs=2, num_minibatches=1,
                      total_frames=10**7, log_dir=sys.argv[1], num_threads=1, torch_threads=1,
                      log_trajectories=False, stall_timeout=2.0)
    Trainer(cfg).train()
""")


def test_a_rank_stuck_while_starting_ends_the_job(tmp_path):
    """The watchdog started with train(); a rank stuck in the Trainer's set-up (before
    the first parameter broadcast) hung the job for good."""
    exe = mpiexec()
    script = tmp_path / "startup_stall.py"
    script.write_text(STARTUP_STALL_SCRIPT)
    start = time.monotonic()
    try:
        result = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", str(script),
                                 str(tmp_path / "run")], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the job still ran after 90 s")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and time.monotonic() - start < 60, output[-2000:]
    assert re.search(r"no training progress for \d+ s \(last: starting up\)", output), output[-2000:]
    assert "rank 1: not in a collective, at startup_stall.py:" in output, output[-2000:]
    assert "the job waits on rank 1\n" in output, output[-2000:]


@pytest.mark.parametrize("runner", [["-m", "mpi4py"], []], ids=["python-m-mpi4py", "python"])
def test_a_bad_argument_on_one_rank_ends_the_job(tmp_path, runner):
    """A rank that stopped on an argument error before MPI_Init left the others waiting in
    MPI_Init for good (hydra); `train` now joins MPI before reading its arguments."""
    exe = mpiexec()
    shim = tmp_path / "one_bad_rank.sh"
    shim.write_text("#!/bin/bash\n"
                    "[ \"$PMI_RANK\" = 1 ] && set -- \"$@\" --no-such-option\n"
                    'exec "$@"\n')
    shim.chmod(0o755)
    cmd = [exe, "-n", "2", str(shim), sys.executable, *runner, "-m", "hybridsim", "train",
           "--game", "pong", "--backend", "ale-py", "--num-envs", "2", "--num-minibatches", "1",
           "--total-frames", "100000000", "--log-dir", str(tmp_path / "run")]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the job still ran after 90 s")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "unrecognized arguments: --no-such-option" in output, output[-2000:]


def test_a_rank_that_never_reaches_mpi_init_ends_the_job(tmp_path):
    """Rank 1 stuck before MPI (here a shim that never starts it; on a cluster, Python's
    imports on a hung file system) left rank 0 inside MPI_Init, which holds the
    interpreter lock, for good: a watcher process now ends rank 0, and the launcher the job."""
    exe = mpiexec()
    shim = tmp_path / "rank1_never_starts.sh"
    shim.write_text('#!/bin/bash\n[ "$PMI_RANK" = 1 ] && sleep 3600\nexec "$@"\n')
    shim.chmod(0o755)
    cmd = [exe, "-n", "2", str(shim), sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train",
           "--game", "pong", "--backend", "cpu", "--num-envs", "2", "--num-minibatches", "1",
           "--total-frames", "1000", "--log-dir", str(tmp_path / "run")]
    start = time.monotonic()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=90,
                                env=dict(os.environ, HYBRIDSIM_MPI_INIT_TIMEOUT="3"))
    except subprocess.TimeoutExpired:
        pytest.fail("the job still ran after 90 s")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and time.monotonic() - start < 60, output[-2000:]
    assert re.search(r"rank 0 \(.*\): MPI_Init has not completed in 3 s: another rank has not joined", output), \
        output[-2000:]


def test_the_mpi_init_watcher_ends_the_rank_however_its_own_output_fares(tmp_path):
    """The watcher's message went first: with stderr closed it crashed, and blocked on a
    hung file system it never killed; a job-wide SIGTERM/SIGUSR1 ended the watcher itself."""
    import signal
    from hybridsim import cli
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # stands in for MPI_Init
    try:
        watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", cli._MPI_INIT_WATCHER, str(rank.pid),
                                    "3", "rank 0: MPI_Init has not completed"], stdin=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        watcher.send_signal(signal.SIGTERM)  # as scancel signals every process of the step
        watcher.send_signal(signal.SIGUSR1)
        assert rank.wait(timeout=30) == -signal.SIGKILL
        watcher.stdin.close()
        assert watcher.wait(timeout=30) == 0
    finally:
        rank.kill()
        rank.wait()
    closed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # stderr closed: the message cannot go out, the rank ends all the same
        watcher = subprocess.Popen(["/bin/sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-I", "-S", "-c",
                                    cli._MPI_INIT_WATCHER, str(closed.pid), "1", "message"],
                                   stdin=subprocess.PIPE)
        assert closed.wait(timeout=30) == -signal.SIGKILL
        watcher.stdin.close()
        watcher.wait(timeout=30)
    finally:
        closed.kill()
        closed.wait()


def test_the_mpi_init_limit_follows_the_stall_timeout(monkeypatch):
    from hybridsim import cli
    from hybridsim.train_config import TrainConfig
    assert cli._stall_timeout_in(["train", "--stall-timeout", "30"]) == 30.0
    assert cli._stall_timeout_in(["train", "--stall-timeout=0"]) == 0.0
    assert cli._stall_timeout_in(["train", "--stall", "45"]) == cli._stall_timeout_in(["train", "--stall-t=45"]) == 45
    assert cli._stall_timeout_in(["train", "--st", "5"]) == 5  # unambiguous, as argparse takes it
    assert cli._stall_timeout_in(["train", "--stall-timeout", "5", "--stall=7"]) == 7  # the last one
    assert cli._stall_timeout_in(["train", "--s", "5"]) == TrainConfig.stall_timeout  # --seed too
    assert cli._stall_timeout_in(["train", "--seed", "7", "--stall-timeout"]) == TrainConfig.stall_timeout
    assert cli._stall_timeout_in(["train", "--stall-timeout", "soon"]) == TrainConfig.stall_timeout
    assert cli._stall_timeout_in(["train"]) == TrainConfig.stall_timeout
    monkeypatch.delenv(cli.MPI_INIT_TIMEOUT_VARIABLE, raising=False)
    assert cli._watch_mpi_init(["train", "--stall-timeout", "0"]) is None  # the watchdogs are off
    assert cli._watch_mpi_init(["train", "--stall-timeout", "inf"]) is None  # no limit
    monkeypatch.setenv(cli.MPI_INIT_TIMEOUT_VARIABLE, "inf")
    assert cli._watch_mpi_init(["train"]) is None


def test_the_train_options_the_watcher_knows_are_the_parsers():
    """_option_in resolves abbreviations against this list as argparse does against the
    parser's; they must be the same."""
    import argparse

    from hybridsim import cli
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    train = sub.choices["train"]
    assert sorted(cli._train_options()) == sorted(o for o in train._option_string_actions if o.startswith("--"))


def test_the_mpi_init_limit_reads_a_config_files_stall_timeout(tmp_path, monkeypatch):
    from hybridsim import cli
    from hybridsim.train_config import TrainConfig
    config = tmp_path / "run.toml"
    config.write_text("game = 'pong'\nstall_timeout = 40\n")
    assert cli._stall_timeout_in(["train", "--config", str(config)]) == 40.0
    assert cli._stall_timeout_in(["train", f"--conf={config}"]) == 40.0
    assert cli._stall_timeout_in(["train", "--config", str(config), "--stall-timeout", "9"]) == 9.0
    assert cli._stall_timeout_in(["train", "--", "--config", str(config)]) == TrainConfig.stall_timeout
    (tmp_path / "bad.toml").write_text("stall_timeout = [")
    (tmp_path / "word.json").write_text('{"stall_timeout": "soon"}')
    for unusable in ("bad.toml", "word.json", "missing.toml"):  # the parser names these later
        assert cli._stall_timeout_in(["train", "--config", str(tmp_path / unusable)]) == TrainConfig.stall_timeout
    config.write_text("stall_timeout = 0\n")
    monkeypatch.delenv(cli.MPI_INIT_TIMEOUT_VARIABLE, raising=False)
    assert cli._watch_mpi_init(["train", "--config", str(config)]) is None
    fifo = tmp_path / "hung.toml"  # reading it blocks, as a file on a hung file system does
    os.mkfifo(fifo)
    from hybridsim import config as config_module  # (the real one refuses a FIFO at once)
    monkeypatch.setattr(config_module, "resolve_config_path", lambda name: fifo)
    monkeypatch.setattr(cli, "CONFIG_READ_SECONDS", 0.5)
    start = time.monotonic()
    assert cli._stall_timeout_in(["train", "--config", str(fifo)]) == TrainConfig.stall_timeout
    assert time.monotonic() - start < 3
    with open(fifo, "w"):  # lets the reader thread finish
        pass


def test_ending_the_job_waits_only_a_little_for_a_hung_stderr(monkeypatch, capsys):
    """The watchdog's report and an error's message go to stderr before MPI_Abort: stderr
    on a hung file system (a write that never returns) must not keep the job alive."""
    import io
    import threading
    monkeypatch.setattr(dist, "_output_hung", threading.Event())
    dist.say_within("rank 0: a message")
    assert capsys.readouterr().err == "rank 0: a message\n"
    hung = threading.Event()

    class HungStream(io.TextIOBase):
        def write(self, text):
            hung.wait(30)  # set when the test ends; a say_within that waits fails the timing
            return len(text)

    monkeypatch.setattr(sys, "stderr", HungStream())
    start = time.monotonic()
    dist.say_within("rank 0: no training progress", seconds=0.5)
    dist.say_within(None, seconds=0.5)  # a second say on the hung stream does not wait again
    assert time.monotonic() - start < 1.5
    hung.set()


def test_a_usage_error_under_mpi_goes_out_as_the_other_errors_do(monkeypatch):
    """argparse printed its usage error to stderr itself: on a hung stderr the rank blocked
    there and never ended the job. In an MPI job the message now goes to _abort_mpi_job
    (which waits for stderr a few seconds, then ends the job); alone, argparse's own exit."""
    import io
    from hybridsim import cli

    class NoStderr(io.TextIOBase):
        def write(self, text):
            raise AssertionError(f"argparse wrote to stderr itself: {text!r}")

    ended = []

    def abort(code, message=None):
        ended.append((code, message))
        raise SystemExit(code)  # the real one ends the process (os._exit)
    monkeypatch.setattr(cli, "_in_mpi_job", lambda: True)
    monkeypatch.setattr(cli, "_abort_mpi_job", abort)
    monkeypatch.setattr(sys, "stderr", NoStderr())
    for argv, why in ((["train", "--no-such-option"], "unrecognized arguments: --no-such-option"),
                      (["no-such-command"], "invalid choice: 'no-such-command'"),
                      (["train", "--num-envs", "two"], "argument --num-envs: invalid int value: 'two'")):
        with pytest.raises(SystemExit) as stop:
            cli.build_parser().parse_args(argv)
        code, message = ended.pop()
        assert stop.value.code == code == 2 and message.startswith("usage: hybridsim"), message
        assert why in message and ": error: " in message, message
    monkeypatch.setattr(cli, "_in_mpi_job", lambda: False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with pytest.raises(SystemExit) as stop:
        cli.build_parser().parse_args(["train", "--no-such-option"])
    assert stop.value.code == 2 and not ended
    assert "unrecognized arguments: --no-such-option" in sys.stderr.getvalue()


def test_a_stall_report_groups_the_ranks_and_names_those_waited_on():
    from hybridsim import dist
    at = "hybridsim/dist.py:139 in allreduce_sum"
    reports = {0: ("an all-reduce", at), 1: ("an all-reduce", at), 2: (None, "x.py:3 in f"),
               4: ("an all-reduce", at), 5: ("an all-reduce", at), 6: ("an all-reduce", at)}
    assert dist.describe_stall(reports, 8) == [
        f"  ranks 0-1, 4-6: waiting in an all-reduce, at {at}",
        "  rank 2: not in a collective, at x.py:3 in f",
        f"  ranks 3, 7: no answer in {dist.REPORT_WAIT_SECONDS:.0f} s (stopped, gone, or stuck where "
        "Python cannot run)",
        "  the job waits on ranks 2-3, 7"]
    mismatched = {0: ("an all-reduce", at), 1: ("a broadcast from rank 0", "y.py:9 in g")}
    assert dist.describe_stall(mismatched, 2)[-1].startswith("  every rank is inside a collective")
    assert dist.rank_ranges([0]) == "0" and dist.rank_ranges([1, 3, 4, 5, 9, 10]) == "1, 3-5, 9-10"


def test_where_the_main_thread_is_is_found_without_reading_source_files(monkeypatch):
    """traceback's linecache stats and reads each frame's source file: on the hung file
    system a stall report is about, the watchdog itself hung and never ended the job."""
    import linecache
    from hybridsim import dist

    def no_file_access(*args, **kwargs):
        raise AssertionError("the location read a source file")
    for name in ("getline", "checkcache", "updatecache", "getlines"):
        monkeypatch.setattr(linecache, name, no_file_access)
    where = dist.main_thread_location()
    assert where.startswith("hybridsim/dist.py:") and "in main_thread_location" in where, where
    assert "test_dist.py:" in where and "in test_where_the_main_thread_is_is_found" in where, where
    stdlib = dist._STDLIB
    assert dist._library_code(stdlib + "contextlib.py")
    assert dist._library_code("/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py")
    assert not dist._library_code("/venv/lib/python3.12/site-packages/hybridsim/dist.py")
    assert not dist._library_code("/home/me/stall.py")


FAILING_CHANNEL_SCRIPT = textwrap.dedent("""
    from hybridsim import dist
    class Broken:
        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise RuntimeError("MPI_ERR_COMM: the channel is gone")
            return fail
    class Comm:
        size = 2
        tracker = dist.CollectiveTracker.__new__(dist.CollectiveTracker)
    Comm.tracker.current, Comm.tracker.report_comm = "an all-reduce", Broken()
    for rank in (0, 1):
        dog = dist.ProgressWatchdog(rank, stall_seconds=3600, comm=Comm())
        dog._abort("no training progress for 9 s (last: 160 frames)")
""")


def test_a_failing_watchdog_channel_still_ends_the_job_with_a_report():
    """An MPI error on the watchdogs' own communicator killed the watchdog thread, and
    with it the abort; now each rank reports for itself, as without the channel."""
    result = subprocess.run([sys.executable, "-c", FAILING_CHANNEL_SCRIPT], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert (f"rank {rank}: no training progress for 9 s (last: 160 frames); the watchdogs' messages failed "
                f"(RuntimeError: MPI_ERR_COMM: the channel is gone) (this rank: waiting in an all-reduce, at ") \
            in result.stderr, result.stderr
    assert result.stderr.count("another rank is hung or gone; ending the job") == 2, result.stderr


WATCHDOG_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from hybridsim import dist
    signal.signal(signal.SIGUSR1, lambda *_: None)  # as hybridsim train installs request_stop
    dog = dist.ProgressWatchdog(rank=0, stall_seconds=3600, grace_seconds=2.0).start()
    print("ready", flush=True)
    r, w = os.pipe()
    os.read(r, 1)  # blocked in C for good, as a rank waiting in a collective is
""")


def test_a_stop_signal_that_cannot_be_honoured_is_noticed(tmp_path):
    """SIGUSR1/SIGTERM reach the watchdog through the wakeup fd while the main thread is
    blocked in C; with no progress for grace_seconds after it, the watchdog ends the job
    (here, without MPI, it only reports)."""
    import threading
    proc = subprocess.Popen([sys.executable, "-c", WATCHDOG_SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines, reported = [], threading.Event()

    def read_stderr():
        for line in proc.stderr:
            lines.append(line)
            if "has not moved since" in line:
                reported.set()
    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        proc.send_signal(signal.SIGUSR1)
        reported.wait(60)  # grace 2 s, checked every second; a loaded machine may take longer
    finally:
        proc.kill()
        proc.wait(timeout=30)
        reader.join(timeout=30)
    err = "".join(lines)
    assert "a stop signal came" in err and "has not moved since" in err, err


def test_a_resume_waiting_for_a_killed_writers_file_is_not_taken_for_a_hang(tmp_path):
    """Rank 1's trajectory file still flagged open by a killed job: its resume waits until
    the file has been quiet for 2 x --log-flush-seconds + 5 s, while rank 0 waits in a
    collective. The start-up watchdog (3 x --stall-timeout) ended the healthy job with
    "another rank is hung or gone"; that wait is now allowed for."""
    from hybridsim import trajlog
    exe = mpiexec()
    run = tmp_path / "run"
    args = [exe, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train", "--game", "pong",
            "--backend", "cpu", "--num-envs", "2", "--num-minibatches", "1", "--num-threads", "1",
            "--torch-threads", "1", "--noop-max", "5", "--log-every", "0", "--log-flush-seconds", "5",
            "--stall-timeout", "2", "--log-dir", str(run)]
    first = subprocess.run([*args, "--total-frames", "320"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    rank1 = trajlog.rank_file(run, 1)
    data = bytearray(rank1.read_bytes())  # the superblock flags a killed SWMR writer leaves
    size = 12 + 4 * data[9]
    data[11] = trajlog.SUPER_WRITE_ACCESS | trajlog.SUPER_SWMR_WRITE_ACCESS
    data[size:size + 4] = trajlog.hdf5_checksum(bytes(data[:size])).to_bytes(4, "little")
    rank1.write_bytes(bytes(data))  # modified now: the resume waits up to 15 s (10 s after a
    # start of about 5 s), well over the 3 x 2 s the start-up watchdog allowed
    start = time.monotonic()
    second = subprocess.run([*args, "--total-frames", "640", "--resume"], capture_output=True, text=True,
                            timeout=300)
    output = second.stdout + second.stderr
    assert second.returncode == 0, output[-3000:]
    assert "waiting until it has been unchanged for 15 s" in output and time.monotonic() - start > 10, \
        output[-3000:]
    assert "trained 640 frames" in second.stdout


def test_two_ranks_stopped_by_a_signal_end_with_status_3_and_no_abort(tmp_path):
    """A stop by SIGUSR1 (Slurm's warning before the time limit) on every rank: a checkpoint,
    exit status 3 from mpiexec, and no "Abort(3) on node 0" per rank (mpi4py's runner turned
    the ranks' status 3 into MPI_Abort; the entry point now finalizes MPI first). main()
    called in-process keeps MPI: here a first stopped call, then a resumed one through run()."""
    exe = mpiexec()
    script = tmp_path / "stop_when_built.py"
    script.write_text(textwrap.dedent("""\
        import os, signal, sys
        import hybridsim.train as train
        from hybridsim.cli import main, run
        built = train.Trainer.__init__
        def built_then_signalled(self, *a, **k):
            built(self, *a, **k)
            os.kill(os.getpid(), signal.SIGUSR1)
        train.Trainer.__init__ = built_then_signalled
        code = main(sys.argv[1:])
        print(f"first call: {code}", flush=True)  # one write: the ranks' lines must not interleave
        sys.exit(run(sys.argv[1:] + ["--resume"]))
        """))
    run = tmp_path / "run"
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-m", "mpi4py", str(script), "train",
                           *TRAIN_ARGS, "--total-frames", "100000", "--num-envs", "2", "--log-dir", str(run)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(pathlib.Path(dist.__file__).parent.parent)))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 3, output[-3000:]
    assert proc.stdout.count("first call: 3") == 2 and proc.stdout.count("stopped by a signal") == 2, output[-3000:]
    assert "Abort" not in output, output[-3000:]
    stops = [int(x.replace(",", "")) for x in re.findall(r"stopped by a signal at ([\d,]+) frames", proc.stdout)]
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert 0 < stops[0] < stops[1] == state["frames"] < 100000 and state["world_size"] == 2, stops  # resumed


def test_merged_episodes_do_not_depend_on_when_merges_happen():
    """Rank 0's clock picks the iterations that merge the ranks' episodes; appended rank
    after rank, the same run listed them in another order (and reported another "last
    100" mean) from one launch to the next."""
    import types
    from hybridsim.train import Trainer

    class Gather:  # comm.gather of two ranks, played from rank 0
        def __init__(self, ranks):
            self.ranks = ranks

        def gather(self, mine):
            return [mine] + [other.pop(0) for other in self.ranks[1:]]

    # (local env, episode id, return, length, start, end) of two ranks with 2 envs each
    rank0 = [(0, 0, 1.0, 5, 0, 40), (1, 0, 2.0, 6, 0, 48), (0, 1, 3.0, 5, 40, 80)]
    rank1 = [(1, 0, 4.0, 4, 0, 32), (0, 0, 5.0, 9, 0, 72), (1, 1, 6.0, 6, 32, 80)]

    def merged(boundaries):
        """all_episodes after merges at these frames (each merge takes what ended by then)."""
        per_rank_batches = []
        for r, episodes in enumerate((rank0, rank1)):
            batches, done = [], 0
            for frame in boundaries:
                upto = [e for e in episodes if e[5] <= frame][done:]
                done += len(upto)
                batches.append([(e[0] + 2 * r, *e[1:]) for e in upto])
            per_rank_batches.append(batches)
        me = types.SimpleNamespace(env_ids=np.arange(2), episodes=types.SimpleNamespace(finished=[]),
                                   _episodes_merged=0, rank=0, all_episodes=[],
                                   comm=Gather([None, per_rank_batches[1]]))
        for batch in per_rank_batches[0]:
            me.episodes.finished.extend(batch)
            Trainer._merge_episodes(me)
        return me.all_episodes

    once, often = merged([80]), merged([40, 60, 80])
    assert once == often
    assert [e[5] for e in once] == sorted(e[5] for e in once)
