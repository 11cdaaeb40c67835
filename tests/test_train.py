"""The training loop end to end on a tiny budget (ale-py's vector env as the backend)."""
import copy
import csv
import json
import os
import pathlib
import re
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ale_py")

from hybridsim import sysinfo, train, trajlog  # noqa: E402
from hybridsim.cli import build_parser  # noqa: E402
from hybridsim.config import build_config  # noqa: E402
from hybridsim.train import TrainConfig, Trainer  # noqa: E402


def tiny_config(tmp_path, **overrides):
    base = dict(game="pong", backend="ale-py", num_envs=4, num_minibatches=2, total_frames=1600,
                log_dir=str(tmp_path), num_threads=1, torch_threads=1, log_every=0.0,
                checkpoint_every=800, noop_max=5)
    base.update(overrides)
    return TrainConfig(**base)


@pytest.mark.parametrize("schedule", ["a2c", "impala"])
def test_short_run_writes_every_artifact(tmp_path, schedule):
    cfg = tiny_config(tmp_path, schedule=schedule, env_batch_size=2, learner_batch=2)
    summary = Trainer(cfg).train()
    assert summary["frames"] >= cfg.total_frames and summary["updates"] > 0
    for name in ("checkpoint.pt", "metrics.csv", "learning_curve.png", "traj_rank00000.h5",
                 "trajectories.h5"):
        assert (tmp_path / name).is_file(), name
    assert any((tmp_path / "tensorboard").iterdir())
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert int(rows[-1]["frames"]) == summary["frames"]
    logged = [int(row["frames"]) for row in rows]
    assert logged == sorted(set(logged)), logged  # one row per frame count
    steps = trajlog.read_steps(tmp_path / "trajectories.h5", fields=["env_id", "global_frame"])
    assert (steps["env_id"] >= 0).all()
    logged_frames = steps["env_id"].size * cfg.frame_skip
    assert logged_frames == summary["frames"]
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert state["frames"] == summary["frames"]


def test_same_seed_same_parameters(tmp_path):
    params = []
    for k in range(2):
        cfg = tiny_config(tmp_path / str(k), log_trajectories=False)
        trainer = Trainer(cfg)
        trainer.train()
        params.append(torch.cat([p.detach().flatten() for p in trainer.model.parameters()]))
    assert torch.equal(params[0], params[1])


@pytest.mark.parametrize("game,options", [
    ("pong", dict(max_episode_frames=600)),
    ("breakout", dict(life_loss_terminal=True, bootstrap_truncation=True, use_lstm=True,
                      max_episode_frames=300)),
])
def test_a_seed_trains_the_same_network_on_hybridsims_engine_and_on_ale_py(tmp_path, game, options):
    """The engines are exact, so one seed gives one run on either: the same observations,
    rewards, lives, episode ends, sticky actions and no-op starts, hence the same episodes
    and bit for bit the same parameters. Short episodes (600 and 300 frames) put resets,
    truncations and, in breakout, lost lives inside the run."""
    runs = {}
    for backend in ("cpu", "ale-py"):
        cfg = tiny_config(tmp_path / backend, backend=backend, game=game, total_frames=4000,
                          repeat_action_probability=0.25, log_trajectories=False, seed=3,
                          checkpoint_every=10**9, **options)
        runs[backend] = Trainer(cfg)
        runs[backend].train()
    ours, theirs = runs["cpu"], runs["ale-py"]
    assert ours.updates == theirs.updates > 0 and ours.frames == theirs.frames
    assert len(ours.all_episodes) >= 4 and ours.all_episodes == theirs.all_episodes
    for name, value in ours.model.state_dict().items():
        assert torch.equal(value, theirs.model.state_dict()[name]), name



def test_the_bench_train_env_clock_counts_a_step_that_calls_send_once(monkeypatch):
    """ale-py's AtariVectorEnv.step calls its own send: the nested call is inside the step's
    time, not added to it."""
    from hybridsim import bench
    now = [0.0]
    monkeypatch.setattr(bench.time, "perf_counter", lambda: now[0])

    class Env:
        def step(self, actions):
            self.send(actions)
            now[0] += 2.0

        def send(self, actions):
            now[0] += 1.0

    env = Env()
    clock = bench._EnvClock(env)
    env.step(None)
    assert clock.seconds == 3.0
    env.send(None)
    assert clock.seconds == 4.0


def test_bench_train_times_both_engines_and_refuses_runs_that_differ(capsys, monkeypatch):
    """`bench --train` trains the recipe on each engine in alternating rounds and prints
    the loop's frames/s, the env's share and the ratio, each from the loop's own clock
    (metrics.csv's seconds, rounded to 0.1 s, made short runs' ratios 1.00); a pair that
    trained differently (here ale-py's side given another seed) is an error, not a row."""
    import time
    from hybridsim import bench, cli
    honest = bench._train_once
    timed = []

    def wall_timed(settings):
        start = time.perf_counter()
        run = honest(settings)
        timed.append((settings["backend"], settings["total_frames"], run, time.perf_counter() - start))
        return run

    monkeypatch.setattr(bench, "_train_once", wall_timed)
    lines = []
    result = bench.bench_train(games=["pong"], frames=640, rounds=2, print_fn=lines.append)
    assert [(b, f) for b, f, _, _ in timed] == [("cpu", 1), ("ale-py", 1), ("cpu", 640), ("ale-py", 640),
                                                ("ale-py", 640), ("cpu", 640)]  # warm-ups, then alternating
    for _, _, run, wall in timed[2:]:
        assert run["frames"] == 640 and 0 < run["seconds"] < wall and 0 < run["env_share"] < 1
        assert run["fps"] == pytest.approx(640 / run["seconds"])
    row = result["rows"][0]
    assert sorted(row["all"]["hybridsim"]) == sorted(run["fps"] for b, f, run, _ in timed[2:] if b == "cpu")
    assert row["hs_over_ale"] == pytest.approx(float(np.median(
        np.array(row["all"]["hybridsim"]) / np.array(row["all"]["ale-py"]))))
    assert "quickstart.toml: a2c, nature, 16 envs" in lines[0] and "640 frames (2 iterations) per run" in lines[0]
    assert lines[2].split()[0] == "pong" and lines[3] == "each round trained bit for bit the same network on both engines"
    monkeypatch.setattr(bench, "_train_once", honest)
    args = ["bench", "--train", "--games", "pong", "--train-frames", "320", "--rounds", "1"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "320 frames (1 iteration) per run" in out and "\npong " in out, out
    assert "note: some runs took under 2 s" in out  # one iteration: mostly noise, and it says so

    def other_seed_on_ale_py(settings):
        return honest(dict(settings, seed=settings["seed"] + 1) if settings["backend"] == "ale-py" else settings)

    monkeypatch.setattr(bench, "_train_once", other_seed_on_ale_py)
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "pong, round 1: the same seed trained differently on hybridsim's engine and on ale-py's" in err, err
    assert "Traceback" not in err
    monkeypatch.setenv("PMI_SIZE", "2")  # under mpiexec the ranks would train together
    assert cli.main(args) == 2
    assert "bench --train times one process; the launcher started 2" in capsys.readouterr().err


def test_config_file_and_command_line(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('game = "breakout"\nnum_envs = 8\nlr = 0.001\n')
    args = build_parser().parse_args(["train", "--config", str(config), "--num-envs", "12",
                                      "--num-minibatches", "3", "--lr-decay", "false"])
    cfg = build_config(TrainConfig, args)
    assert (cfg.game, cfg.num_envs, cfg.lr, cfg.lr_decay) == ("breakout", 12, 0.001, False)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"num_env": 3}))
    args = build_parser().parse_args(["train", "--config", str(bad)])
    with pytest.raises(ValueError, match="unknown settings \\['num_env'\\]"):
        build_config(TrainConfig, args)


def test_shipped_recipes_are_valid_configs():
    from hybridsim.config import shipped_recipes
    recipes = shipped_recipes()
    assert {"pong-cpu", "pong-h200", "quickstart"} <= set(recipes)
    for name in recipes:
        cfg = build_config(TrainConfig, build_parser().parse_args(["train", "--config", name]))
        cfg.validate()
        assert cfg.game in {"pong", "kung_fu_master"}
    with pytest.raises(FileNotFoundError, match="recipes: .*pong-cpu"):
        build_config(TrainConfig, build_parser().parse_args(["train", "--config", "pong-tpu"]))


@pytest.mark.parametrize("field,value,message", [
    ("num_envs", 6, "divisible by num_minibatches"),
    ("schedule", "ppo", "schedule must be a2c or impala"),
    ("backend", "tpu", "backend must be"),
    ("lr", float("nan"), "lr must be a finite number > 0"),
    ("lr", float("inf"), "lr must be a finite number > 0"),
    ("num_minibatches", -1, "num_minibatches must be >= 1"),
    ("num_minibatches", 0, "num_minibatches must be >= 1"),
    ("gamma", 1.5, "gamma must be in"),
    ("entropy_coef", float("nan"), "entropy_coef"),
    ("max_grad_norm", 0.0, "max_grad_norm"),
    ("checkpoint_every", 0, "checkpoint_every must be >= 1"),
    ("checkpoint_every", -100, "checkpoint_every must be >= 1"),
    ("sync_check_every", 0, "sync_check_every must be >= 1"),
    ("obs_stride", 0, "obs_stride must be in 1..2\\*\\*63-1"),
    ("obs_stride", 10**23, "obs_stride must be in 1..2\\*\\*63-1"),  # h5py: "Object dtype has no HDF5 equivalent"
    ("log_dir", "/tmp/run\udcff\udcfe", "log_dir must be a UTF-8 path"),  # TensorBoard failed after files were made
    ("log_every", float("nan"), "log_every"),
    ("learner_batch", 0, "learner_batch must be >= 1"),
    ("num_envs", 10**11, "num_envs must be < 2\\*\\*20"),
    ("frame_skip", 40000, "frame_skip must be <= 3600"),
])
def test_invalid_settings_are_named(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(tmp_path, **dict(dict(num_minibatches=4), **{field: value})).validate()


@pytest.mark.parametrize("args,message", [
    (["--schedule", "impala", "--num-minibatches", "2"], "--num-minibatches applies to --schedule a2c, not impala"),
    (["--env-batch-size", "1"], "--env-batch-size applies to --schedule impala, not a2c"),
    (["--learner-batch", "3"], "--learner-batch applies to --schedule impala"),
    (["--impala-order", "completion"], "--impala-order applies to --schedule impala"),
    (["--gpu-emulate", "true"], "--gpu-emulate applies to --backend gpu or hybrid, not ale-py"),
    (["--log-trajectories", "false", "--log-observations", "true"], "--log-observations applies to trajectory logs"),
    (["--log-trajectories", "false", "--log-compression", "gzip"], "--log-compression applies to trajectory logs"),
    (["--obs-stride", "7"], "--obs-stride applies with --log-observations, which is off"),
])
def test_command_line_settings_the_run_would_ignore_are_refused(tmp_path, capsys, args, message):
    """An option that the chosen schedule, backend or logging leaves unused was silently
    ignored; on the command line it is now an error (a recipe may carry such settings)."""
    from hybridsim import cli
    code = cli.main(["train", "--backend", "ale-py", "--num-envs", "2", "--total-frames", "64",
                     "--log-dir", str(tmp_path / "run"), "--num-threads", "1", *args])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_recipe_may_carry_settings_of_another_schedule(tmp_path, capsys):
    """Only the command line is held to it (a recipe may serve both schedules), and a
    default spelled out on the command line (a wrapper's --gpu-emulate false) is no error."""
    from hybridsim import cli
    recipe = tmp_path / "both.toml"
    recipe.write_text('schedule = "impala"\nnum_minibatches = 4\nlearner_batch = 2\nenv_batch_size = 2\n'
                      'backend = "ale-py"\nnum_envs = 2\ntotal_frames = 64\nnum_threads = 1\n')
    code = cli.main(["train", "--config", str(recipe), "--log-dir", str(tmp_path / "run"),
                     "--gpu-emulate", "false", "--log-every", "0"])
    assert code == 0, capsys.readouterr().err


def test_the_closing_report_says_where_the_trajectories_are(tmp_path, capsys):
    from hybridsim import cli
    args = ["train", "--backend", "cpu", "--num-envs", "2", "--total-frames", "64", "--num-threads", "1",
            "--log-every", "0"]
    assert cli.main([*args, "--log-dir", str(tmp_path / "logged")]) == 0
    run = tmp_path / "logged"
    assert f"trajectories: {run / 'trajectories.h5'} (hybridsim analyze {run})" in capsys.readouterr().out
    assert (run / "trajectories.h5").is_file()
    assert cli.main([*args, "--log-dir", str(tmp_path / "unlogged"), "--log-trajectories", "false"]) == 0
    out = capsys.readouterr().out
    assert "curve:" in out and "trajectories:" not in out


def test_a_killed_checkpoint_writes_temporary_file_is_removed_on_resume(tmp_path, capsys):
    Trainer(tiny_config(tmp_path, total_frames=400, log_trajectories=False)).train()
    import subprocess
    import sys
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that no longer runs
    stale = tmp_path / f"checkpoint.pt.{gone}.139872.tmp"  # atomic_write's name, left by a kill
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / f"checkpoint.pt.{os.getpid()}.1.tmp"  # its writer still runs
    live.write_bytes(b"being written")
    keep = tmp_path / f"notes.{gone}.1.tmp"  # not one of the run's files: the user's
    keep.write_text("mine")
    Trainer(tiny_config(tmp_path, total_frames=800, log_trajectories=False, resume=True)).train()
    assert not stale.exists() and live.exists() and keep.read_text() == "mine"
    assert f"removed {stale.name} from {tmp_path}" in capsys.readouterr().err


def test_a_refused_setting_from_a_config_file_names_the_file(tmp_path, capsys):
    """`lr = nan` in a file, or a recipe's device: the error says where the value came from
    and how to override it; a value the command line gave is the command line's."""
    from hybridsim import cli
    config = tmp_path / "run.toml"
    config.write_text("lr = nan\ntotal_frames = 1000\n")
    args = ["train", "--config", str(config), "--log-dir", str(tmp_path / "run")]
    assert cli.main(args) == 2
    assert (f"lr must be a finite number > 0, got nan (lr = nan comes from --config {config}; --lr on "
            f"the command line overrides it)") in capsys.readouterr().err
    assert cli.main([*args, "--num-steps", "0"]) == 2
    assert "num_steps must be >= 1, got 0\n" in capsys.readouterr().err  # the command line's own
    assert not (tmp_path / "run").exists()


def test_a_rollout_larger_than_the_learners_memory_is_refused(tmp_path):
    """--num-steps 100000000 reached torch's allocator ("tried to allocate 5644800056448
    bytes"); the learner device's memory is the bound (a GPU rollout lives on the GPU)."""
    with pytest.raises(ValueError, match=r"num_steps 100000000 x 4 trajectories: the rollout's observations "
                                         r"alone take [\d,.]+ GiB, more than the [\d,.]+ GiB of this machine"):
        Trainer(tiny_config(tmp_path / "run", num_steps=10**8))
    assert not (tmp_path / "run").exists()


def test_a_rollout_whose_learner_batch_cannot_fit_is_refused(tmp_path, monkeypatch):
    """--num-steps 100000 passed the observations' check (10.5 GiB) and spent minutes in the
    first minibatch, deaf to SIGTERM, before torch refused 45 GB: the network's activations
    for the learner's batch count too (here on a machine of 16 GiB)."""
    from hybridsim.models import activation_bytes_per_observation, build_model
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": (16 << 30) // 4096}
    monkeypatch.setattr(train.os, "sysconf", lambda name: pages[name])
    with pytest.raises(ValueError, match=r"num_steps 100000 x 4 trajectories: the rollout's observations \(10.5 "
                                         r"GiB\) and the nature network's activations for a learner batch of "
                                         r"200,002 observations \(at least [\d.]+ GiB\) exceed the 16.0 GiB of "
                                         r"this machine: lower --num-steps, or raise --num-minibatches"):
        Trainer(tiny_config(tmp_path / "run", num_steps=100_000))
    assert not (tmp_path / "run").exists()
    per_observation = activation_bytes_per_observation(build_model("nature", (4, 84, 84), 6), (4, 84, 84))
    # what the backward pass needs of the Nature CNN: the float input of each convolution and
    # of the fully connected layer (4 bytes a number), but not twice that
    inputs = 4 * (4 * 84 * 84 + 32 * 20 * 20 + 64 * 9 * 9 + 64 * 7 * 7)
    assert inputs <= per_observation < 2 * inputs
    Trainer(tiny_config(tmp_path / "fits", num_steps=1000)).close()  # 2 x 1,001 observations: fits


def test_config_that_is_missing_or_a_directory_is_named(tmp_path):
    parse = build_parser().parse_args
    with pytest.raises(FileNotFoundError, match="config file not found: .*nope.toml .*quickstart"):
        build_config(TrainConfig, parse(["train", "--config", str(tmp_path / "nope.toml")]))
    with pytest.raises(IsADirectoryError, match="is a directory; name a TOML or JSON") as info:
        build_config(TrainConfig, parse(["train", "--config", str(tmp_path)]))
    assert "--resume" not in str(info.value)
    import os
    os.mkfifo(tmp_path / "fifo.toml")  # said "not found"; reading it would block
    with pytest.raises(ValueError, match="fifo.toml: not a regular file"):
        build_config(TrainConfig, parse(["train", "--config", str(tmp_path / "fifo.toml")]))
    (tmp_path / "checkpoint.pt").write_bytes(b"")  # a run directory: say how to continue it
    with pytest.raises(IsADirectoryError, match=f"again with --resume \\(the same --log-dir {tmp_path} "):
        build_config(TrainConfig, parse(["train", "--config", str(tmp_path)]))


@pytest.mark.parametrize("text,suffix,message", [
    ('num_envs = "2"\n', ".toml", "'num_envs' must be an int, got '2'"),
    ('lr = "0.001"\n', ".toml", "'lr' must be a float"),
    ("game = 5\n", ".toml", "'game' must be a str"),
    ("total_frames = 400.7\n", ".toml", "'total_frames' must be an int"),
    ('lr_decay = "no"\n', ".toml", "'lr_decay' must be a bool"),
    ('{"resume": "false"}', ".json", "'resume' must be a bool"),
    ("5", ".json", "a table of settings, got int 5"),
    ('{"lr": 0.1, "lr": 0.2}', ".json", "setting 'lr' is given twice"),  # json takes the last silently
    ('config = "other.toml"\n', ".toml", "cannot name another config file"),
])
def test_config_file_values_have_their_types(tmp_path, text, suffix, message):
    """A config file's values are checked, not coerced ("false" is not False, 400.7 frames
    is not 400), and the command line names the file in the error (exit status 2)."""
    import subprocess
    import sys
    path = tmp_path / f"run{suffix}"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        build_config(TrainConfig, build_parser().parse_args(["train", "--config", str(path)]))
    out = subprocess.run([sys.executable, "-m", "hybridsim", "train", "--config", str(path),
                          "--log-dir", str(tmp_path / "run")], capture_output=True, text=True)
    assert out.returncode == 2 and str(path) in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_a_fresh_run_keeps_a_run_that_wrote_no_checkpoint(tmp_path):
    """A run killed before its first checkpoint leaves trajectories and metrics but nothing
    --resume can continue; a fresh run in its directory (a requeued Slurm job) moves them to
    previous-run-TIME/ untouched and starts. A start that failed before logging anything
    (a bad seed) leaves nothing worth keeping: the next run just starts."""
    Trainer(tiny_config(tmp_path, total_frames=400)).train()
    (tmp_path / "checkpoint.pt").unlink()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert {"metrics.csv", "traj_rank00000.h5"} <= set(before)
    Trainer(tiny_config(tmp_path, total_frames=400)).train()
    aside = list(tmp_path.glob("previous-run-*"))
    assert len(aside) == 1
    assert {p.name: p.read_bytes() for p in aside[0].iterdir() if p.is_file()} == before
    assert (tmp_path / "checkpoint.pt").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.csv").write_text("frames,updates\n")  # a header, no rows
    Trainer(tiny_config(empty, total_frames=400))
    assert not list(empty.glob("previous-run-*"))


def _kept(folder):
    return {int(p.stem.split("_")[1]): p for p in sorted(folder.glob("frames_*.pt"))}


def test_kept_checkpoints_hold_each_checkpoint_and_a_resume_from_an_earlier_one_replays_them(tmp_path):
    """--keep-checkpoints: each checkpoint written stays as checkpoints/frames_N.pt. One
    copied over checkpoint.pt and resumed goes on from there: the later ones move aside,
    and the resume writes them again, bit for bit the same networks (the cpu backend
    restores its environments exactly)."""
    from hybridsim.train import read_checkpoint
    cfg = dict(backend="cpu", total_frames=2400, checkpoint_every=700, keep_checkpoints=True)
    Trainer(tiny_config(tmp_path, **cfg)).train()
    kept = _kept(tmp_path / "checkpoints")
    assert len(kept) == 4 and max(kept) >= 2400, sorted(kept)
    for frames, path in kept.items():
        assert read_checkpoint(path)["frames"] == frames
    with pytest.raises(FileNotFoundError, match=r"checkpoints holds 4 kept checkpoints \(the latest is frames_"):
        read_checkpoint(tmp_path / "checkpoints" / "checkpoint.pt")  # eval RUN/checkpoints
    assert kept[max(kept)].read_bytes() == (tmp_path / "checkpoint.pt").read_bytes()
    first, second = sorted(kept)[:2]
    weights = {f: read_checkpoint(kept[f])["model"] for f in kept}
    assert any(not torch.equal(weights[first][k], weights[second][k]) for k in weights[first])

    (tmp_path / "checkpoint.pt").write_bytes(kept[first].read_bytes())  # as `cp` would
    import subprocess
    import sys
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that no longer runs
    stale = tmp_path / "checkpoints" / f"frames_000000009999.pt.{gone}.1.tmp"  # a copy a kill cut short
    stale.write_bytes(b"half a checkpoint")
    Trainer(tiny_config(tmp_path, resume=True, **cfg)).train()
    assert not stale.exists()
    aside = list((tmp_path / "checkpoints").glob("replaced-by-a-resume-*"))
    assert len(aside) == 1 and sorted(_kept(aside[0])) == sorted(kept)[1:]
    again = _kept(tmp_path / "checkpoints")
    assert sorted(again) == sorted(kept)
    for frames in sorted(kept)[1:]:
        replayed = read_checkpoint(again[frames])["model"]
        assert all(torch.equal(replayed[k], weights[frames][k]) for k in replayed), frames


def test_a_checkpoint_of_a_replaced_branch_is_not_resumed_into_the_branch_that_replaced_it(tmp_path):
    """Resumed from frame 800 (A's later kept checkpoints set aside), the run went on along
    branch B, here without keeping checkpoints; A's 1600 copied back from the set-aside
    folder and resumed went on silently, B's metrics rows, trajectory rows and kept
    checkpoints of frames 800-1600 taken as A's. Going back to 800 again is a new branch."""
    import shutil

    from hybridsim.train import TIMELINE_FILE, read_checkpoint
    cfg = dict(backend="cpu", checkpoint_every=400, log_trajectories=False, lr_decay=False)
    kept = tmp_path / "checkpoints"
    Trainer(tiny_config(tmp_path, total_frames=1600, keep_checkpoints=True, **cfg)).train()
    assert not (tmp_path / TIMELINE_FILE).exists()  # one branch: nothing to record
    shutil.copy(_kept(kept)[800], tmp_path / "checkpoint.pt")
    Trainer(tiny_config(tmp_path, total_frames=1200, resume=True, **cfg)).train()
    branch_b = read_checkpoint(tmp_path / "checkpoint.pt")["timeline"]
    assert len(branch_b) == 2 and branch_b[1][0] == 800
    assert json.loads((tmp_path / TIMELINE_FILE).read_text())["timeline"] == branch_b
    replaced = next(kept.glob("replaced-by-a-resume-*"))
    shutil.copy(_kept(replaced)[1600], tmp_path / "checkpoint.pt")
    metrics = (tmp_path / "metrics.csv").read_bytes()
    with pytest.raises(ValueError, match=r"from a run that a resume replaced: the run in .* went on along another "
                                         r"branch from frame 800 \(timeline\.json\)"):
        Trainer(tiny_config(tmp_path, total_frames=2400, resume=True, keep_checkpoints=True, **cfg)).train()
    assert (tmp_path / "metrics.csv").read_bytes() == metrics and sorted(_kept(kept)) == [400, 800]
    older = torch.load(_kept(replaced)[1600], weights_only=False)
    del older["timeline"]  # as written before checkpoints had one: its run's one branch
    torch.save(older, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match=r"from a run that a resume replaced: .* from frame 800 "):
        Trainer(tiny_config(tmp_path, total_frames=2400, resume=True, **cfg)).train()
    shutil.copy(_kept(kept)[800], tmp_path / "checkpoint.pt")  # A's 800, where both branches start
    Trainer(tiny_config(tmp_path, total_frames=1200, resume=True, **cfg)).train()
    branch_c = read_checkpoint(tmp_path / "checkpoint.pt")["timeline"]
    assert branch_c[0] == branch_b[0] and branch_c[1][0] == 800 and branch_c[1] != branch_b[1]


def test_a_resume_keeps_its_checkpoint_when_a_kill_cut_its_kept_copy_short(tmp_path, capsys):
    """The half-written copy was removed at the resume and checkpoint.pt (the only whole
    copy of that point) replaced at the next save: the point was gone from the kept ones."""
    cfg = dict(backend="cpu", checkpoint_every=400, keep_checkpoints=True, log_trajectories=False)
    Trainer(tiny_config(tmp_path, total_frames=800, **cfg)).train()
    last = max(_kept(tmp_path / "checkpoints"))
    written = (tmp_path / "checkpoint.pt").read_bytes()
    cut = _kept(tmp_path / "checkpoints")[last]
    cut.unlink()
    cut.with_name(cut.name + ".999999.1.tmp").write_bytes(written[:1000])
    Trainer(tiny_config(tmp_path, total_frames=1200, resume=True, **cfg)).train()
    assert _kept(tmp_path / "checkpoints")[last].read_bytes() == written
    assert "it was not among the kept ones" in capsys.readouterr().err


def test_a_kept_checkpoint_that_cannot_be_written_stops_training_with_checkpoint_pt_written(
        tmp_path, monkeypatch, capsys):
    import errno
    import shutil

    from hybridsim import cli
    from hybridsim.train import read_checkpoint

    def full(source, target, length=0):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shutil, "copyfileobj", full)
    code = cli.main(["train", "--backend", "ale-py", "--num-envs", "4", "--num-threads", "1", "--torch-threads",
                     "1", "--log-every", "0", "--noop-max", "5", "--total-frames", "4000", "--checkpoint-every",
                     "800", "--keep-checkpoints", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == cli.STORAGE_EXIT_CODE, err[-3000:]
    assert "checkpoints/frames_" in err and "a kept checkpoint failed: No space left on device" in err, err[-3000:]
    assert 800 <= read_checkpoint(tmp_path / "checkpoint.pt")["frames"] < 4000
    assert not list((tmp_path / "checkpoints").iterdir())  # no half-written copy


def test_a_fresh_run_refuses_a_run_with_kept_checkpoints_or_a_dangling_checkpoint_pt(tmp_path):
    """Both were moved aside as "a run that wrote no checkpoint, so it cannot be resumed"
    (and the link replaced): a requeue script that resumes only where checkpoint.pt is a
    file restarted such a run from frame 0."""
    from hybridsim.train import _fresh_run_decision
    (tmp_path / "checkpoints").mkdir()
    assert _fresh_run_decision(tmp_path) is None  # an empty folder holds nothing
    (tmp_path / "checkpoints" / "frames_000000000400.pt.123.1.tmp").write_bytes(b"x")  # only a kill's leftover
    decision = _fresh_run_decision(tmp_path)
    assert decision[0] == "moved" and "checkpoints" in decision[1]
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "frames_000000000800.pt").write_bytes(b"x")
    assert _fresh_run_decision(tmp_path) == (
        "refuse", f"{tmp_path} holds a run without its checkpoint.pt but with 1 kept checkpoints in "
                  f"{tmp_path / 'checkpoints'} (the latest is frames_000000000800.pt): copy the one to go on "
                  f"from to {tmp_path / 'checkpoint.pt'} and --resume, or choose another --log-dir")
    (tmp_path / "checkpoint.pt").symlink_to("/scratch/gone/checkpoint.pt")
    decision = _fresh_run_decision(tmp_path)
    assert decision[0] == "refuse" and "checkpoint.pt is a symbolic link to /scratch/gone/checkpoint.pt, " \
                                       "which does not exist" in decision[1]
    assert (tmp_path / "checkpoint.pt").is_symlink() and len(list(tmp_path.glob("previous-run-*"))) == 1


def test_a_kept_checkpoints_path_that_is_a_file_is_refused_at_start(tmp_path):
    (tmp_path / "checkpoints").write_text("notes")
    with pytest.raises(FileExistsError, match="checkpoints is a file, not the folder --keep-checkpoints keeps"):
        Trainer(tiny_config(tmp_path, total_frames=400, keep_checkpoints=True))
    assert (tmp_path / "checkpoints").read_text() == "notes" and sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoints"]


def test_resume_refuses_other_learning_settings_and_keeps_the_run(tmp_path):
    Trainer(tiny_config(tmp_path, total_frames=400)).train()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for change, message in ((dict(game="space_invaders"), "game 'pong' -> 'space_invaders'"),
                            (dict(lr=0.01, gamma=0.9), "lr 0.00065 -> 0.01; gamma 0.99 -> 0.9"),
                            (dict(num_minibatches=4), "num_minibatches 2 -> 4")):
        with pytest.raises(ValueError, match=message):
            Trainer(tiny_config(tmp_path, total_frames=800, resume=True, **change)).train()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    impala = dict(schedule="impala", env_batch_size=2, learner_batch=2, log_trajectories=False)
    Trainer(tiny_config(tmp_path / "impala", total_frames=400, **impala)).train()
    with pytest.raises(ValueError, match="learner_batch 2 -> 1"):
        Trainer(tiny_config(tmp_path / "impala", total_frames=800, resume=True,
                            **dict(impala, learner_batch=1))).train()
    # a checkpoint from before a setting existed ran with its default
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    del state["config"]["use_lstm"]
    torch.save(state, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match="use_lstm False -> True"):
        Trainer(tiny_config(tmp_path, total_frames=800, resume=True, use_lstm=True)).train()


def _record_largest_log_rho(monkeypatch) -> list:
    """A list that gets each update's largest |log rho| (learner against actor logits)."""
    largest = []
    from_logits = train.vtrace.from_logits

    def recording(**kwargs):
        out = from_logits(**kwargs)
        largest.append(float(out.log_rhos.abs().max()))
        return out
    monkeypatch.setattr(train.vtrace, "from_logits", recording)
    return largest


def _per_env(env_ids, values) -> dict:
    out = {}
    for e, v in zip(env_ids, values):
        out.setdefault(int(e), []).append(bool(v))
    return out


@pytest.mark.parametrize("schedule", ["a2c", "impala"])
def test_a_lost_life_ends_the_learners_episode_while_the_game_plays_on(tmp_path, monkeypatch, capsys, schedule):
    """--life-loss-terminal: the learner's episode ends (the dones of its rollouts, and of a
    recurrent core's memory) are the game's ends plus each step whose lives fell below the
    step before's with lives left, worked out here from the trajectory log's own columns;
    the log, the episode returns and the games stay whole."""
    noted = []  # (env ids, the learner's dones) per environment step, in order
    note_step = train.note_step

    def recording(memory, index, actions, rewards, dones):
        noted.append((np.array(index), np.array(dones, bool)))
        note_step(memory, index, actions, rewards, dones)
    monkeypatch.setattr(train, "note_step", recording)
    learned = []  # the dones of each update's rollout
    learn = Trainer.learn

    def learn_recording(self, obs, actions, behavior_logits, rewards, dones, *rest):
        learned.append(np.array(dones))
        return learn(self, obs, actions, behavior_logits, rewards, dones, *rest)
    monkeypatch.setattr(Trainer, "learn", learn_recording)
    largest_log_rho = _record_largest_log_rho(monkeypatch)
    # impala: an LSTM whose weights barely move, so the learner's logits are the actor's
    # exactly when it resets the memory where the actor did (its dones are the actor's)
    impala = dict(use_lstm=True, lr=1e-30) if schedule == "impala" else {}
    trainer = Trainer(tiny_config(tmp_path, game="breakout", life_loss_terminal=True, num_minibatches=1,
                                  total_frames=4000, schedule=schedule, env_batch_size=2, learner_batch=2,
                                  max_episode_frames=1200, **impala))
    summary = trainer.train()
    steps = {k: v.ravel() for k, v in trajlog.read_steps(  # rows of steps in order, a slot per env
        tmp_path / "trajectories.h5", fields=["env_id", "terminated", "truncated", "lives", "episode_id"]).items()}
    steps = {k: v[steps["env_id"] >= 0] for k, v in steps.items()}  # impala: a first observation is no step
    game_ends = _per_env(steps["env_id"], steps["terminated"] | steps["truncated"])
    lives = {e: [int(x) for x in steps["lives"][steps["env_id"] == e]] for e in game_ends}
    expected = {}
    for e, ends in game_ends.items():  # the slow, obvious rule
        expected[e] = []
        for t, end in enumerate(ends):
            lost = t > 0 and 0 < lives[e][t] < lives[e][t - 1]
            expected[e].append(end or lost)
    assert _per_env(np.concatenate([i for i, _ in noted]), np.concatenate([d for _, d in noted])) == expected
    lost_lives = sum(map(sum, expected.values())) - sum(map(sum, game_ends.values()))
    assert lost_lives >= 8 and 0 < sum(map(sum, game_ends.values()))  # lives lost mid-game, and games ended
    assert any(d.any() for d in learned)
    if schedule == "impala":
        assert len(largest_log_rho) == len(learned) >= 10 and max(largest_log_rho) < 1e-5, max(largest_log_rho)
    if schedule == "a2c":  # one update a rollout of all environments, in step order
        assert np.array_equal(np.concatenate(learned).astype(bool),
                              np.stack([d for _, d in noted])[:len(learned) * 5])
    # an episode is a whole game: its id changes only where a game ended
    for e in game_ends:
        ids = steps["episode_id"][steps["env_id"] == e]
        assert np.array_equal(np.flatnonzero(np.diff(ids)), np.flatnonzero(game_ends[e][:-1]))
    assert summary["episodes"] == sum(map(sum, game_ends.values()))
    with pytest.raises(ValueError, match="episodic_life and life_loss_terminal: choose one"):
        Trainer(tiny_config(tmp_path / "both", game="breakout", life_loss_terminal=True, episodic_life=True))
    assert "shows no lives" not in capsys.readouterr().err
    Trainer(tiny_config(tmp_path / "pong", life_loss_terminal=True, total_frames=80, schedule=schedule,
                        log_trajectories=False)).train()
    assert "note: pong shows no lives at its start (ALE reports 0 for a game without them)" in capsys.readouterr().err


def _record_env_steps(env, method: str) -> list:
    """A list that gets each env.step / env.recv's env ids, terminated, truncated, final
    observations (None when no episode ended) and observations."""
    steps, call = [], getattr(env, method)

    def recording(*args):
        out = call(*args)
        info = out[4]
        final = info.get("final_obs")
        steps.append((np.array(info["env_id"]), np.array(out[2]), np.array(out[3]),
                      None if final is None else np.array(final), np.array(out[0])))
        return out
    setattr(env, method, recording)
    return steps


def _value_after_cut(model, obs, actions, rewards, dones, memory, t, b, final) -> float:
    """The slow reference: the network's value of the final observation of trajectory b's
    step t; a recurrent one steps from the trajectory's first memory one observation at a
    time, and through step t as if its episode went on."""
    from hybridsim.models import note_step
    with torch.no_grad():
        final = torch.from_numpy(np.asarray(final)[None])
        if memory is None:
            return model(final)[1].item()
        m = memory[b:b + 1].clone()
        for s in range(t + 1):
            state = model.unroll(torch.as_tensor(np.asarray(obs[s, b:b + 1]))[None], m)[2]
            m[:, :state.shape[1]] = state
            note_step(m, slice(None), actions[s, b:b + 1], rewards[s, b:b + 1], dones[s, b:b + 1] * (s < t))
        return model.unroll(final[None], m)[1].item()


@pytest.mark.parametrize("num_minibatches", [1, 2])
def test_a2c_bootstraps_a_time_limit_cut_from_the_final_observation(tmp_path, monkeypatch, num_minibatches):
    """--bootstrap-truncation, a2c with an LSTM: each minibatch's values at the cuts
    (truncated, not terminated) are the acting network's value of its environments' final
    observations (_value_after_cut); 0 at every other step."""
    learned = []  # (a copy of the network before the update, the update's arguments)
    learn = Trainer.learn

    def learn_recording(self, *args):
        learned.append((copy.deepcopy(self.model), args))
        return learn(self, *args)
    monkeypatch.setattr(Trainer, "learn", learn_recording)
    trainer = Trainer(tiny_config(tmp_path, num_minibatches=num_minibatches, use_lstm=True,
                                  bootstrap_truncation=True, max_episode_frames=200, total_frames=2000,
                                  log_trajectories=False))
    steps = _record_env_steps(trainer.env, "step")
    trainer.train()
    T, cuts = trainer.cfg.num_steps, 0
    for k, (_, (obs, actions, _, rewards, dones, memory, values)) in enumerate(learned):
        rollout, group = divmod(k, num_minibatches)
        acting = learned[rollout * num_minibatches][0]  # the network before the rollout's first update
        envs = np.arange(trainer.cfg.num_envs)[group::num_minibatches]  # the minibatch's columns
        for t in range(T):
            _, terminated, truncated, final, _ = steps[rollout * T + t]
            cut = (truncated & ~terminated)[envs]
            assert np.array_equal(values[t] != 0, cut), (k, t)
            for b in np.flatnonzero(cut):
                want = _value_after_cut(acting, obs, actions, rewards, dones, memory, t, b, final[envs[b]])
                assert values[t, b] == pytest.approx(want, abs=1e-5), (k, t, b)
                cuts += 1
    assert cuts >= 8


@pytest.mark.parametrize("use_lstm", [False, True])
def test_impala_bootstraps_a_time_limit_cut_from_the_final_observation(tmp_path, monkeypatch, use_lstm):
    """--bootstrap-truncation, impala: each trajectory step the time limit cut carries the
    value of that environment's final observation to the learner (_value_after_cut; weights
    that barely move, so the acting network is the network at the end), every other step 0.
    A cut step's final observation is found by the observation its action was taken on."""
    learned = []
    learn = Trainer.learn

    def learn_recording(self, *args):
        learned.append(tuple(x if x is None or torch.is_tensor(x) else np.array(x) for x in args))
        return learn(self, *args)
    monkeypatch.setattr(Trainer, "learn", learn_recording)
    trainer = Trainer(tiny_config(tmp_path, schedule="impala", env_batch_size=2, learner_batch=2, lr=1e-30,
                                  use_lstm=use_lstm, bootstrap_truncation=True, max_episode_frames=200,
                                  total_frames=2400, noop_max=30, log_trajectories=False))
    steps = _record_env_steps(trainer.env, "recv")
    trainer.train()
    finals, last_obs = {}, {}  # the cuts' final observations by the observation before the cut step
    for env_ids, terminated, truncated, final, obs in steps:
        assert not terminated.any()  # pong: every episode end in so short a run is a cut
        for k, e in enumerate(env_ids):
            if truncated[k]:
                finals.setdefault(last_obs[e].tobytes(), []).append(final[k])
            last_obs[e] = obs[k]
    checked = 0
    for obs, actions, _, rewards, dones, memory, values in learned:
        assert np.array_equal(values != 0, dones == 1)
        for t, b in zip(*np.nonzero(values)):
            want = [_value_after_cut(trainer.model, obs, actions, rewards, dones, memory, t, b, final)
                    for final in finals[obs[t, b].tobytes()]]
            assert np.abs(np.array(want) - values[t, b]).min() < 1e-5, (t, b)
            checked += 1
    assert sum(map(len, finals.values())) >= 8 and checked >= 4


@pytest.mark.parametrize("use_lstm", [False, True])
def test_running_normalization_learns_on_the_actors_policy(tmp_path, monkeypatch, use_lstm):
    """With one minibatch every a2c update is on-policy: the learner's logits are the ones
    the actor sampled from (the statistics took the batch before the learner's forward pass,
    and the logits differed by up to 7e-2)."""
    largest_log_rho = _record_largest_log_rho(monkeypatch)
    trainer = Trainer(tiny_config(tmp_path, obs_normalization="running", num_minibatches=1,
                                  use_lstm=use_lstm, total_frames=800, log_trajectories=False))
    trainer.train()
    assert len(largest_log_rho) == trainer.updates >= 10 and max(largest_log_rho) < 1e-6
    assert float(trainer.model.normalize.count) > 1  # the statistics did learn


def test_a_resume_with_other_torch_threads_says_it_will_not_be_exact(tmp_path, capsys):
    """Sums round differently with another thread count (the weights drift by ~1e-8 per
    update): the resume notes it and names the count that would keep it exact."""
    Trainer(tiny_config(tmp_path, total_frames=400, torch_threads=1)).train()
    capsys.readouterr()
    Trainer(tiny_config(tmp_path, total_frames=800, resume=True, torch_threads=2)).train()
    assert "ran with 1 torch threads and now has 2" in capsys.readouterr().err
    Trainer(tiny_config(tmp_path, total_frames=1200, resume=True, torch_threads=2)).train()
    assert "bit for bit" not in capsys.readouterr().err  # the same threads and hardware
    # another CPU (or oneDNN cap) picks other kernels: a Slurm requeue onto another node
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert state["rank_states"][0]["learner_hardware"]["cpu"] == sysinfo.cpu_model()
    state["rank_states"][0]["learner_hardware"].update(cpu="Another CPU", onednn_max_cpu_isa="AVX2")
    torch.save(state, tmp_path / "checkpoint.pt")
    Trainer(tiny_config(tmp_path, total_frames=1600, resume=True, torch_threads=2)).train()
    assert "its learner ran on cpu Another CPU, cpu_capability " in capsys.readouterr().err
    # with impala, another order makes other batches
    impala = dict(schedule="impala", env_batch_size=2, learner_batch=2, torch_threads=1)
    Trainer(tiny_config(tmp_path / "impala", total_frames=400, **impala)).train()
    capsys.readouterr()
    Trainer(tiny_config(tmp_path / "impala", total_frames=800, resume=True, impala_order="completion",
                        **impala)).train()
    err = capsys.readouterr().err
    assert "will not equal an uninterrupted run bit for bit: --impala-order submission -> completion" in err


def test_the_network_starts_the_same_on_any_thread_count():
    """orthogonal_'s QR rounds differently on 2 threads than on 1 (4e-7 here): build_model
    initialises on one thread, so a seed gives one network everywhere."""
    from hybridsim.models import build_model
    threads = torch.get_num_threads()
    weights = []
    try:
        for n in (1, 2, 4):
            torch.set_num_threads(n)
            torch.manual_seed(3)
            weights.append(build_model("nature", (4, 84, 84), 14).state_dict())
            assert torch.get_num_threads() == n  # the caller's count is kept
    finally:
        torch.set_num_threads(threads)
    for other in weights[1:]:
        for name, tensor in weights[0].items():
            assert torch.equal(tensor, other[name]), name


def test_a_cuda_learner_asks_for_deterministic_kernels(monkeypatch):
    """Set without a GPU too: the flags are torch's, read when CUDA kernels are chosen."""
    from hybridsim.train import use_deterministic_cuda
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")  # restored after the test, set or not
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
             torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory)
    try:
        use_deterministic_cuda()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.utils.deterministic.fill_uninitialized_memory  # no memset per allocation
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[:2]
        torch.use_deterministic_algorithms(saved[2], warn_only=saved[3])
        torch.utils.deterministic.fill_uninitialized_memory = saved[4]


def test_bad_checkpoints_are_named(tmp_path):
    from hybridsim import evaluate
    cases = {"empty.pt": b"", "random.pt": bytes(range(256)) * 8}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    torch.save({"a": 1}, tmp_path / "foreign.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    for name, message in (("empty.pt", "not a readable hybridsim checkpoint"),
                          ("random.pt", "not a readable hybridsim checkpoint"),
                          ("foreign.pt", "missing model, optimizer"),
                          ("list.pt", "missing model"), ("missing.pt", "no checkpoint file")):
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            evaluate.evaluate(tmp_path / name, episodes=1, env="ale-py")


class _MakesAFileWhenLoaded:
    """What a hostile checkpoint could carry: unpickling it runs a call (here, touch)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (self.path,)


def test_a_checkpoint_holding_code_is_refused_without_running_it(tmp_path):
    """Checkpoints were loaded with weights_only=False: `eval` of a file from elsewhere ran
    whatever its pickle called."""
    from hybridsim import cli
    from hybridsim.train import read_checkpoint
    marker = tmp_path / "ran"
    hostile = tmp_path / "hostile.pt"
    torch.save({"model": {}, "optimizer": {}, "config": {}, "frames": 0, "payload": _MakesAFileWhenLoaded(marker)},
               hostile)
    with pytest.raises(ValueError, match="holds Python objects no hybridsim checkpoint holds .*refused "
                                         "without running their code"):
        read_checkpoint(hostile)
    assert cli.main(["eval", str(hostile), "--episodes", "1"]) == 2
    assert not marker.exists()
    torch.load(hostile, weights_only=False)  # the file does what this test says it does
    assert marker.exists()


class _CallsOsSystem:
    def __reduce__(self):
        return os.system, ("true",)


def test_unreadable_checkpoints_are_named_with_the_way_back_and_old_path_configs_read(tmp_path):
    """A blocked global (os.system) got torch's advice to load with weights_only=False; an
    empty checkpoint.pt said "EOFError: " and pointed at no kept checkpoint; a directory or a
    dangling link named checkpoint.pt was "no checkpoint file"; a config holding a
    pathlib path (a Python caller's log_dir, before configs were made plain) was refused."""
    from hybridsim.train import read_checkpoint
    Trainer(tiny_config(tmp_path, total_frames=800, keep_checkpoints=True, log_trajectories=False)).train()
    checkpoint = tmp_path / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=False)
    hostile = tmp_path / "hostile.pt"
    torch.save(dict(state, episodes=[_CallsOsSystem()]), hostile)
    with pytest.raises(ValueError, match=r"no hybridsim checkpoint holds \(Unsupported global: posix\.system\); "
                                         r"refused without running their code$"):
        read_checkpoint(hostile)
    old = tmp_path / "old.pt"
    torch.save(dict(state, config=dict(state["config"], log_dir=pathlib.PosixPath(tmp_path))), old)
    assert read_checkpoint(old)["config"]["log_dir"] == str(tmp_path)
    way_back = r"; --keep-checkpoints kept 1 in .*checkpoints \(the latest is frames_\d{12}\.pt\): copy one to "
    checkpoint.write_bytes(b"")  # a copy onto a full disk
    with pytest.raises(ValueError, match=r"not a readable hybridsim checkpoint \(\w+Error: .+\)" + way_back):
        read_checkpoint(checkpoint)
    checkpoint.unlink()
    checkpoint.mkdir()
    with pytest.raises(FileNotFoundError, match=r"checkpoint\.pt: it is a directory, not a checkpoint file" + way_back):
        read_checkpoint(checkpoint)
    checkpoint.rmdir()
    checkpoint.symlink_to(tmp_path / "scratch" / "gone.pt")  # a file system not mounted here
    with pytest.raises(FileNotFoundError, match=r"checkpoint\.pt: it is a symbolic link to .*scratch/gone\.pt, "
                                                r"which does not exist" + way_back):
        read_checkpoint(checkpoint)
    with pytest.raises(FileNotFoundError, match=r"symbolic link to .*scratch/gone\.pt, which does not exist"):
        Trainer(tiny_config(tmp_path, total_frames=1200, keep_checkpoints=True, resume=True)).train()  # "no checkpoint"


def test_a_run_that_cannot_start_leaves_no_directory(tmp_path):
    """A failure after the run directory was made (here: the device, in setup) removes the
    directories this run created, parents included, and nothing else."""
    for name in ("new", "a/b/c"):
        with pytest.raises(ValueError, match="cuda:99"):
            Trainer(tiny_config(tmp_path / name, device="cuda:99"))
        assert not (tmp_path / name.split("/")[0]).exists()
    assert tmp_path.is_dir()
    with pytest.raises(FileNotFoundError, match="not_a_game"):  # refused before any mkdir
        Trainer(tiny_config(tmp_path / "new", game="not_a_game"))
    with pytest.raises(ValueError, match="seed must be in"):
        Trainer(tiny_config(tmp_path / "new", seed=-1))
    assert not (tmp_path / "new").exists()


def test_a_damaged_environment_state_refuses_the_resume_before_any_write(tmp_path):
    """--resume from a checkpoint whose environment state was damaged fails in set_state,
    now before the logs are opened and the disk reserve is taken: no reserve file, and the
    run's files stay as they were."""
    Trainer(tiny_config(tmp_path, backend="cpu", total_frames=800)).train()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    state["frames"], state["rank_states"][0]["traj_rows"] = 400, 400 // 16  # rows after it to keep
    intact = dict(state["rank_states"][0])
    env_state = bytearray(zlib.decompress(intact["env_state"]))
    env_state[-100] ^= 1
    compressed = bytearray(intact["env_state"])
    compressed[len(compressed) // 2] ^= 0xFF
    for damaged, message in (
            (dict(intact, env_state=zlib.compress(bytes(env_state))), "corrupted AtariVectorEnv state"),
            (dict(intact, env_state=bytes(compressed)), "rank 0's environment state is damaged"),
            (dict(intact, env_state_codec="lz9"), "unknown encoding 'lz9'")):
        state["rank_states"][0] = damaged
        torch.save(state, tmp_path / "checkpoint.pt")
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
        with pytest.raises(ValueError, match=message):
            Trainer(tiny_config(tmp_path, backend="cpu", total_frames=1200, resume=True)).train()
        assert not list(tmp_path.glob(".disk_reserve*"))
        after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
        assert after == before
    with pytest.raises(ValueError, match="num_envs 4 -> 2"):
        Trainer(tiny_config(tmp_path, backend="cpu", num_envs=2, total_frames=1200, resume=True)).train()


def test_config_file_integral_floats_are_ints(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("total_frames = 5e7\nnum_envs = 8.0\n")
    cfg = build_config(TrainConfig, build_parser().parse_args(["train", "--config", str(path)]))
    assert (cfg.total_frames, cfg.num_envs) == (50_000_000, 8) and type(cfg.total_frames) is int
    path.write_text("seed = 1e300\n")  # refused as the float it is, not as 300 digits
    with pytest.raises(ValueError, match=r"setting 'seed' must be an int, got 1e\+300$"):
        build_config(TrainConfig, build_parser().parse_args(["train", "--config", str(path)]))


def test_resume_after_kill_9(tmp_path, capsys):
    """A run killed with SIGKILL (an OOM kill, a node's KillWait) after a checkpoint resumes:
    its trajectory file, still marked open for writing, is reopened and continued. Rows are
    flushed rarely here (every 600 s), so only the flush before each checkpoint makes the
    file whole up to the checkpoint: the resumed file has every step, without a hole."""
    import signal
    import subprocess
    import sys
    import time
    args = [sys.executable, "-m", "hybridsim", "train", "--backend", "ale-py", "--num-envs", "4",
            "--num-minibatches", "2", "--total-frames", "100000000", "--log-dir", str(tmp_path),
            "--num-threads", "1", "--torch-threads", "1", "--checkpoint-every", "400",
            "--log-flush-seconds", "600", "--noop-max", "5"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "checkpoint.pt").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with pytest.raises(OSError, match="already open for write"):
        import h5py
        h5py.File(tmp_path / "traj_rank00000.h5", "a", libver="latest")
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["frames"]
    with open(tmp_path / "metrics.csv", "a") as fh:  # as if logged between checkpoint and kill
        fh.write(f"{saved + 48},1,1.0,100,nan,0,0.0007,,,\n{saved + 96},2,1.0,100,nan,0,0.0007,,,\n")
    summary = Trainer(tiny_config(tmp_path, total_frames=saved + 800, resume=True,
                                  checkpoint_every=400, log_flush_seconds=0.5)).train()
    assert summary["frames"] >= saved + 800
    err = capsys.readouterr().err  # (2, or more if the killed job logged a row after its checkpoint)
    assert re.search(r"metrics.csv: dropped \d+ rows written after the checkpoint", err), err
    logged = [int(row["frames"]) for row in csv.DictReader(open(tmp_path / "metrics.csv"))]
    assert logged == sorted(set(logged)) and logged[-1] == summary["frames"], (saved, str(logged))
    raw = (tmp_path / "metrics.csv").read_bytes()  # the kept rows keep csv's line ends
    assert raw.count(b"\n") == raw.count(b"\r\n") == len(logged) + 1
    frames = trajlog.read_steps(tmp_path / "traj_rank00000.h5", fields=["global_frame"])["global_frame"][:, 0]
    per_step = 4 * 4  # 4 environments, frame skip 4
    assert frames[0] == per_step and (np.diff(frames) == per_step).all(), frames
    assert frames[-1] == summary["frames"]
    with trajlog.open_trajectory_file(tmp_path / "traj_rank00000.h5") as f:
        assert trajlog.json_list_attr(f, "gaps") == []
        assert trajlog.json_list_attr(f, "restarts") == [saved]  # ale-py: environments restart


@pytest.mark.parametrize("overrides,message", [
    (dict(log_dir=""), "log_dir must name a directory, got ''"),
    (dict(log_dir="  "), "log_dir must name a directory"),
    (dict(schedule="impala", env_batch_size=5), r"env_batch_size \(5\) must be <= num_envs \(4\)"),
    (dict(log_compression="zstd"), "log_compression must be one of lzf, gzip, none, got 'zstd'"),
    (dict(schedule="impala", impala_order="fifo"), "impala_order must be one of submission, completion, got 'fifo'"),
    (dict(schedule="impala", num_threads=2), r"--backend ale-py returns the environments that finish "
     r"first: with impala_order submission \(the default\) it needs --num-threads 1, got 2; "),
    (dict(schedule="impala", num_threads=0), r"needs --num-threads 1, got 0 \(all cores\); or choose "
     r"--impala-order completion"),
    (dict(torch_threads=99999), r"torch_threads must be <= the \d+ CPUs of this machine"),
])
def test_settings_that_only_failed_later_are_refused_up_front(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(tmp_path, **overrides).validate()


def test_trajectories_in_gzip_for_any_hdf5_reader(tmp_path):
    """lzf, the default, is an h5py filter; h5dump, MATLAB and HDF5.jl read gzip as is."""
    import h5py
    Trainer(tiny_config(tmp_path, total_frames=320, log_compression="gzip")).train()
    with h5py.File(tmp_path / "traj_rank00000.h5", "r") as f:
        assert f.attrs["compression"] == "gzip"
        assert {f["steps"][name].compression for name in f["steps"]} == {"gzip"}
        assert f["episodes/return"].compression == "gzip"


def test_a_log_dir_that_cannot_be_a_directory_is_named(tmp_path):
    (tmp_path / "afile").write_text("")
    for log_dir, why in ((tmp_path / "afile", "it is a file, not a directory"),
                         (tmp_path / "afile" / "sub", r"cannot make it \(Not a directory\)")):
        with pytest.raises(Exception, match=f"{log_dir}: cannot take the run directory: {why}"):
            Trainer(tiny_config(log_dir, total_frames=320))


def test_a_resume_with_fewer_ranks_drops_their_disk_reserves(tmp_path):
    Trainer(tiny_config(tmp_path, total_frames=320)).train()
    (tmp_path / ".disk_reserve_rank00001").write_bytes(b"x" * 1000)  # a 2-rank run's
    Trainer(tiny_config(tmp_path, total_frames=640, resume=True)).train()
    assert not (tmp_path / ".disk_reserve_rank00001").exists()


def test_resume_refuses_another_runs_trajectory_file(tmp_path):
    """A rank file copied in from another run: appending would mix two runs in one log."""
    import shutil
    mine, other = tmp_path / "mine", tmp_path / "other"
    Trainer(tiny_config(mine, total_frames=320)).train()
    Trainer(tiny_config(other, total_frames=320, seed=2)).train()
    shutil.copy(other / "traj_rank00000.h5", mine / "traj_rank00000.h5")
    before = (mine / "traj_rank00000.h5").read_bytes()
    with pytest.raises(trajlog.TrajectoryLogError, match="not the trajectory file this run's checkpoint wrote into"):
        Trainer(tiny_config(mine, total_frames=640, resume=True)).train()
    assert (mine / "traj_rank00000.h5").read_bytes() == before


def test_resume_without_its_trajectory_file_records_the_missing_rows(tmp_path, capsys):
    Trainer(tiny_config(tmp_path, total_frames=320)).train()
    (tmp_path / "traj_rank00000.h5").unlink()
    Trainer(tiny_config(tmp_path, total_frames=640, resume=True)).train()
    assert "traj_rank00000.h5: missing; the 20 step rows the checkpoint counted" in capsys.readouterr().err
    with trajlog.open_trajectory_file(tmp_path / "traj_rank00000.h5") as f:
        assert trajlog.json_list_attr(f, "gaps") == [[0, 320]]
        assert f["steps/global_frame"][0, 0] > 320
    # the new file is this run's: a resume from the old checkpoint (a kill before the next
    # one) takes it, though its file_id is not the checkpoint's
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    old = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    old["frames"], old["rank_states"][0]["traj_file_id"] = 320, "0" * 32
    torch.save(old, tmp_path / "checkpoint.pt")
    Trainer(tiny_config(tmp_path, total_frames=640, resume=True)).train()
    assert state["run_id"] == torch.load(tmp_path / "checkpoint.pt", weights_only=False)["run_id"]


def test_resume_refuses_a_closed_file_whose_datasets_differ_in_length(tmp_path):
    """Damage (a kill inside a flush leaves a flagged file, whose rows the resume cuts)."""
    import h5py
    Trainer(tiny_config(tmp_path, total_frames=640)).train()
    with h5py.File(tmp_path / "traj_rank00000.h5", "a") as f:
        f["steps/action"].resize(10, axis=0)
    before = (tmp_path / "traj_rank00000.h5").read_bytes()
    with pytest.raises(trajlog.TrajectoryLogError, match="traj_rank00000.h5: damaged trajectory file: the "
                                                         "steps datasets differ in length"):
        Trainer(tiny_config(tmp_path, total_frames=960, resume=True)).train()
    assert (tmp_path / "traj_rank00000.h5").read_bytes() == before


def test_numpy_numbers_in_a_checkpoint_config_are_numbers():
    """A run built from Python with seed=np.int64(7) writes it so; its checkpoint loads."""
    from hybridsim.train import _checkpoint_problem
    state = {"config": {"game": "pong", "seed": np.int64(7), "lr": np.float32(1e-3)}, "frames": 0,
             "updates": 0, "model": {}}
    assert _checkpoint_problem(state) is None
    state["config"]["seed"] = "7"
    assert _checkpoint_problem(state) == "config seed is '7', not a number value"


def test_a_config_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(b'game = "pong"\n\xff\xfe\n')
    with pytest.raises(ValueError, match=f"{path}: not a UTF-8 text file"):
        build_config(TrainConfig, build_parser().parse_args(["train", "--config", str(path)]))


def test_resume_without_a_run_leaves_no_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="--resume: no checkpoint at"):
        Trainer(tiny_config(tmp_path / "typo" / "run", resume=True))
    assert not (tmp_path / "typo").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"afile is not a directory\)"):
        Trainer(tiny_config(tmp_path / "afile", resume=True))
    assert (tmp_path / "afile").read_text() == "x"


def test_resume_at_the_budget_does_nothing_and_says_so(tmp_path, capsys):
    """It ran no iteration and then repeated the run's end: a second final metrics row
    and a rewritten checkpoint. A finished run resumed (a resubmitted Slurm array) now
    ends with status 0, writing nothing."""
    from hybridsim import cli
    Trainer(tiny_config(tmp_path, total_frames=400, log_trajectories=False)).train()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for total in ("400", "100"):
        assert cli.main(["train", "--game", "pong", "--backend", "ale-py", "--num-envs", "4",
                         "--num-minibatches", "2", "--num-threads", "1", "--torch-threads", "1",
                         "--noop-max", "5", "--checkpoint-every", "800", "--log-trajectories", "false",
                         "--log-dir", str(tmp_path), "--total-frames", total, "--resume"]) == 0
        assert "the budget (--total-frames" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_resume_with_another_budget_says_what_the_learning_rate_does(tmp_path, capsys):
    """The learning rate decays to 0 at --total-frames: a resume with a larger budget
    raises it again, which was silent."""
    Trainer(tiny_config(tmp_path, total_frames=400, log_trajectories=False)).train()
    frames = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["frames"]
    capsys.readouterr()
    resumed = tiny_config(tmp_path, total_frames=1200, log_trajectories=False, resume=True)
    Trainer(resumed).train()
    expected = (f"note: --total-frames 1,200, the run had 400: the learning rate decays to 0 at the new "
                f"budget, so it goes on at {resumed.lr * (1 - frames / 1200):.3g} instead of 0")
    assert expected in capsys.readouterr().err


def test_resume_at_the_budget_writes_a_master_file_the_last_job_did_not(tmp_path, capsys):
    """A job that stopped between its final checkpoint and the master file (a full disk,
    a kill) left the run at its budget: --resume, the README's way on, wrote nothing and
    the master stayed missing, or stale, and the rank file flagged as open. Now the
    master is written (the flags cleared first), and only then."""
    import os
    import time
    from hybridsim import cli, trajlog
    Trainer(tiny_config(tmp_path, total_frames=400)).train()
    master, rank = tmp_path / "trajectories.h5", tmp_path / "traj_rank00000.h5"
    want = trajlog.read_steps(master)
    args = ["train", "--game", "pong", "--backend", "ale-py", "--num-envs", "4", "--num-minibatches", "2",
            "--num-threads", "1", "--torch-threads", "1", "--noop-max", "5", "--checkpoint-every", "800",
            "--log-dir", str(tmp_path), "--total-frames", "400", "--resume"]

    def resume_and_check(expect):
        assert cli.main(args) == 0
        out = capsys.readouterr().out
        assert "the budget (--total-frames" in out
        assert (expect in out) if expect else ("written now" not in out), out
        got = trajlog.read_steps(master)
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)

    master.unlink()
    resume_and_check("trajectories.h5 was missing")
    later = master.stat().st_mtime + 10
    os.utime(rank, (later, later))
    resume_and_check("was older than the rank files")
    # the superblock's write flags a killed SWMR writer leaves (what h5clear -s clears)
    data = bytearray(rank.read_bytes())
    size = 12 + 4 * data[9]
    data[11] = trajlog.SUPER_WRITE_ACCESS | trajlog.SUPER_SWMR_WRITE_ACCESS
    data[size:size + 4] = trajlog.hdf5_checksum(bytes(data[:size])).to_bytes(4, "little")
    rank.write_bytes(bytes(data))
    old = time.time() - 300
    os.utime(rank, (old, old))
    master.unlink()
    resume_and_check("write flags left by a stopped writer cleared on traj_rank00000.h5")
    assert rank.read_bytes()[11] == 0
    before = master.read_bytes()
    resume_and_check(None)  # complete: nothing written
    assert master.read_bytes() == before
    # rows the checkpoint counted that never reached the file (a full disk at the close):
    # recorded as a gap, then the master
    import h5py
    with h5py.File(rank, "a") as f:
        rows = f["steps"]["action"].shape[0]
        for name in list(f["steps"]):
            f["steps"][name].resize(rows - 2, axis=0)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert state["rank_states"][0]["traj_rows"] == rows
    want = {k: v[:rows - 2] for k, v in want.items()}
    resume_and_check("lost rows recorded in the `gaps` of traj_rank00000.h5")
    with h5py.File(rank, "r", locking=False) as f:
        assert trajlog.json_list_attr(f, "gaps")[-1][1] == 400  # up to the checkpoint's frame
    assert not (tmp_path / "trajectories.h5.tmp").exists()


def test_eval_refuses_a_checkpoint_whose_network_does_not_fit_the_game(tmp_path):
    from hybridsim import evaluate
    from hybridsim.models import build_model
    Trainer(tiny_config(tmp_path, total_frames=400, log_trajectories=False)).train()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    cfg = state["config"]
    state["num_actions"] = 18  # a consistent network for the full action set
    state["model"] = build_model(cfg["model"], state["obs_shape"], 18,
                                 cfg["obs_normalization"]).state_dict()
    state["digest"] = train.checkpoint_digest(state)  # a consistent file, of another network
    torch.save(state, tmp_path / "full.pt")
    with pytest.raises(ValueError, match="picks among 18 actions, but pong on hybridsim gives"):
        evaluate.evaluate(tmp_path / "full.pt", episodes=1, env="hybridsim")


def test_a_refused_resume_writes_nothing(tmp_path, capsys):
    """A resume refused by the trajectory file (another --obs-stride) had already cut the
    rows logged after the checkpoint, recorded a gap and a restart, warned of the gap and
    started a tensorboard event file. Now nothing in the run directory changes."""
    import h5py
    cfg = dict(log_observations=True, obs_stride=100, checkpoint_every=800)
    Trainer(tiny_config(tmp_path, total_frames=2400, **cfg)).train()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    state["frames"] = 1600  # as if killed after the checkpoint at 1600, with rows after it
    state["rank_states"][0]["traj_rows"] = 1600 // 16 + 5  # and some rows lost
    torch.save(state, tmp_path / "checkpoint.pt")
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with h5py.File(tmp_path / "traj_rank00000.h5", "r", locking=False) as f:
        rows = {name: f[name].shape[0] for name in ("steps/action", "episodes/env_id", "observations/index")}
    capsys.readouterr()
    with pytest.raises(trajlog.TrajectoryLogError, match="every 100 steps, this run every 7"):
        Trainer(tiny_config(tmp_path, total_frames=3200, resume=True,
                            **dict(cfg, obs_stride=7))).train()
    assert "warning" not in capsys.readouterr().err
    with h5py.File(tmp_path / "traj_rank00000.h5", "r", locking=False) as f:
        assert {name: f[name].shape[0] for name in rows} == rows
        assert "gaps" not in f.attrs and "restarts" not in f.attrs
    after = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert sorted(after) == sorted(before)
    assert {k: v for k, v in after.items() if k.suffix != ".h5"} == \
        {k: v for k, v in before.items() if k.suffix != ".h5"}


def _train_patched(tmp_path, backend: str, patch: str):
    """`hybridsim train` (a 100,000-frame budget) in a subprocess, with `patch` (code that
    may use os, signal and hybridsim.train as train) run first."""
    import subprocess
    import sys
    script = ("import os, signal, sys\nimport hybridsim.train as train\nfrom hybridsim.cli import main\n"
              + patch + "sys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", script, "train", "--backend", backend, "--num-envs", "2",
                           "--num-minibatches", "1", "--total-frames", "100000", "--log-dir", str(tmp_path),
                           "--num-threads", "1", "--torch-threads", "1", "--noop-max", "5"],
                          capture_output=True, text=True, timeout=300)


STOP_WHILE_BUILT = ("built = train.Trainer.__init__\n"
                    "def slow_start(self, *a, **k):\n"
                    "    built(self, *a, **k)\n"
                    "    os.kill(os.getpid(), signal.SIGUSR1)\n"
                    "train.Trainer.__init__ = slow_start\n")
STOP_AFTER_MPI = ("import hybridsim.cli as cli\n"
                  "build = cli.build_parser\n"
                  "def signalled_first():\n"
                  "    os.kill(os.getpid(), signal.SIGTERM)\n"
                  "    return build()\n"
                  "cli.build_parser = signalled_first\n")


@pytest.mark.parametrize("backend, patch", [("ale-py", STOP_WHILE_BUILT), ("cpu", STOP_AFTER_MPI)],
                         ids=["while-the-trainer-is-built", "before-the-arguments-are-read"])
def test_a_stop_signal_while_starting_stops_at_a_checkpoint(tmp_path, backend, patch):
    """Slurm's SIGUSR1 (or a preemption's SIGTERM) can come while the ranks still start
    (imports, MPI, environments, a GPU compile): the run then stops after its first
    iteration with a checkpoint and exit status 3, which a batch script requeues; the
    signal's default action ended the process (status -10) without either. main() takes
    the stop signals once MPI has started, before it reads the arguments."""
    proc = _train_patched(tmp_path, backend, patch)
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    assert "stopped by a signal" in proc.stdout
    frames = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["frames"]
    assert 0 < frames < 100000


def test_train_called_in_process_leaves_the_callers_signal_handlers():
    """cli.main(["train", ...]) ending early (--help, a bad argument) left its early-stop
    handler installed: the caller's next SIGTERM was swallowed."""
    import signal
    from hybridsim import cli
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    for argv in (["train", "--help"], ["train", "--no-such-option"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        assert {sig: signal.getsignal(sig) for sig in before} == before, argv


def test_ctrl_c_says_how_to_go_on_instead_of_a_traceback(tmp_path):
    import signal
    proc = _train_patched(tmp_path, "cpu", (
        # Ctrl-C at a terminal: a job started in the background (CI's, say) inherits SIGINT
        # ignored, and Python then keeps it ignored
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "step = train.Trainer._a2c_iteration\n"
        "def interrupted(self, *a, **k):\n"
        "    if self.updates == 3:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return step(self, *a, **k)\n"
        "train.Trainer._a2c_iteration = interrupted\n"))
    assert proc.returncode == -signal.SIGINT, (proc.returncode, proc.stderr[-2000:])  # as Python's own end
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert (f"hybridsim train: interrupted (Ctrl-C); the same command with --resume continues from the last "
            f"checkpoint in {tmp_path}, if one was written") in proc.stderr


def test_a_checkpoint_holds_every_episode_finished_before_it(tmp_path):
    """The run's episode list reached rank 0 only with each metrics row (every log_every
    seconds): a checkpoint between two rows lacked the episodes finished since, and a
    resume from it (after a kill) lost them from the run's statistics."""
    cfg = tiny_config(tmp_path, backend="cpu", log_every=1000.0, checkpoint_every=800,
                      total_frames=2400, max_episode_frames=100)
    trainer = Trainer(cfg)
    saved, write = [], trainer.save_checkpoint

    def keep_a_copy(path=None):
        written = write(path)
        saved.append(torch.load(written, weights_only=False))
        return written
    trainer.save_checkpoint = keep_a_copy
    trainer.train()
    episodes = trajlog.read_episodes(trajlog.rank_file(tmp_path, 0))
    first = saved[0]
    assert first["frames"] < cfg.total_frames
    ended = sorted(zip(episodes["env_id"][episodes["end_frame"] <= first["frames"]].tolist(),
                       episodes["episode_id"][episodes["end_frame"] <= first["frames"]].tolist()))
    assert len(ended) >= 4
    assert sorted((e[0], e[1]) for e in first["episodes"]) == ended


def test_train_on_a_busy_machine_waits_passively_and_says_so(tmp_path):
    """Spinning OpenMP workers ran 3-5x slower on a loaded VM (BENCHMARKS.md): with the
    cores already busy and no OMP_WAIT_POLICY chosen, `train` sets PASSIVE before torch
    loads libgomp, and rank 0 prints why. A policy the user set is kept."""
    import subprocess
    import sys
    code = ("import os, sys\n"
            "from hybridsim import cli, sysinfo\n"
            "sysinfo.cpu_busy_fraction = lambda cpus, seconds=0.25: 0.9\n"
            "assert 'torch' not in sys.modules\n"
            "rc = cli.main(sys.argv[1:])\n"
            "print('policy', os.environ.get('OMP_WAIT_POLICY'))\n"
            "raise SystemExit(rc)\n")
    args = ["train", "--game", "pong", "--backend", "cpu", "--num-envs", "2", "--num-minibatches", "1",
            "--total-frames", "200", "--num-threads", "1", "--torch-threads", "1",
            "--log-trajectories", "false"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    busy = subprocess.run([sys.executable, "-c", code, *args, "--log-dir", str(tmp_path / "a")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert busy.returncode == 0, busy.stderr
    assert "policy PASSIVE" in busy.stdout and "are 90% busy with other work" in busy.stderr
    chosen = subprocess.run([sys.executable, "-c", code, *args, "--log-dir", str(tmp_path / "b")],
                            capture_output=True, text=True, env=dict(env, OMP_WAIT_POLICY="ACTIVE"),
                            timeout=300)
    assert chosen.returncode == 0, chosen.stderr
    assert "policy ACTIVE" in chosen.stdout and "busy with other work" not in chosen.stderr


def test_cpu_busy_fraction_sees_a_busy_cpu():
    """/proc/stat over a quarter second: a spinning process pinned to CPU 0 makes it busy."""
    import subprocess
    import sys
    from hybridsim import sysinfo
    if 0 not in os.sched_getaffinity(0):
        pytest.skip("CPU 0 is not ours")
    spinner = subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {0})\n"
                                "print('spinning', flush=True)\nwhile True: pass"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert spinner.stdout.readline() == "spinning\n"
        assert sysinfo.cpu_busy_fraction([0], seconds=0.5) > 0.8
    finally:
        spinner.kill()
        spinner.wait()
    assert sysinfo.cpu_busy_fraction([10**6]) is None  # no such CPU: nothing to tell


def test_a_diverging_run_stops_with_an_error_instead_of_training_on_nan(tmp_path, capsys):
    """lr 1e30 blows the weights up within a few updates: the run stops at the first NaN
    gradient, naming it, without applying that update; the CLI exits with status 2."""
    from hybridsim.cli import main
    from hybridsim.train import TrainingDiverged
    cfg = tiny_config(tmp_path / "api", backend="cpu", lr=1e30, total_frames=4000, log_trajectories=False)
    trainer = Trainer(cfg)
    with pytest.raises(TrainingDiverged, match=r"training diverged at update \d+ .*the gradient norm is nan"):
        trainer.train()
    # the NaN update was not applied (the steps before it, clipped to norm 0.5, stay finite)
    assert trainer.updates >= 1 and all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())
    assert main(["train", "--game", "pong", "--backend", "cpu", "--num-envs", "4", "--num-threads", "1",
                 "--torch-threads", "1", "--lr", "1e30", "--total-frames", "4000", "--log-trajectories",
                 "false", "--log-dir", str(tmp_path / "cli")]) == 2
    assert "training diverged at update" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("small_run")
    Trainer(tiny_config(run, backend="cpu", total_frames=400, log_trajectories=False)).train()
    return run


def _resume_with(small_run, tmp_path, change):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    change(state)
    state.pop("digest")  # as written before checkpoints had one: the fields' own checks answer
    torch.save(state, run / "checkpoint.pt")
    return run


def _set(key, value):
    return lambda state: state.__setitem__(key, value)


@pytest.mark.parametrize("change,message", [
    (lambda s: s.pop("torch_rng"), r"its torch_rng does not load \(KeyError"),
    (lambda s: s.__setitem__("torch_rng", torch.zeros(3, dtype=torch.uint8)), "its torch_rng does not load"),
    (_set("optimizer", {"x": 1}), "its optimizer state does not load"),
    (_set("episodes", 5), r"its episodes does not load \(TypeError"),
    (_set("action_counters", "abc"), "its action_counters does not load"),
    (_set("rank_states", "x"), "its rank_states is not a list of dicts"),
    (lambda s: s["rank_states"][0].__setitem__("episode_tracker", "junk"), "its episode_tracker does not load"),
    (lambda s: s["model"][next(iter(s["model"]))].view(-1).__setitem__(0, float("nan")),
     "its network holds NaN or infinite weights"),
])
def test_a_damaged_checkpoint_field_is_named_on_resume(small_run, tmp_path, change, message):
    run = _resume_with(small_run, tmp_path, change)
    before = (run / "metrics.csv").read_bytes()
    with pytest.raises(ValueError, match=message):
        Trainer(tiny_config(run, backend="cpu", total_frames=800, log_trajectories=False, resume=True)).train()
    assert (run / "metrics.csv").read_bytes() == before


@pytest.mark.parametrize("change,message", [
    (lambda s: s["rank_states"][0].pop("core_memory"), r"its core_memory does not load \(KeyError"),
    (lambda s: s["rank_states"][0].__setitem__("core_memory", np.zeros((3, 515), np.float32)),
     r"its core_memory does not load \(ValueError: shape \(3, 515\), expected \(4, 515\)"),
    (lambda s: s["rank_states"][0]["core_memory"].__setitem__((0, 0), np.nan), "of finite values"),
    (lambda s: s["rank_states"][0]["core_memory"].__setitem__((1, -3), 99.0),
     "its previous actions are not among the 6 actions"),
    (lambda s: s["rank_states"][0]["core_memory"].__setitem__((1, -1), 0.5), "episode-start flags not 0 or 1"),
    (lambda s: None, None),
])
def test_a_recurrent_runs_memory_is_checked_on_resume(tmp_path, change, message):
    """A recurrent run resumes with each environment's memory; a damaged one is named
    before anything is written, and the network setting cannot change on resume."""
    run = tmp_path / "run"
    Trainer(tiny_config(run, backend="cpu", total_frames=400, log_trajectories=False, use_lstm=True)).train()
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["rank_states"][0]["core_memory"].shape == (4, 515)
    change(state)
    if message is not None:
        state.pop("digest")
        torch.save(state, run / "checkpoint.pt")
    before = (run / "metrics.csv").read_bytes()
    if message is None:
        digest = state["digest"]
        state["rank_states"][0]["core_memory"][0, 2] += 1e-3
        assert train.checkpoint_digest(state) != digest  # the memory's bytes are checked too
        with pytest.raises(ValueError, match=r"use_lstm True -> False"):
            Trainer(tiny_config(run, backend="cpu", total_frames=800, log_trajectories=False, resume=True)).train()
        assert Trainer(tiny_config(run, backend="cpu", total_frames=800, log_trajectories=False, resume=True,
                                   use_lstm=True)).train()["frames"] >= 800
        return
    with pytest.raises(ValueError, match=message):
        Trainer(tiny_config(run, backend="cpu", total_frames=800, log_trajectories=False, resume=True,
                            use_lstm=True)).train()
    assert (run / "metrics.csv").read_bytes() == before


@pytest.mark.parametrize("content,message", [
    (b"hello,world\n1,2\n", "its first line is not hybridsim's metrics header"),
    (b"\xe0\xff\x00binary", "not readable as hybridsim's metrics"),
])
def test_a_foreign_metrics_file_is_refused_on_resume_and_kept(small_run, tmp_path, content, message):
    run = _resume_with(small_run, tmp_path, lambda s: None)
    (run / "metrics.csv").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        Trainer(tiny_config(run, backend="cpu", total_frames=800, log_trajectories=False, resume=True)).train()
    assert (run / "metrics.csv").read_bytes() == content


def test_an_empty_metrics_file_gets_a_header_on_resume(small_run, tmp_path):
    run = _resume_with(small_run, tmp_path, lambda s: None)
    (run / "metrics.csv").write_bytes(b"")
    Trainer(tiny_config(run, backend="cpu", total_frames=800, log_trajectories=False, resume=True)).train()
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    assert rows and int(rows[-1]["frames"]) >= 800


def test_no_op_and_episode_limits(tmp_path):
    """noop_max past 30 minutes of frames is refused (a reset would run them all without a
    stop check); max_episode_frames 0 means no limit, as its help says (ALE's vector envs
    would cut every episode after one step)."""
    from hybridsim.train import make_vector_env
    from hybridsim.vector import AtariVectorEnv
    with pytest.raises(ValueError, match=r"noop_max must be <= 108,000 .*got 1000000000"):
        tiny_config(tmp_path, noop_max=10**9).validate()
    with pytest.raises(ValueError, match=r"noop_max must be <= 108,000"):
        AtariVectorEnv("pong", 1, noop_max=10**9)
    env = make_vector_env(tiny_config(tmp_path, backend="cpu", max_episode_frames=0), seed=1)
    env.reset(seed=1)
    for _ in range(5):
        truncated = env.step(np.zeros(4, np.int64))[3]
        assert not truncated.any()


def test_bytes_damaged_inside_a_weight_tensor_are_found(small_run, tmp_path):
    """torch.load does not check a tensor's bytes: one flipped byte in the middle of a
    weight loads as a slightly different network. The digest written with the checkpoint
    finds it, for eval and for a resume; an intact copy still loads."""
    import shutil
    from hybridsim import evaluate
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    weight = max(state["model"].values(), key=lambda t: t.numel())  # the biggest: its bytes are unique
    raw = bytearray((run / "checkpoint.pt").read_bytes())
    at = bytes(raw).find(weight.numpy().tobytes()[:256])
    assert at > 0
    raw[at + 100] ^= 0x40
    (run / "checkpoint.pt").write_bytes(bytes(raw))
    damaged = torch.load(run / "checkpoint.pt", weights_only=False)
    assert not all(torch.equal(v, damaged["model"][k]) for k, v in state["model"].items())
    with pytest.raises(ValueError, match="damaged checkpoint: its network, optimizer state, RNG state, "
                                         "action counters, recurrent memory or lives differ from what was written"):
        evaluate.evaluate(run / "checkpoint.pt", episodes=1, env="hybridsim")
    with pytest.raises(ValueError, match="digest mismatch"):
        Trainer(tiny_config(run, backend="cpu", total_frames=800, log_trajectories=False, resume=True)).train()
    evaluate.evaluate(small_run / "checkpoint.pt", episodes=1, env="hybridsim", max_episode_frames=200)


def test_training_returns_are_also_reported_human_normalized(tmp_path, capsys):
    """Episodes cut at 200 frames finish within a tiny run: TensorBoard gets the mean return
    of the last 100 as a human-normalized score next to the raw one, and the closing report
    gives the last episodes' mean that way too. With --episodic-life an episode is one life,
    not a game, so neither is reported."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from hybridsim import cli
    from hybridsim.scores import human_normalized
    args = ["train", "--game", "pong", "--backend", "cpu", "--num-envs", "2", "--total-frames", "1600",
            "--num-threads", "1", "--torch-threads", "1", "--log-every", "0", "--max-episode-frames", "200",
            "--log-trajectories", "false"]
    assert cli.main([*args, "--log-dir", str(tmp_path / "games")]) == 0
    out = capsys.readouterr().out
    last = float(re.search(r"of the last \d+ (-?[\d.]+)", out).group(1))
    normalized = float(re.search(r"human-normalized score: (-?[\d.]+)%", out).group(1))
    assert normalized == pytest.approx(100 * human_normalized("pong", last), abs=0.06)
    events = EventAccumulator(str(tmp_path / "games" / "tensorboard"))
    events.Reload()
    raw = events.Scalars("charts/mean_return_100")
    scaled = events.Scalars("charts/human_normalized_return_100")
    assert raw and [e.step for e in scaled] == [e.step for e in raw]
    for r, s in zip(raw, scaled):
        assert s.value == pytest.approx(human_normalized("pong", r.value), rel=1e-5)
    assert cli.main([*args, "--log-dir", str(tmp_path / "lives"), "--episodic-life", "true"]) == 0
    assert "human-normalized" not in capsys.readouterr().out
    events = EventAccumulator(str(tmp_path / "lives" / "tensorboard"))
    events.Reload()
    assert events.Scalars("charts/mean_return_100")
    assert "charts/human_normalized_return_100" not in events.Tags()["scalars"]


def test_a_checkpoint_after_a_failed_flush_counts_only_the_rows_written():
    """Rows a failed flush left buffered were counted; HDF5 had grown the datasets for them
    (zeros), and a resume took those zero rows for the run's steps."""
    import types
    from hybridsim.train import Trainer
    traj = types.SimpleNamespace(steps_written=1000, steps_logged=1310, file_id="f", failed=None)
    me = types.SimpleNamespace(traj=traj, frames=41920)
    assert Trainer._trajectory_resume_state(me)["traj_rows"] == 1310  # buffered rows are written at close
    traj.failed = OSError("File too large")
    assert Trainer._trajectory_resume_state(me) == {"traj_rows": 1000, "traj_file_id": "f",
                                                    "traj_logged_until": 41920}


def test_a_config_holding_numpy_scalars_still_loads(tmp_path):
    """A sweep written in Python passes numpy values (np.logspace's float64) into TrainConfig:
    checkpoints written so (before their config was made plain, or by hybridsim before
    weights-only loads) hold numpy scalars, which the weights-only load must accept."""
    import numpy as np

    from hybridsim.train import checkpoint_digest, read_checkpoint
    Trainer(tiny_config(tmp_path, total_frames=400, log_trajectories=False)).train()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    lr = np.logspace(-4, -3, 3)[1]
    state["config"].update(lr=lr, log_trajectories=np.bool_(False), num_envs=np.int64(4))
    state["digest"] = checkpoint_digest(state)
    torch.save(state, tmp_path / "checkpoint.pt")
    assert read_checkpoint(tmp_path / "checkpoint.pt")["config"]["lr"] == lr


def test_an_impala_checkpoint_whose_pickled_trajectories_hold_code_is_refused_on_resume(tmp_path):
    """The impala trajectories in flight are pickled bytes inside the checkpoint: the
    weights-only load does not look into them, so their own unpickler must refuse code."""
    import pickle
    from hybridsim.train import checkpoint_digest, read_checkpoint
    cfg = dict(backend="cpu", schedule="impala", env_batch_size=2, learner_batch=2, total_frames=400,
               log_trajectories=False)
    Trainer(tiny_config(tmp_path, **cfg)).train()
    marker = tmp_path / "ran"
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    for rank_state in state["rank_states"]:
        rank_state["impala_in_flight"]["trajectories"] = zlib.compress(pickle.dumps(
            {"traj": _MakesAFileWhenLoaded(marker), "ready": []}))
    state["digest"] = checkpoint_digest(state)
    torch.save(state, tmp_path / "checkpoint.pt")
    read_checkpoint(tmp_path / "checkpoint.pt")  # the outer load sees only bytes
    with pytest.raises(ValueError, match="impala state is damaged .*Unsupported global"):
        Trainer(tiny_config(tmp_path, resume=True, **dict(cfg, total_frames=800))).train()
    assert not marker.exists()


def test_a_fresh_run_leaves_another_tools_checkpoints_folder_alone(tmp_path):
    from hybridsim.train import _fresh_run_decision
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "resnet50.pth").write_bytes(b"x")
    assert _fresh_run_decision(tmp_path) is None
    assert (tmp_path / "checkpoints" / "resnet50.pth").exists()


def test_a_damaged_or_missing_checkpoint_pt_points_at_the_kept_ones(tmp_path):
    from hybridsim.train import read_checkpoint
    Trainer(tiny_config(tmp_path, total_frames=800, keep_checkpoints=True, log_trajectories=False)).train()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    name = next(k for k, t in state["model"].items() if t.is_floating_point())
    state["model"][name].view(-1)[0] += 1.0  # bytes that changed after the digest
    torch.save(state, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match=r"digest mismatch.*; --keep-checkpoints kept 1 in .*checkpoints \(the "
                                         r"latest is frames_\d{12}\.pt\): copy one to"):
        read_checkpoint(tmp_path / "checkpoint.pt")
    kept = next((tmp_path / "checkpoints").glob("frames_*.pt"))
    torch.save(state, kept)  # a damaged kept one is not "the one checkpoint train keeps"
    with pytest.raises(ValueError, match=r"digest mismatch.*; that point of the run is lost: the other kept"):
        read_checkpoint(kept)
    (tmp_path / "checkpoint.pt").unlink()  # a missing one: --resume said only "no checkpoint"
    with pytest.raises(FileNotFoundError, match=r"--resume: no checkpoint at .*; --keep-checkpoints kept 1 in "
                                                r".*checkpoints \(the latest is frames_\d{12}\.pt\): copy one to "
                                                r".*checkpoint\.pt to --resume from it"):
        Trainer(tiny_config(tmp_path, total_frames=800, keep_checkpoints=True, log_trajectories=False,
                            resume=True)).train()


def test_a_python_callers_paths_and_numpy_values_make_a_readable_checkpoint(tmp_path):
    import numpy as np

    from hybridsim.train import read_checkpoint
    Trainer(tiny_config(tmp_path, log_dir=tmp_path, total_frames=400, lr=np.float32(3e-4),
                        log_trajectories=False)).train()
    config = read_checkpoint(tmp_path / "checkpoint.pt")["config"]
    assert config["log_dir"] == str(tmp_path) and type(config["lr"]) is float
