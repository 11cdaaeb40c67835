"""`hybridsim eval`: the protocol it plays under, the same returns on hybridsim and ale-py,
and results it refuses to give."""
import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("ale_py")

from hybridsim import evaluate  # noqa: E402
from hybridsim.train import TrainConfig, Trainer  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    Trainer(TrainConfig(game="pong", backend="cpu", num_envs=2, num_minibatches=1, total_frames=800,
                        log_dir=str(run), num_threads=1, torch_threads=1, log_every=1000.0,
                        log_trajectories=False, noop_max=30)).train()
    return run


def test_the_same_episodes_on_hybridsim_and_ale_py_under_the_settings_asked_for(run_dir):
    kw = dict(episodes=3, num_envs=2, seed=7, repeat_action_probability=0.25, noop_max=5,
              max_episode_frames=1200)
    ours = evaluate.evaluate(run_dir / "checkpoint.pt", env="hybridsim", **kw)
    theirs = evaluate.evaluate(run_dir, env="ale-py", **kw)  # a run directory names its checkpoint
    assert ours["episodes"] == 3 and ours["returns"] == theirs["returns"]
    assert ours == evaluate.evaluate(run_dir, env="hybridsim", **kw)  # same seed, same numbers
    assert ours["settings"] == {"repeat_action_probability": 0.25, "noop_max": 5, "max_episode_frames": 1200,
                                "frame_skip": 4, "episodic_life": False, "actions": "sampled", "seed": 7}
    default = evaluate.evaluate(run_dir, episodes=1, num_envs=1, greedy=True, max_episode_frames=400)
    assert default["settings"]["repeat_action_probability"] == 0.0  # the checkpoint's
    assert default["settings"]["noop_max"] == 30 and default["settings"]["actions"] == "greedy"


def test_a_recurrent_policy_plays_the_same_episodes_on_both_engines(tmp_path, monkeypatch):
    """An LSTM policy keeps a memory per environment, reset at each episode's start: the
    memory it acts from is the one the model's own step-by-step path gives (checked in
    test_models), so both engines see the same actions."""
    from hybridsim import models
    run = tmp_path / "lstm"
    Trainer(TrainConfig(game="pong", backend="cpu", num_envs=2, total_frames=400, log_dir=str(run),
                        num_threads=1, torch_threads=1, log_every=1000.0, log_trajectories=False,
                        use_lstm=True)).train()
    firsts = []
    note_step = models.note_step
    monkeypatch.setattr(evaluate, "note_step", lambda memory, index, actions, rewards, dones: (
        firsts.append(np.asarray(dones).copy()), note_step(memory, index, actions, rewards, dones)))
    kw = dict(episodes=2, num_envs=2, seed=3, max_episode_frames=400)
    ours = evaluate.evaluate(run, env="hybridsim", **kw)
    assert ours["returns"] == evaluate.evaluate(run, env="ale-py", **kw)["returns"]
    assert sum(d.sum() for d in firsts) >= 2  # episodes ended, and the memory was told


def test_a_recurrent_policy_trained_on_lost_lives_starts_its_memory_at_each_one(tmp_path, monkeypatch):
    """Trained with --life-loss-terminal, an LSTM policy's memory started afresh at each lost
    life; eval does the same (the policy never saw a memory carried across lives), while
    its episodes and returns stay whole games."""
    from hybridsim import models, train_config
    run = tmp_path / "lstm"
    Trainer(TrainConfig(game="breakout", backend="cpu", num_envs=2, total_frames=400, log_dir=str(run),
                        num_threads=1, torch_threads=1, log_every=1000.0, log_trajectories=False,
                        use_lstm=True, life_loss_terminal=True)).train()
    starts, seen = [], []
    note_step = models.note_step
    monkeypatch.setattr(evaluate, "note_step", lambda memory, index, actions, rewards, dones: (
        starts.append(np.asarray(dones).copy()), note_step(memory, index, actions, rewards, dones)))
    make = train_config.make_vector_env

    def recording_env(*args, **kwargs):  # each step's lives and episode ends, as the env gave them
        vec = make(*args, **kwargs)
        reset, step = vec.reset, vec.step

        def recorded_reset(**kw):
            obs, info = reset(**kw)
            seen.append((np.asarray(info["lives"]).copy(), np.zeros(len(obs), bool)))
            return obs, info

        def recorded_step(actions):
            out = step(actions)
            seen.append((np.asarray(out[4]["lives"]).copy(), np.logical_or(out[2], out[3])))
            return out
        vec.reset, vec.step = recorded_reset, recorded_step
        return vec
    monkeypatch.setattr(evaluate, "make_vector_env", recording_env)
    result = evaluate.evaluate(run, env="ale-py", episodes=2, num_envs=2, seed=3)
    expected = [ends | ((lives < before) & (lives > 0)) for (before, _), (lives, ends) in zip(seen, seen[1:])]
    assert len(starts) == len(expected) and all(np.array_equal(a, b) for a, b in zip(starts, expected))
    lost = sum(int(e.sum()) for e in expected) - sum(int(ends.sum()) for _, ends in seen)
    assert lost >= 4 and result["episodes"] == 2  # lives lost mid-game; whole games scored


def test_too_few_finished_episodes_are_an_error_not_a_score(run_dir):
    """A partial result favours the episodes that end soonest."""
    with pytest.raises(evaluate.IncompleteEvaluation, match=r"only 0 of 2 episodes ended within 50 steps"):
        evaluate.evaluate(run_dir, episodes=2, num_envs=1, max_steps=50)


@pytest.mark.parametrize("kw, message", [
    (dict(seed=-1), r"seed must be in \[0, 2\*\*31 - num_envs\]"),
    (dict(seed=2**31 - 1), "seed must be in"),
    (dict(repeat_action_probability=1.5), r"repeat_action_probability must be in \[0, 1\]"),
    (dict(noop_max=-2), "noop_max must be >= 0"),
    (dict(max_episode_frames=-1), r"max_episode_frames must be in 0..2147483647 \(0: no limit\)"),
    (dict(max_episode_frames=2**40), "max_episode_frames must be in 0..2147483647"),  # was named max_num_frames_per_episode
    (dict(num_envs=0), "num_envs must be >= 1"),
])
def test_bad_settings_are_named(run_dir, kw, message):
    with pytest.raises(ValueError, match=message):
        evaluate.evaluate(run_dir, episodes=2, **{"num_envs": 2, **kw})


def test_the_command_names_its_settings_and_prints_json(run_dir):
    args = [sys.executable, "-m", "hybridsim", "eval", str(run_dir), "--episodes", "2", "--num-envs", "2",
            "--sticky", "0.25", "--max-episode-frames", "800"]
    text = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert "settings: sticky actions 0.25, up to 30 no-ops at reset, episodes cut at 800 frames, frame " \
           "skip 4, episodic life off, sampled actions, seed 12345" in text.stdout
    as_json = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=300)
    result = json.loads(as_json.stdout)
    assert len(result["returns"]) == 2 and result["settings"]["max_episode_frames"] == 800
    assert f"return {result['mean']:.2f}" in text.stdout
    # pong's Atari-57 references: random -20.7, human 14.6
    assert result["human_normalized"] == pytest.approx((result["mean"] + 20.7) / 35.3, rel=1e-12)
    assert result["reference_protocol"] is False  # sticky actions, 800-frame episodes
    assert f"human-normalized: {result['human_normalized']:.1%} (0% is a random agent's -20.7, 100% a " \
           f"human tester's 14.6: the Atari-57 reference scores; measured with up to 30 no-ops" in text.stdout


def test_several_checkpoints_give_a_row_each_on_the_same_episodes(run_dir, tmp_path, capsys):
    """The kept checkpoints of a run, scored in one command: each row is what eval of that
    checkpoint alone gives; a damaged one anywhere in the list stops the command before
    any is played."""
    from hybridsim import cli
    later = tmp_path / "later"
    Trainer(TrainConfig(game="pong", backend="cpu", num_envs=2, num_minibatches=1, total_frames=1600,
                        log_dir=str(later), num_threads=1, torch_threads=1, log_every=1000.0,
                        log_trajectories=False, noop_max=30)).train()
    paths = [str(run_dir / "checkpoint.pt"), str(later)]
    kw = ["--episodes", "2", "--num-envs", "2", "--max-episode-frames", "600", "--seed", "5"]
    capsys.readouterr()  # training's lines
    assert cli.main(["eval", *paths, *kw, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    alone = [evaluate.evaluate(p, episodes=2, num_envs=2, max_episode_frames=600, seed=5) for p in paths]
    assert [r["checkpoint"] for r in rows] == paths
    assert [{k: v for k, v in r.items() if k != "checkpoint"} for r in rows] == alone
    assert [r["frames_trained"] for r in rows] == [800, 1600]
    assert cli.main(["eval", *paths, *kw]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["game", "frames", "episodes", "return", "std", "human-norm.", "checkpoint"]
    assert table[1].split()[:5] == ["pong", "800", "2", f"{alone[0]['mean']:.2f}", f"{alone[0]['std']:.2f}"]
    assert table[2].split()[:2] == ["pong", "1,600"] and table[2].endswith(str(later))
    assert table[3].startswith("pong on hybridsim; settings: sticky actions 0, up to 30 no-ops")
    mismatched = tmp_path / "mismatched.pt"  # reads, but its network does not fit its game: fails in play
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    torch.save(dict(state, config=dict(state["config"], game="breakout")), mismatched)
    assert cli.main(["eval", *paths, str(mismatched), *kw, "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out) == rows and "picks among 6 actions, but breakout" in captured.err
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"not a checkpoint")
    assert cli.main(["eval", *paths, str(damaged), *kw]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"{damaged}: not a readable hybridsim checkpoint" in captured.err


def _forged(run_dir, tmp_path, name, change):
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    change(state)
    state.pop("digest", None)  # as written before checkpoints had one: the fields' own checks answer
    path = tmp_path / f"{name}.pt"
    torch.save(state, path)
    return path


@pytest.mark.parametrize("name, change, message", [
    ("no_game", lambda s: s["config"].pop("game"), "its config names no game"),
    ("skip_text", lambda s: s["config"].update(frame_skip="four"), "config frame_skip is 'four', not a number value"),
    ("frames_text", lambda s: s.update(frames="x"), "frames is 'x', not a count"),
    ("no_network", lambda s: s.update(model=None), "its network is a NoneType, not a state dict"),
    ("nan_weights", lambda s: [t.fill_(float("nan")) for t in s["model"].values() if t.is_floating_point()],
     "its network holds NaN or infinite weights"),
])
def test_a_damaged_checkpoint_is_named_with_what_is_wrong(run_dir, tmp_path, name, change, message):
    """These scored pong silently (no game) or failed with a bare TypeError, a torch
    state-dict or a sampling error that named neither the checkpoint nor the problem."""
    path = _forged(run_dir, tmp_path, name, change)
    with pytest.raises(ValueError, match=f"{path}: .*{message}"):
        evaluate.evaluate(path, episodes=1, num_envs=1)


@pytest.mark.parametrize("args, flag", [
    (["eval", ""], "checkpoint"),
    (["analyze", ""], "target"),
    (["analyze", ".", "--out", ""], "--out"),
    (["replay", "", "--episode", "0"], "file"),
    (["replay", "x.h5", "--episode", "0", "--gif", ""], "--gif"),
    (["replay", "x.h5", "--episode", "0", "--png-dir", ""], "--png-dir"),
    (["replay", "x.h5", "--episode", "0", "--gif", "  "], "--gif"),
    (["launchers", " "], "dest"),
    (["bench", "--vector", "--envpool-python", ""], "--envpool-python"),
])
def test_an_empty_path_on_the_command_line_is_refused(capsys, args, flag):
    """eval '' looked for checkpoint.pt here, analyze '' analysed the current directory and
    --gif '' wrote nothing, each without a word."""
    from hybridsim import cli
    assert cli.main(args) == 2
    assert f"{flag}: an empty path" in capsys.readouterr().err


def test_refused_commands_name_the_problem_and_leave_no_new_folders(tmp_path):
    """analyze made its output folder (also /analysis-x for a missing /x), replay its
    --png-dir and train its --fallback-dir before refusing the input or settings; train
    --config '' trained on the defaults; bench numpy's "Maximum allowed dimension exceeded"."""
    (tmp_path / "c1.toml").write_text("")
    cases = [
        (["analyze", "c1.toml"], "c1.toml: truncated file"),
        (["analyze", "c1.toml", "--out", "out/deep"], "c1.toml: truncated file"),
        (["replay", "c1.toml", "--episode", "0", "--png-dir", "png/a"], "c1.toml: truncated file"),
        (["train", "--config", "", "--log-dir", "run"], "--config: an empty path"),
        (["bench", "--vector", "--num-envs", str(3 * 10**9), "--games", "pong"], "--num-envs must be < 1,048,576"),
        (["bench", "--vector", "--steps", str(10**30), "--games", "pong"], "--steps must be <"),
    ]
    if not torch.cuda.is_available():
        cases.append((["train", "--fallback-dir", "fallback/sub", "--device", "cuda", "--total-frames", "80",
                       "--log-dir", "run"], "device 'cuda'"))
    for args, message in cases:
        done = subprocess.run([sys.executable, "-m", "hybridsim", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["c1.toml"], args


def test_a_folder_of_kept_checkpoints_gives_the_table_in_the_order_of_their_frames(run_dir, tmp_path, capsys):
    """eval RUN/checkpoints scores what --keep-checkpoints kept; a shell glob matching one
    file gave the one-checkpoint format, and a folder was refused."""
    import shutil

    from hybridsim import cli
    kept = tmp_path / "checkpoints"
    kept.mkdir()
    shutil.copy(run_dir / "checkpoint.pt", kept / "frames_000000000800.pt")
    (kept / "notes.txt").write_text("not a checkpoint")
    kw = ["--episodes", "1", "--num-envs", "1", "--max-episode-frames", "400", "--seed", "5"]
    capsys.readouterr()
    assert cli.main(["eval", str(kept), *kw, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and [r["checkpoint"] for r in rows] == [str(kept / "frames_000000000800.pt")]
    shutil.copy(run_dir / "checkpoint.pt", kept / "frames_90.pt")  # fewer frames, though after it by name
    assert cli.main(["eval", str(kept), *kw]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.rsplit("/", 1)[-1] for line in table[1:3]] == ["frames_90.pt", "frames_000000000800.pt"]
    (tmp_path / "empty").mkdir()
    assert cli.main(["eval", str(tmp_path / "empty"), *kw]) == 2  # neither a checkpoint nor kept ones
    assert f"no checkpoint file at {tmp_path / 'empty' / 'checkpoint.pt'}" in capsys.readouterr().err


def test_several_checkpoints_refuse_a_diverged_one_before_any_is_played(run_dir, tmp_path, capsys, monkeypatch):
    """A network with NaN weights (which evaluate refuses) is found with the reading of
    every checkpoint, not after the ones before it were played (--json lost their rows)."""
    from hybridsim import cli
    from hybridsim.train import checkpoint_digest
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    name = next(k for k, t in state["model"].items() if t.is_floating_point())
    state["model"][name].view(-1)[0] = float("nan")
    state["digest"] = checkpoint_digest(state)
    diverged = tmp_path / "diverged.pt"
    torch.save(state, diverged)
    played = []
    real = evaluate.evaluate
    monkeypatch.setattr(evaluate, "evaluate", lambda path, **kw: played.append(path) or real(path, **kw))
    capsys.readouterr()
    assert cli.main(["eval", str(run_dir), str(diverged), "--episodes", "1", "--num-envs", "1",
                     "--max-episode-frames", "600", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "NaN or infinite weights" in captured.err
    assert played == []
