"""`hybridsim replay` reproduces logged episodes, and notices a tampered log."""
import errno
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

pytest.importorskip("ale_py")
from hybridsim import HybridsimWarning, export, replay, trajlog  # noqa: E402
from hybridsim.train import TrainConfig, Trainer  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(scope="module")
def short_episode_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    cfg = TrainConfig(game="breakout", backend="ale-py", num_envs=2, num_minibatches=1,
                      total_frames=3200, log_dir=str(run), num_threads=1, torch_threads=1,
                      log_every=1000.0, max_episode_frames=600, noop_max=10,
                      repeat_action_probability=0.25, log_observations=True, obs_stride=7)
    Trainer(cfg).train()
    return run


def test_replay_reproduces_every_logged_episode(short_episode_run, tmp_path):
    path = trajlog.rank_file(short_episode_run, 0)
    episodes = trajlog.read_episodes(path)
    assert episodes["env_id"].size >= 4
    for k in (0, episodes["env_id"].size - 1):
        result = replay.replay(path, k)
        assert result.reproduced, result.mismatches
        assert result.episode_return == episodes["return"][k]
    gif = tmp_path / "ep.gif"
    out = subprocess.run([sys.executable, "-m", "hybridsim", "replay", str(path), "--episode", "1",
                          "--gif", str(gif)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "reproduced" in out.stdout and gif.stat().st_size > 0


def test_the_documented_recipe_replays_a_log_with_ale_py_alone(short_episode_run):
    """docs/HDF5_LAYOUT.md's recipe for replaying without hybridsim, followed with h5py and
    ale-py only: every logged reward, episode end and life count comes back."""
    import ale_py
    with h5py.File(trajlog.rank_file(short_episode_run, 0), "r", locking=False) as f:
        config = json.loads(f.attrs["config"])
        env_seed = int(f.attrs["env_seed"])
        logged = {k: f["steps"][k][()] for k in ("action", "reward_raw", "terminated", "truncated", "lives")}
        assert "restarts" not in f.attrs
    rows, width = logged["action"].shape
    env = ale_py.AtariVectorEnv(config["game"], num_envs=width, frameskip=config["frame_skip"],
                                repeat_action_probability=config["repeat_action_probability"],
                                noop_max=config["noop_max"], episodic_life=config["episodic_life"],
                                reward_clipping=False, autoreset_mode="SameStep",
                                max_num_frames_per_episode=config["max_episode_frames"] or 2**31 - 1)
    env.reset(seed=env_seed)
    for t in range(rows):
        _, reward, terminated, truncated, info = env.step(logged["action"][t].astype(np.int64))
        for name, value in (("reward_raw", reward), ("terminated", terminated),
                            ("truncated", truncated), ("lives", info["lives"])):
            np.testing.assert_array_equal(value, logged[name][t], err_msg=f"{name}, row {t}")
    env.close()
    assert logged["truncated"].any() and logged["reward_raw"].any()


def test_tampered_log_is_caught(short_episode_run, tmp_path):
    src = trajlog.rank_file(short_episode_run, 0)
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    env = int(trajlog.read_episodes(copy)["env_id"][0])
    with h5py.File(copy, "r+") as f:
        rows, cols = np.nonzero(f["steps/env_id"][()] == env)
        rewards = f["steps/reward_raw"]
        rewards[rows[5], cols[5]] = rewards[rows[5], cols[5]] + 7.0
    result = replay.replay(copy, 0)
    assert not result.reproduced
    assert "reward" in result.mismatches[0]
    copy.write_bytes(src.read_bytes())
    with h5py.File(copy, "r+") as f:  # a life that was never lost
        f["steps/lives"][rows[5], cols[5]] = f["steps/lives"][rows[5], cols[5]] - 1
    result = replay.replay(copy, 0)
    assert not result.reproduced
    assert result.mismatches[0].startswith(f"step {rows[5]}: lives ") and "logged" in result.mismatches[0]


def test_a_damaged_env_id_or_global_frame_is_named_not_replayed_as_a_mismatch(
        short_episode_run, impala_run, tmp_path):
    """Replay follows one environment by env_id and orders its steps by row: a changed
    env_id (a2c: a row that differs; impala: an environment twice in a row) or a frame
    count going back is named as damage, as export names it."""
    cases = [(trajlog.rank_file(short_episode_run, 0), lambda f: f["steps/env_id"].__setitem__((7, 1), 0),
              r"steps/env_id row 7 \(\[0, 0.*schedule \(a2c\) steps every"),
             (trajlog.rank_file(short_episode_run, 0), lambda f: f["steps/global_frame"].__setitem__((9, 0), 4),
              r"env 0's steps/global_frame goes from 72 \(row 8\) to 4 \(row 9\)"),
             (trajlog.rank_file(impala_run[0], 0), lambda f: f["steps/env_id"].__setitem__((5, 1), f["steps/env_id"][5, 0]),
              r"steps/env_id row 5 holds env \d twice")]
    for k, (src, damage, message) in enumerate(cases):
        copy = tmp_path / str(k) / src.name
        copy.parent.mkdir()
        copy.write_bytes(src.read_bytes())
        with h5py.File(copy, "r+") as f:
            damage(f)
            env = int(f["steps/env_id"][5, 0])
            episode = int(np.nonzero(f["episodes/env_id"][()] == (0 if k < 2 else env))[0][-1])
        with pytest.raises(trajlog.TrajectoryLogError, match=f"{copy}: damaged trajectory file: {message}"):
            replay.replay(copy, episode)


def test_transitions_are_what_the_agent_saw_and_did(short_episode_run, tmp_path):
    """keep_transitions: one entry per step of the episode. Checked against the log (its
    actions, rewards, flags, behavior logits, and every logged observation, which is what
    the step before returned) and against ale-py replaying the same actions (the run used
    ale-py; hybridsim's engine replays it here)."""
    path = trajlog.rank_file(short_episode_run, 0)
    with h5py.File(path, "r") as f:
        steps = {k: f["steps"][k][()] for k in ("env_id", "episode_id", "action", "reward_raw",
                                                "terminated", "truncated", "lives", "behavior_logits")}
        logged = dict(zip((int(r) for r, e, _ in f["observations/index"][()] if e == 0),
                          f["observations/frames"][()]))
    episodes = trajlog.read_episodes(path)
    episode = int(np.nonzero(episodes["env_id"] == 0)[0][0])
    ours = replay.replay(path, episode, env="hybridsim", keep_transitions=True)
    theirs = replay.replay(path, episode, env="ale-py", keep_transitions=True, keep_frames=False,
                           scratch_dir=tmp_path)
    assert ours.reproduced and theirs.reproduced and ours.backend == "cpu"
    assert len(ours.frames) == ours.steps and theirs.frames == []
    t = ours.transitions
    # with scratch_dir file-backed, by a file already unlinked (nothing left behind there)
    assert isinstance(theirs.transitions["observations"], np.memmap) and not any(tmp_path.iterdir())
    assert not isinstance(t["observations"], np.memmap)
    rows = np.nonzero((steps["env_id"] == 0) & (steps["episode_id"] == ours.episode_id))[0]
    cols = np.nonzero(steps["env_id"][rows] == 0)[1]
    assert t["observations"].shape == (ours.steps, 4, 84, 84) == (rows.size, 4, 84, 84)
    for name, field in (("actions", "action"), ("rewards", "reward_raw"), ("terminated", "terminated"),
                        ("truncated", "truncated"), ("lives", "lives"), ("behavior_logits", "behavior_logits")):
        assert np.array_equal(t[name], steps[field][rows, cols]), name
    assert t["terminated"][-1] or t["truncated"][-1]
    assert not (t["terminated"][:-1] | t["truncated"][:-1]).any()
    compared = [k for k in range(1, rows.size) if int(rows[k - 1]) in logged]
    assert len(compared) >= 5
    for k in compared:
        assert np.array_equal(t["observations"][k], logged[int(rows[k - 1])]), k
    assert t["final_observation"].shape == (4, 84, 84)
    # the stack after the last step: the last one's three newest frames and the final screen
    # (the next episode's first observation would not hold them)
    assert np.array_equal(t["final_observation"][:3], t["observations"][-1][1:])
    assert not np.array_equal(t["final_observation"], t["observations"][-1])
    assert set(t) == set(theirs.transitions)
    for name in t:
        assert np.array_equal(t[name], theirs.transitions[name]), name


def test_npz_holds_the_transitions(short_episode_run, tmp_path):
    path = trajlog.rank_file(short_episode_run, 0)
    npz = tmp_path / "episode.npz"
    out = subprocess.run([sys.executable, "-m", "hybridsim", "replay", str(path), "--episode", "0",
                          "--npz", str(npz)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"wrote {npz}" in out.stdout
    expected = replay.replay(path, 0, keep_transitions=True)
    with np.load(npz) as data:
        for name, value in expected.transitions.items():
            assert np.array_equal(data[name], value), name
        assert str(data["game"]) == "breakout" and int(data["env_id"]) == expected.env_id
        assert float(data["episode_return"]) == expected.episode_return
        assert str(data["source"]) == str(path)
    tampered = tmp_path / path.name
    tampered.write_bytes(path.read_bytes())
    with h5py.File(tampered, "r+") as f:
        f["steps/reward_raw"][0, :] += 7.0
    result = replay.replay(tampered, 0, keep_transitions=True)
    assert not result.reproduced and result.transitions is None
    with pytest.raises(ValueError, match="only an episode the replay reproduced"):
        replay.save_transitions(result, tmp_path / "bad.npz", tampered)
    same = tmp_path / "both.npz"
    with pytest.raises(ValueError, match="--gif and --npz name the same file"):
        replay.check_outputs(gif=str(same), npz=str(same))


@pytest.mark.skipif(not os.access("/proc", os.W_OK), reason="/proc is not writable-looking for this "
                    "user: the W_OK check answers first")
def test_an_output_directory_that_refuses_new_files_is_named():
    """/proc passes the W_OK check as root but refuses new files: the option and directory
    are named before any replay or export starts, not a raw errno on a temporary name."""
    with pytest.raises(OSError, match=r"^--npz /proc/episode.npz: cannot make a file in /proc \("):
        replay.check_outputs(npz="/proc/episode.npz")
    with pytest.raises(OSError, match=r"^output /proc/out.h5: cannot make a file in /proc \("):
        export.check_output("/proc/out.h5")
    with pytest.raises(OSError, match=r"^--png-dir /proc: cannot make a file in it \("):
        replay.check_outputs(png_dir="/proc")


def test_npz_on_a_full_disk_is_an_error_not_a_crash(short_episode_run, small_fs):
    """The episode's observations wait in a temporary file beside the output: on a file
    system without room for them the replay says so (a mapped sparse file faulted with
    SIGBUS here) and leaves nothing behind."""
    full = small_fs("1m")  # an episode of this run is over 1 MB of observations
    out = subprocess.run([sys.executable, "-m", "hybridsim", "replay",
                          str(trajlog.rank_file(short_episode_run, 0)), "--episode", "0",
                          "--npz", str(full / "episode.npz")], capture_output=True, text=True)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "no room for the episode's" in out.stderr and f"temporary file in {full}" in out.stderr
    assert "No space left on device" in out.stderr
    assert not any(full.iterdir())

def test_episode_out_of_range_is_named(short_episode_run):
    with pytest.raises(ValueError, match="episode 999 out of range"):
        replay.replay(trajlog.rank_file(short_episode_run, 0), 999)


def test_a_full_scratch_directory_is_found_before_the_replay_and_closes_the_env(short_episode_run, small_fs):
    """The room for the episode is taken before the steps leading to it (a late episode of
    a long run is minutes of replay), and the environment is closed on the way out."""
    calls = {"steps": 0, "closed": 0}

    def counting_env(cfg, seed, num_envs=1):
        vec = replay._make_env(cfg, seed, num_envs)
        step, close = vec.step, vec.close
        vec.step = lambda *a, **k: calls.__setitem__("steps", calls["steps"] + 1) or step(*a, **k)
        vec.close = lambda: calls.__setitem__("closed", calls["closed"] + 1) or close()
        return vec

    path = trajlog.rank_file(short_episode_run, 0)
    last = trajlog.read_episodes(path)["env_id"].size - 1
    with pytest.raises(OSError, match="no room for the episode's"):
        replay.replay(path, last, keep_transitions=True, scratch_dir=small_fs("1m"), make_env=counting_env)
    assert calls == {"steps": 0, "closed": 1}


def test_the_command_keeps_gif_frames_only_when_asked_and_observations_beside_the_npz(
        short_episode_run, tmp_path, monkeypatch):
    from hybridsim import cli
    seen = []
    real = replay.replay
    monkeypatch.setattr(replay, "replay", lambda *a, **k: seen.append(k) or real(*a, **k))
    path = str(trajlog.rank_file(short_episode_run, 0))
    assert cli.main(["replay", path, "--episode", "0", "--npz", str(tmp_path / "a.npz")]) == 0
    assert cli.main(["replay", path, "--episode", "0", "--gif", str(tmp_path / "a.gif")]) == 0
    assert [(k["keep_transitions"], k["keep_frames"], k["scratch_dir"]) for k in seen] == [
        (True, False, tmp_path.resolve()), (False, True, None)]


def test_log_replays_on_the_other_backend(short_episode_run, tmp_path):
    """A log written on ale-py replays on hybridsim and one written on hybridsim replays on
    ale-py: every reward, episode end and logged observation the same."""
    path = trajlog.rank_file(short_episode_run, 0)
    last = trajlog.read_episodes(path)["env_id"].size - 1
    result = replay.replay(path, last, env="hybridsim")
    assert result.backend == "cpu" and result.reproduced, result.mismatches
    run = tmp_path / "cpu_run"
    cfg = TrainConfig(game="pong", backend="cpu", num_envs=2, num_minibatches=1,
                      total_frames=3200, log_dir=str(run), num_threads=1, torch_threads=1,
                      log_every=1000.0, max_episode_frames=700, noop_max=10,
                      repeat_action_probability=0.25, log_observations=True, obs_stride=5)
    Trainer(cfg).train()
    path = trajlog.rank_file(run, 0)
    episodes = trajlog.read_episodes(path)
    assert episodes["env_id"].size >= 2 and np.any(episodes["return"] != 0)
    out = subprocess.run([sys.executable, "-m", "hybridsim", "replay", str(path), "--episode",
                          str(episodes["env_id"].size - 1), "--env", "ale-py"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "replayed on ale-py" in out.stdout and "reproduced" in out.stdout


def test_unknown_replay_env_is_named(short_episode_run):
    with pytest.raises(ValueError, match="env 'gpu'"):
        replay.replay(trajlog.rank_file(short_episode_run, 0), 0, env="gpu")


def _restarting_run(tmp_path) -> dict:
    """A breakout run on ale-py's vector env (which cannot restore its environments: a
    resume restarts them) trained to 1,800 frames; returns its settings."""
    cfg = dict(game="breakout", backend="ale-py", num_envs=2, num_minibatches=1, log_dir=str(tmp_path),
               num_threads=1, torch_threads=1, log_every=1000.0, max_episode_frames=600, noop_max=10,
               repeat_action_probability=0.25, checkpoint_every=800)
    Trainer(TrainConfig(**cfg, total_frames=1800)).train()
    return cfg


def _resume_restarting_run(tmp_path, cfg, resumed_at):
    """Resume _restarting_run's run to 4,000 frames; the rank file records the restart at
    `resumed_at` and no (env, episode id) names two episodes. Returns the file, episodes."""
    Trainer(TrainConfig(**cfg, total_frames=4000, resume=True)).train()
    path = trajlog.rank_file(tmp_path, 0)
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "restarts") == [resumed_at]
    episodes = trajlog.read_episodes(path)
    pairs = list(zip(episodes["env_id"].tolist(), episodes["episode_id"].tolist()))
    assert len(set(pairs)) == len(pairs), pairs  # no id names two episodes
    return path, episodes


def test_bad_config_attribute_and_gif_path_are_named(short_episode_run, tmp_path):
    src = trajlog.rank_file(short_episode_run, 0)
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    with h5py.File(copy, "r+") as f:
        f.attrs["config"] = "{not json"
    with pytest.raises(trajlog.TrajectoryLogError, match="run config attribute is not JSON"):
        replay.replay(copy, 0)
    result = replay.replay(src, 0)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        replay.save_frames(result.frames, gif=str(tmp_path))
    written = replay.save_frames(result.frames, gif=str(tmp_path / "episode"))  # no .gif suffix
    assert (tmp_path / "episode").stat().st_size > 0 and written == [str(tmp_path / "episode")]
    # an existing GIF is kept unless the caller says to replace it
    (tmp_path / "old.gif").write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="already exists.*--overwrite"):
        replay.save_frames(result.frames, gif=str(tmp_path / "old.gif"))
    assert (tmp_path / "old.gif").read_bytes() == b"keep me"
    with pytest.raises(ValueError):  # a failed write leaves the file it would have replaced
        replay.save_frames([np.zeros((0, 0, 3), np.uint8)], gif=str(tmp_path / "old.gif"),
                           overwrite=True)
    assert (tmp_path / "old.gif").read_bytes() == b"keep me"
    assert not list(tmp_path.glob("*.tmp"))
    replay.save_frames(result.frames, gif=str(tmp_path / "old.gif"), overwrite=True)
    assert (tmp_path / "old.gif").read_bytes() == (tmp_path / "episode").read_bytes()


def test_replay_across_a_resume_that_restarted_the_environments(tmp_path):
    """ale-py's environments cannot be restored: a resumed run restarts them from their
    seeds. The file records that frame, the interrupted episodes keep their ids and the new
    ones get fresh ids, and replay resets there: episodes on both sides reproduce."""
    cfg = _restarting_run(tmp_path)
    import torch
    resumed_at = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["frames"]
    path, episodes = _resume_restarting_run(tmp_path, cfg, resumed_at)
    after = np.nonzero(episodes["start_frame"] >= resumed_at)[0]
    before = np.nonzero(episodes["end_frame"] <= resumed_at)[0]
    assert after.size and before.size
    for k in (before[-1], after[0], after[-1]):
        result = replay.replay(path, int(k))
        assert result.reproduced, (k, result.mismatches)
    out = tmp_path / "dataset.h5"
    export.export_dataset(path, out, env="hybridsim")  # resets at the restart too
    _assert_export_holds_every_replayed_episode(path, out)
    _assert_transitions_read_as_the_slow_reader_does(out)  # with steps cut short
    with h5py.File(out, "r") as g:  # the episodes the restart cut short end at the row before it
        frames = g["global_frame"][:, 0]
        restart = int(np.searchsorted(frames, resumed_at, "right"))
        assert json.loads(g.attrs["restart_rows"]) == [restart]
        cut = g["cut_short"][()]
        assert cut[restart - 1].all() and cut.sum() == cut.shape[1]  # both were mid-episode
        index = [tuple(x) for x in g["final_index"][()]]
        for col in range(cut.shape[1]):
            final = g["final_observations"][index.index((restart - 1, col))]
            assert np.array_equal(final[:3], g["observations"][restart - 1, col][1:])


def _transitions(out, block_rows=export.BLOCK_ROWS):
    """export.iter_transitions' blocks joined."""
    blocks = list(export.iter_transitions(out, block_rows=block_rows))
    return {name: np.concatenate([b[name] for b in blocks]) for name in blocks[0]}


def _slow_transitions(out):
    """The dataset's transitions taken one step at a time, as docs/HDF5_LAYOUT.md tells a
    reader to: the next row's observation, or at an episode's end its final observation."""
    with h5py.File(out, "r") as g:
        data = {name: g[name][()] for name in g}
        env_ids = g.attrs["env_ids"]
    finals = {(int(r), int(c)): k for k, (r, c) in enumerate(data["final_index"])}
    taken = []
    for t in range(data["action"].shape[0]):
        for b in range(data["action"].shape[1]):
            if data["terminated"][t, b] or data["truncated"][t, b] or data["cut_short"][t, b]:
                following = data["final_observations"][finals[(t, b)]]
            elif t + 1 < data["action"].shape[0]:
                following = data["observations"][t + 1, b]
            else:
                continue
            taken.append({"observations": data["observations"][t, b], "actions": data["action"][t, b],
                          "rewards": data["reward_raw"][t, b], "terminated": data["terminated"][t, b],
                          "truncated": data["truncated"][t, b], "cut_short": data["cut_short"][t, b],
                          "next_observations": following, "behavior_logits": data["behavior_logits"][t, b],
                          "episode_id": data["episode_id"][t, b], "global_frame": data["global_frame"][t, b],
                          "env_id": env_ids[b], "row": t,
                          **({"lives": data["lives"][t, b]} if "lives" in data else {})})
    return {name: np.stack([one[name] for one in taken]) for name in taken[0]}


def _assert_transitions_read_as_the_slow_reader_does(out):
    slow = _slow_transitions(out)
    for block_rows in (3, export.BLOCK_ROWS):  # across block edges, and one block
        fast = _transitions(out, block_rows)
        assert set(fast) == set(slow)
        for name in slow:
            assert np.array_equal(fast[name], slow[name]), (block_rows, name)
    with h5py.File(out, "r"):  # a notebook's handle (HDF5's file locking) made it "damaged"
        assert np.array_equal(_transitions(out)["row"], slow["row"])


def _assert_export_holds_every_replayed_episode(path, out):
    """Each finished episode of the log, replayed alone (replay --npz), is the export's
    stretch of that environment's column: observations, actions, final observation; and
    export.iter_transitions gives its transitions: each observation, the next one (the
    final one last), action, reward and flags."""
    episodes = trajlog.read_episodes(path)
    read = _transitions(out)
    with h5py.File(out, "r") as g:
        data = {name: g[name][()] for name in ("episode_id", "action", "final_index")}
        env_ids = g.attrs["env_ids"]
        for k in range(episodes["env_id"].size):
            result = replay.replay(path, k, env="hybridsim", keep_transitions=True)
            col = int(np.nonzero(env_ids == result.env_id)[0][0])
            rows = np.nonzero(data["episode_id"][:, col] == result.episode_id)[0]
            t = result.transitions
            assert np.array_equal(g["observations"][rows, col], t["observations"]), k
            assert np.array_equal(data["action"][rows, col], t["actions"]), k
            end = [i for i, (r, c) in enumerate(data["final_index"]) if (r, c) == (rows[-1], col)]
            assert len(end) == 1 and np.array_equal(g["final_observations"][end[0]], t["final_observation"]), k
            mine = (read["env_id"] == result.env_id) & (read["episode_id"] == result.episode_id)
            assert np.array_equal(read["row"][mine], rows), k
            assert np.array_equal(read["observations"][mine], t["observations"]), k
            assert np.array_equal(read["next_observations"][mine],
                                  np.concatenate([t["observations"][1:], t["final_observation"][None]])), k
            for name in ("actions", "rewards", "terminated", "truncated"):
                assert np.array_equal(read[name][mine], t[name]), (k, name)


@pytest.mark.parametrize("checkpoint_edit", ["two_ranks", "no_tracker"])
def test_every_episode_replays_after_a_resume_without_this_ranks_tracker(tmp_path, checkpoint_edit):
    """A checkpoint of another rank count (or one without `episode_tracker`) does not tell
    the resumed rank its episodes in progress: the environments restart, and the restarted
    episodes took the id of the episode cut short at the checkpoint, so the two shared one
    id and replay found more steps than the episodes table (MISMATCH). They get new ids."""
    import torch
    cfg = _restarting_run(tmp_path)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    resumed_at = state["frames"]
    tracker = state["rank_states"][0]["episode_tracker"]
    assert (tracker["lengths"] > 0).all()  # both environments cut short mid-episode
    if checkpoint_edit == "two_ranks":  # as if written by a 2-rank job
        state["world_size"] = 2
        state["rank_states"] = [state["rank_states"][0], dict(state["rank_states"][0])]
    else:  # an older checkpoint: no tracker
        del state["rank_states"][0]["episode_tracker"]
    torch.save(state, tmp_path / "checkpoint.pt")
    path, episodes = _resume_restarting_run(tmp_path, cfg, resumed_at)
    steps = trajlog.read_steps(path, fields=["env_id", "episode_id", "global_frame"])
    for env in (0, 1):  # no id holds steps from both sides of the restart
        mine = steps["env_id"] == env
        before = set(steps["episode_id"][mine & (steps["global_frame"] <= resumed_at)].tolist())
        after = set(steps["episode_id"][mine & (steps["global_frame"] > resumed_at)].tolist())
        assert before and after and not before & after, (env, before, after)
    assert (episodes["start_frame"] >= resumed_at).sum() >= 2
    for k in range(episodes["env_id"].size):
        result = replay.replay(path, k)
        assert result.reproduced, (k, result.mismatches)
    # export's episode_id check takes the restarted episodes' new ids
    export.export_dataset(path, tmp_path / "dataset.h5", env="hybridsim")
    restart = int(np.searchsorted(steps["global_frame"][:, 0], resumed_at, "right"))
    with h5py.File(path, "r+") as f:  # a restarted episode that kept the id cut short
        f["steps/episode_id"][restart, 1] = f["steps/episode_id"][restart - 1, 1]
    with pytest.raises(trajlog.TrajectoryLogError, match=rf"steps/episode_id row {restart}, column 1 \(env 1\) "
                                                         rf"holds \d+, not an id above \d+ \(the environments "
                                                         rf"restarted there\)"):
        export.export_dataset(path, tmp_path / "dataset2.h5", env="hybridsim")


def test_episodes_across_lost_rows_are_refused(short_episode_run, tmp_path):
    """Rows lost before a resume (the file's `gaps`): the episodes after them cannot be
    replayed, and replay says why instead of reporting a false mismatch."""
    src = trajlog.rank_file(short_episode_run, 0)
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    episodes = trajlog.read_episodes(copy)
    last = episodes["env_id"].size - 1
    with h5py.File(copy, "r+") as f:
        f.attrs["gaps"] = "[[40, 80]]"
    with pytest.raises(ValueError, match="after frame 40 up to frame 80 were lost"):
        replay.replay(copy, last)


def test_the_episodes_table_must_agree_with_the_steps(short_episode_run, tmp_path):
    src = trajlog.rank_file(short_episode_run, 0)
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    with h5py.File(copy, "r+") as f:
        f["episodes/return"][0] = f["episodes/return"][0] + 3
    result = replay.replay(copy, 0)
    assert not result.reproduced and "the episodes table says" in result.mismatches[0]


def _dir_with_old_frames(d):
    (d / "frames").mkdir()
    (d / "frames" / "frame_00000.png").write_bytes(b"x")
    return d / "frames"


def _a_file(d):
    (d / "file").write_text("x")
    return d / "file"


def test_overwrite_without_gif_is_refused(short_episode_run):
    from hybridsim import cli
    with pytest.raises(ValueError, match="--overwrite applies to --gif or --npz, which is not given"):
        cli._cmd_replay(cli.build_parser().parse_args(
            ["replay", str(trajlog.rank_file(short_episode_run, 0)), "--episode", "0", "--overwrite"]))


@pytest.mark.parametrize("option,make,message", [
    ("--gif", lambda d: d / "missing" / "ep.gif", "directory .*missing does not exist"),
    ("--png-dir", _dir_with_old_frames, "already holds frame_\\*.png files"),
    ("--png-dir", _a_file, "is a file, not a directory"),
    ("--png-dir", lambda d: _a_file(d) / "x" / "y", "--png-dir .*file/x/y: .*file is a file, not a directory"),
    ("--gif", lambda d: _a_file(d) / "ep.gif", "--gif .*file/ep.gif: .*file is a file, not a directory"),
    ("--gif", _a_file, "--gif .*file: already exists; .*--overwrite"),
    ("--npz", _a_file, "--npz .*file: already exists; .*--overwrite"),
    ("--npz", lambda d: d / "episode.h5", "--npz .*episode.h5: name a file ending in .npz"),
    ("--npz", lambda d: d / "missing" / "ep.npz", "directory .*missing does not exist"),
])
def test_replay_refuses_outputs_it_cannot_write_before_replaying(short_episode_run, tmp_path,
                                                                   monkeypatch, option, make, message):
    """These failed only after the replay (minutes for a long episode), or mixed the new
    frames with another replay's."""
    from hybridsim import cli
    target = make(tmp_path)
    monkeypatch.setattr(replay, "replay", lambda *a, **k: pytest.fail("replayed first"))
    with pytest.raises((OSError, ValueError), match=message):
        cli._cmd_replay(cli.build_parser().parse_args(
            ["replay", str(trajlog.rank_file(short_episode_run, 0)), "--episode", "0",
             option, str(target)]))


@pytest.fixture(scope="module")
def impala_run(tmp_path_factory):
    """The asynchronous schedule: 3 environments answering in batches of 2 (one worker
    thread: the pool answers in submission order), with observations every 10 rows, stopped
    at the budget and resumed from the checkpoint (the environments restored, one with an
    action in flight)."""
    run = tmp_path_factory.mktemp("impala")
    base = dict(game="breakout", backend="cpu", schedule="impala", num_envs=3, env_batch_size=2,
                learner_batch=2, num_minibatches=1, log_dir=str(run), num_threads=1, torch_threads=1,
                log_every=1000.0, max_episode_frames=400, noop_max=10, repeat_action_probability=0.25,
                log_observations=True, obs_stride=10, checkpoint_every=10**9)
    first = Trainer(TrainConfig(**base, total_frames=2400))
    first.train()
    resumed = Trainer(TrainConfig(**base, total_frames=4800, resume=True))
    resumed.train()
    return run, first.frames, resumed.frames


def test_an_impala_log_holds_only_steps_and_every_episode_replays(impala_run):
    """The reset hands out only env_batch first observations; recv returns the others. Those
    are no steps: their slots hold the fill values (env_id -1), no frames are counted for
    them, and every logged action is one the environment took, also for the actions in
    flight at the checkpoint, answered after the resume."""
    run, first_frames, frames = impala_run
    path = trajlog.rank_file(run, 0)
    steps = trajlog.read_steps(path, fields=["env_id", "action", "episode_id", "global_frame",
                                             "reward_raw", "value"])
    stepped = steps["env_id"] >= 0
    assert (~stepped).sum() == 1  # environment 2's first observation, beside a step
    empty = ~stepped
    assert (steps["action"][empty] == -1).all() and (steps["episode_id"][empty] == -1).all()
    assert np.isnan(steps["reward_raw"][empty]).all() and np.isnan(steps["value"][empty]).all()
    assert (steps["action"][stepped] >= 0).all()
    assert frames == 4 * stepped.sum()  # frame skip 4, one rank
    assert 4 * stepped[steps["global_frame"].max(axis=1) <= first_frames].sum() == first_frames
    episodes = trajlog.read_episodes(path)
    assert episodes["env_id"].size >= 8 and set(episodes["env_id"].tolist()) == {0, 1, 2}
    crossing = (episodes["start_frame"] < first_frames) & (episodes["end_frame"] > first_frames)
    assert crossing.any()
    for k in range(episodes["env_id"].size):
        result = replay.replay(path, k)
        assert result.reproduced, (k, int(episodes["env_id"][k]), result.mismatches)


def test_an_impala_log_keeps_observations_of_its_first_environment(impala_run):
    """Environment 0 is in some rows only: its first step in each block of obs_stride rows
    is kept (a row-number test found none of its steps with an even stride)."""
    run, _, _ = impala_run
    with trajlog.open_trajectory_file(trajlog.rank_file(run, 0)) as f:
        index = f["observations/index"][()]
        rows = f["steps/env_id"].shape[0]
        env0_rows = np.nonzero((f["steps/env_id"][()] == 0).any(axis=1))[0]
    blocks = index[:, 0] // 10
    assert (index[:, 1] == 0).all() and (np.diff(blocks) > 0).all()
    assert set(blocks.tolist()) == set((env0_rows // 10).tolist()) and len(index) >= rows // 20


def _copy_with_config(src, dst, **changes):
    import json
    dst.write_bytes(src.read_bytes())
    with h5py.File(dst, "r+") as f:
        cfg = json.loads(f.attrs["config"])
        cfg.update(changes)
        f.attrs["config"] = json.dumps(cfg)
    return dst


@pytest.mark.parametrize("changes, message", [
    ({"frame_skip": 0}, "frame_skip must be >= 1, got 0"),  # gymnasium's traceback
    ({"frame_skip": "4"}, "frame_skip is '4', not of type int"),
    ({"seed": "x"}, "seed is 'x', not of type int"),  # "invalid literal for int()"
    ({"backend": "warp"}, "backend must be cpu, gpu, hybrid or ale-py, got 'warp'"),
    ({"repeat_action_probability": 2.0}, "repeat_action_probability must be in \\[0, 1\\]"),
    ({"game": "nosuchgame"}, "game 'nosuchgame': no ROM"),
    ({"num_threads": -3}, "num_threads must be in \\[0, 2\\*\\*31\\) \\(0: one per core\\), got -3"),
])
def test_a_damaged_run_config_is_named(short_episode_run, tmp_path, changes, message):
    src = trajlog.rank_file(short_episode_run, 0)
    copy = _copy_with_config(src, tmp_path / src.name, **changes)
    with pytest.raises(trajlog.TrajectoryLogError,
                       match=f"{copy}: damaged run config attribute: {message}"):
        replay.replay(copy, 0)


@pytest.mark.parametrize("setting", ["backend", "frame_skip", "schedule"])
def test_a_run_config_without_a_setting_is_refused_before_any_work(short_episode_run, tmp_path, setting):
    """A config attribute without `backend` replayed or exported every row, then died of a
    KeyError; one without an emulation setting would have re-emulated with its default."""
    src = trajlog.rank_file(short_episode_run, 0)
    copy = tmp_path / src.name
    copy.write_bytes(src.read_bytes())
    with h5py.File(copy, "r+") as f:
        cfg = json.loads(f.attrs["config"])
        del cfg[setting]
        f.attrs["config"] = json.dumps(cfg)
    message = f"{copy}: damaged run config attribute: it lacks {setting}; cannot replay"
    with pytest.raises(trajlog.TrajectoryLogError, match=re.escape(message)):
        replay.replay(copy, 0)
    with pytest.raises(trajlog.TrajectoryLogError, match=re.escape(message)):
        export.export_dataset(copy, tmp_path / "dataset.h5")
    out = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(copy), str(tmp_path / "dataset.h5")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr and message in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_cli_names_a_damaged_config_and_action_without_a_traceback(short_episode_run, tmp_path):
    src = trajlog.rank_file(short_episode_run, 0)
    copy = _copy_with_config(src, tmp_path / src.name, frame_skip=0)
    out = subprocess.run([sys.executable, "-m", "hybridsim", "replay", str(copy), "--episode", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"{copy}: damaged run config attribute: frame_skip" in out.stderr
    copy.write_bytes(src.read_bytes())
    env = int(trajlog.read_episodes(copy)["env_id"][0])
    with h5py.File(copy, "r+") as f:
        rows, cols = np.nonzero(f["steps/env_id"][()] == env)
        f["steps/action"][rows[3], cols[3]] = 77
    out = subprocess.run([sys.executable, "-m", "hybridsim", "replay", str(copy), "--episode", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert (f"{copy}: damaged trajectory file: steps/action holds 1 value(s) outside the action "
            f"set 0..3 (e.g. 77) for env {env}") in out.stderr, out.stderr


def test_a_gpu_runs_log_without_a_gpu_names_the_cpu_replay(short_episode_run, tmp_path):
    from hybridsim import gpu
    if not gpu.cupy_unavailable_reason():
        pytest.skip("CuPy and a CUDA device are here: the GPU backend replays")
    src = trajlog.rank_file(short_episode_run, 0)
    copy = _copy_with_config(src, tmp_path / src.name, backend="gpu")
    with pytest.raises(RuntimeError, match=f"{copy}: the run used --backend gpu, .*need CuPy.*"
                                           f"replay it on the CPU with --env hybridsim .* or --env ale-py"):
        replay.replay(copy, 0)
    assert replay.replay(copy, 0, env="hybridsim").reproduced


def test_a_resume_with_trajectories_off_leaves_a_recorded_gap(tmp_path):
    """Logging on, then a resume with --log-trajectories false, then one with it on: the
    rows in between were never logged. Replay said MISMATCH (blaming the emulator) for an
    episode across them; now it says the rows are missing, and analyze lists the gap."""
    from hybridsim import analyze
    cfg = dict(game="pong", backend="cpu", num_envs=2, num_minibatches=1, log_dir=str(tmp_path),
               num_threads=1, torch_threads=1, log_every=1000.0, max_episode_frames=600, noop_max=10)
    Trainer(TrainConfig(**cfg, total_frames=1600)).train()
    Trainer(TrainConfig(**cfg, total_frames=3200, resume=True, log_trajectories=False)).train()
    # the job that did not log carries the logging job's record on (rows up to frame 1600)
    carried = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["rank_states"][0]
    assert carried["traj_logged_until"] == 1600 and carried["traj_rows"] > 0
    Trainer(TrainConfig(**cfg, total_frames=4800, resume=True)).train()
    path = trajlog.rank_file(tmp_path, 0)
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "gaps") == [[1600, 3200]]
    last = trajlog.read_episodes(path)["env_id"].size - 1
    with pytest.raises(ValueError, match="after frame 1600 up to frame 3200 were lost"):
        replay.replay(path, last)
    assert replay.replay(path, 0).reproduced  # before the gap
    summary = analyze.analyze(tmp_path, plots=False)
    assert "no steps logged after frame 1600 up to frame 3200" in analyze.format_summary(summary)


def test_export_is_the_log_with_every_observation(short_episode_run, tmp_path):
    """The run used ale-py; hybridsim's engine re-emulates it. The logged columns are copied,
    every logged observation is among the exported ones (the step after its row), and every
    episode equals its own replay."""
    path = trajlog.rank_file(short_episode_run, 0)
    out = tmp_path / "dataset.h5"
    summary = export.export_dataset(path, out, env="hybridsim", compression="gzip")
    steps = trajlog.read_steps(path)
    with h5py.File(out, "r") as g, h5py.File(path, "r") as f:
        rows, width = steps["action"].shape
        assert summary["rows"] == rows and g["observations"].shape == (rows, width, 4, 84, 84)
        for name in export.COPIED:
            assert np.array_equal(g[name][()], steps[name]), name
        assert np.array_equal(g["behavior_logits"][()], f["steps/behavior_logits"][:rows])
        index = f["observations/index"][()]
        assert index.shape[0] >= 5
        for k, (row, env_id, _) in enumerate(index):
            if row + 1 < rows:
                assert np.array_equal(g["observations"][row + 1, env_id], f["observations/frames"][k])
        assert g["final_index"].shape[0] == summary["episodes_ended"] == int(
            (steps["terminated"] | steps["truncated"]).sum())
        assert g.attrs["game"] == "breakout" and g.attrs["backend"] == "cpu"
    _assert_export_holds_every_replayed_episode(path, out)
    _assert_transitions_read_as_the_slow_reader_does(out)
    assert len(np.unique(_transitions(out)["lives"])) > 1  # breakout: lives were lost
    older = tmp_path / "before_lives.h5"  # a dataset written before lives were exported
    older.write_bytes(out.read_bytes())
    with h5py.File(older, "r+") as g:
        del g["lives"]
    assert "lives" not in _transitions(older)
    _assert_transitions_read_as_the_slow_reader_does(older)
    with pytest.raises(trajlog.TrajectoryLogError, match="a trajectory log; export it first"):
        next(export.iter_transitions(path))
    with pytest.raises(IsADirectoryError, match="a directory; name one of the datasets in it"):
        next(export.iter_transitions(tmp_path))
    (tmp_path / "foreign.h5").write_bytes(b"not HDF5")
    with pytest.raises(trajlog.TrajectoryLogError, match="foreign.h5: not a readable HDF5 file"):
        next(export.iter_transitions(tmp_path / "foreign.h5"))
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(out.read_bytes())
    with h5py.File(damaged, "r+") as g:  # one episode end loses its final observation
        first_end = g["final_index"][0]
        g["final_index"][0] = g["final_index"][1]
    with pytest.raises(trajlog.TrajectoryLogError, match=f"damaged dataset: the step of row {first_end[0]}, "
                                                         f"column {first_end[1]} ends an episode but"):
        _transitions(damaged)


def test_export_of_a_file_whose_name_is_not_utf8(short_episode_run, tmp_path):
    """An HDF5 string attribute is UTF-8: the source path's other bytes are escaped (the
    export failed after the whole re-emulation, with an encoding error naming nothing)."""
    import os
    odd = tmp_path / os.fsdecode(b"tr\xff.h5")
    odd.write_bytes(trajlog.rank_file(short_episode_run, 0).read_bytes())
    export.export_dataset(odd, tmp_path / "dataset.h5")
    with h5py.File(tmp_path / "dataset.h5", "r") as g:
        assert g.attrs["source"] == str(tmp_path / "tr\\xff.h5")


@pytest.mark.parametrize("field,message", [
    ("steps/reward_raw", "step row 40: the re-emulated rewards differ"),
    ("steps/terminated", "step row 40: the re-emulated episode ends differ"),
    ("steps/lives", "step row 40: the re-emulated lives differ"),
    ("observations/frames", "step row .*, env 0: the re-emulated observation differs"),
])
def test_export_checks_each_row_against_the_log(short_episode_run, tmp_path, field, message):
    path = trajlog.rank_file(short_episode_run, 0)
    tampered = tmp_path / path.name
    tampered.write_bytes(path.read_bytes())
    with h5py.File(tampered, "r+") as f:
        if field == "observations/frames":
            f[field][3, 0, 40, 40] ^= 0xFF
        else:
            f[field][40, 1] = (f[field][40, 1] + 7) if field.endswith(("raw", "lives")) else not f[field][40, 1]
    with pytest.raises(export.ExportMismatch, match=message):
        export.export_dataset(tampered, tmp_path / "dataset.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no output, no temporary file


def test_export_refuses_what_it_cannot_reproduce(short_episode_run, impala_run, tmp_path):
    path = trajlog.rank_file(short_episode_run, 0)
    tampered = tmp_path / path.name
    tampered.write_bytes(path.read_bytes())
    out = tmp_path / "dataset.h5"
    with h5py.File(tampered, "r+") as f:
        f.attrs["gaps"] = '[[800, 1600]]'
    with pytest.raises(ValueError, match=r"lacks the step rows of frames \[\[800, 1600\]\]"):
        export.export_dataset(tampered, out)
    with pytest.raises(ValueError, match="an asynchronous \\(IMPALA\\) log"):
        export.export_dataset(trajlog.rank_file(impala_run[0], 0), out)
    damaged = tmp_path / "damaged" / path.name  # one env_id of an a2c log: damage, not impala
    damaged.parent.mkdir()
    damaged.write_bytes(path.read_bytes())
    with h5py.File(damaged, "r+") as f:
        f["steps/env_id"][7, 1] = 99
    with pytest.raises(trajlog.TrajectoryLogError, match=r"damaged trajectory file: steps/env_id row 7 "
                                                         r"\(\[0, 99.*schedule \(a2c\) steps every"):
        export.export_dataset(damaged, out)
    with h5py.File(damaged, "r+") as f:
        f["steps/env_id"][7, 1] = 1
        f["steps/global_frame"][9, 0] = 4  # column 0's frames place the restarts
    with pytest.raises(trajlog.TrajectoryLogError, match=r"env 0's steps/global_frame goes from 72 \(row 8\) to 4 "):
        export.export_dataset(damaged, out)
    with h5py.File(damaged, "r+") as f:
        f["steps/global_frame"][9, 0] = 80
        f["steps/global_frame"][export.BLOCK_ROWS, 1] = 0  # another column's, a block's first row
    with pytest.raises(trajlog.TrajectoryLogError, match=rf"env 1's steps/global_frame goes from \d+ \(row "
                                                         rf"{export.BLOCK_ROWS - 1}\) to 0 \(row {export.BLOCK_ROWS}\); "
                                                         rf"nothing was written"):
        export.export_dataset(damaged, out)
    with h5py.File(damaged, "r+") as f:
        f["steps/env_id"][0, 0] = -1
    with pytest.raises(trajlog.TrajectoryLogError, match=r"steps/env_id row 0 holds \[-1, 1.*not environment ids"):
        export.export_dataset(damaged, out)
    with pytest.raises(ValueError, match="a master file"):
        export.export_dataset(short_episode_run / "trajectories.h5", out)
    out.write_bytes(b"")
    with pytest.raises(FileExistsError, match="already exists; .*--overwrite"):
        export.export_dataset(path, out)
    with pytest.raises(ValueError, match="ending in .h5"):
        export.export_dataset(path, tmp_path / "dataset.npz")
    assert tampered.stat().st_size > 0


@pytest.mark.parametrize("damage, message", [
    # the id of one step of an episode in progress
    (lambda f: f["steps/episode_id"].__setitem__((60, 1), 7),
     r"steps/episode_id row 60, column 1 \(env 1\) holds 7, not \d+: row 59 holds \d+ and its step"),
    # a stretch of rows: an id that does not grow at an episode's end (or falls back after it)
    (lambda f: f["steps/episode_id"].__setitem__((slice(130, 200), 1), 0),
     r"steps/episode_id row \d+, column 1 \(env 1\) holds \d+, not \d+: row \d+ holds \d+ and its step"),
    (lambda f: f["steps/episode_id"].__setitem__((0, 0), -1), r"steps/episode_id row 0, column 0 \(env 0\) "
                                                               r"holds -1, not an id >= 0"),
])
def test_export_names_a_damaged_episode_id_instead_of_copying_it(short_episode_run, tmp_path, damage, message):
    """The dataset copies episode_id, which the re-emulation does not check: an id that
    breaks the run's counting (one more after each episode's end) was written into the
    dataset, exit 0."""
    path = trajlog.rank_file(short_episode_run, 0)
    tampered = tmp_path / path.name
    tampered.write_bytes(path.read_bytes())
    with h5py.File(tampered, "r+") as f:
        damage(f)
    with pytest.raises(trajlog.TrajectoryLogError, match=f"{tampered}: damaged trajectory file: {message}"
                                                         f".*; nothing was written") as caught:
        export.export_dataset(tampered, tmp_path / "dataset.h5", env="hybridsim")
    assert not isinstance(caught.value, export.ExportMismatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no output, no temporary file


@pytest.mark.parametrize("row, column, value", [(10, 1, np.nan), (300, 0, -np.inf)])
def test_export_warns_of_a_logit_that_is_not_finite_and_copies_it(short_episode_run, tmp_path, row, column, value):
    """A NaN or infinite logit is damage, or the last rollout of a run that diverged (it
    stops at the update after those rows): said, and copied as logged, not a refusal of
    the whole log (helper-91)."""
    path = trajlog.rank_file(short_episode_run, 0)
    tampered = tmp_path / path.name
    tampered.write_bytes(path.read_bytes())
    with h5py.File(tampered, "r+") as f:
        f["steps/behavior_logits"][row, column, 0] = value
    with pytest.warns(HybridsimWarning, match=rf"steps/behavior_logits row {row}, column {column} "
                                              rf"\(env {column}\) holds {value}, not a finite logit"):
        export.export_dataset(tampered, tmp_path / "dataset.h5", env="hybridsim")
    with h5py.File(tmp_path / "dataset.h5", "r") as g:
        copied = g["behavior_logits"][row, column, 0]
    assert np.isnan(copied) if np.isnan(value) else copied == value


@pytest.mark.parametrize("shape", ["3-D", "80x80"])
def test_export_names_logged_observations_of_another_shape_as_damage(short_episode_run, tmp_path, shape):
    """Frames of another shape than the run's observations differed from every re-emulated
    one: export said the log was not this run's."""
    path = trajlog.rank_file(short_episode_run, 0)
    tampered = tmp_path / path.name
    tampered.write_bytes(path.read_bytes())
    with h5py.File(tampered, "r+") as f:
        frames = f["observations/frames"][()]
        del f["observations/frames"]
        f["observations/frames"] = frames[:, -1] if shape == "3-D" else frames[:, :, :80, :80]
    seen = "(84, 84)" if shape == "3-D" else "(4, 80, 80)"
    with pytest.raises(trajlog.TrajectoryLogError, match=re.escape(
            f"{tampered}: damaged trajectory file: observations/frames holds frames of shape {seen}, but "
            f"the run's environments observe (4, 84, 84); nothing was written")) as caught:
        export.export_dataset(tampered, tmp_path / "dataset.h5", env="hybridsim")
    assert not isinstance(caught.value, export.ExportMismatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    with pytest.raises(trajlog.TrajectoryLogError, match=re.escape(  # replay said "observation differs"
            f"{tampered}: damaged trajectory file: observations/frames holds frames of shape {seen}, but "
            f"the run's environments observe (4, 84, 84); cannot replay")):
        replay.replay(tampered, 0, env="hybridsim")


def test_iter_transitions_names_a_damaged_dataset(short_episode_run, tmp_path):
    """A dataset cut short, or whose env_ids or final_index do not fit its observations, was
    an IndexError naming neither the file nor what is damaged."""
    out = tmp_path / "dataset.h5"
    export.export_dataset(trajlog.rank_file(short_episode_run, 0), out, env="hybridsim")
    with h5py.File(out, "r") as g:
        rows = g["action"].shape[0]

    def shorter_actions(g):
        action = g["action"][:-5]
        del g["action"]
        g["action"] = action

    def final_index_outside(g):
        g["final_index"][0] = [rows + 5, 0]
    for damage, message in [
            (lambda g: g["final_observations"].resize(3, axis=0),
             r"final_index has \d+ entries for 3 final_observations"),
            (lambda g: g.attrs.__setitem__("env_ids", [0, 1, 2]),
             "its env_ids attribute holds 3 ids for 2 environments"),
            (shorter_actions, rf"action has shape \({rows - 5}, 2\), not {rows} rows of 2 environments"),
            (final_index_outside, rf"final_index entry 0 names row {rows + 5}, column 0, outside its {rows} rows"),
    ]:
        damaged = tmp_path / "damaged.h5"
        damaged.write_bytes(out.read_bytes())
        with h5py.File(damaged, "r+") as g:
            damage(g)
        with pytest.raises(trajlog.TrajectoryLogError, match=f"{damaged}: damaged dataset: {message}"):
            _transitions(damaged)


def test_no_output_replaces_a_trajectory_log(short_episode_run, tmp_path):
    """replay's --gif/--npz and export's output refuse a run's rank or master file, the
    input itself or another, --overwrite or not; export also refuses a new file under a
    log's name (analyze and resume would take it for one of the run's)."""
    run = tmp_path / "run"
    shutil.copytree(short_episode_run, run)
    rank0, master = trajlog.rank_file(run, 0), run / trajlog.MASTER_FILE
    before = {p: p.read_bytes() for p in (rank0, master)}
    for target in (rank0, master):
        for kind in ("gif", "npz"):
            with pytest.raises(FileExistsError, match="is a run's trajectory log, which no output replaces"):
                replay.check_outputs(**{kind: str(target)}, overwrite=True)
        with pytest.raises(FileExistsError, match="is a run's trajectory log"):
            export.export_dataset(rank0, target, overwrite=True)
    for name in ("traj_rank00001.h5", "trajectories.h5", "traj_rank_copy.h5"):
        with pytest.raises(ValueError, match=f"a trajectory log's name; .*e.g. dataset_{name}"):
            export.export_dataset(rank0, tmp_path / name)
    assert {p: p.read_bytes() for p in before} == before
    damaged = tmp_path / "traj_rank00003.h5"  # an HDF5 file that does not open, under a log's name
    damaged.write_bytes(rank0.read_bytes()[:4096])
    assert trajlog.is_trajectory_log(damaged) and not trajlog.is_trajectory_log(tmp_path / "other.h5")
    exported = tmp_path / "dataset.h5"
    export.export_dataset(rank0, exported)
    assert not trajlog.is_trajectory_log(exported)  # a dataset may be exported again over itself
    export.export_dataset(rank0, exported, overwrite=True)


def test_export_cli(short_episode_run, tmp_path):
    path = trajlog.rank_file(short_episode_run, 0)
    out = tmp_path / "dataset.h5"
    done = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(path), str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "every reward, episode end, lives count and logged observation matches the log" in done.stdout and out.stat().st_size > 0
    ours = tmp_path / "hybridsim.h5"
    export.export_dataset(path, ours, env="hybridsim")
    with h5py.File(out, "r") as theirs, h5py.File(ours, "r") as mine:  # ale-py (the run's) and ours
        assert theirs.attrs["backend"] == "ale-py" and set(theirs) == set(mine)
        for name in theirs:
            assert np.array_equal(theirs[name][()], mine[name][()]), name
    again = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(path), str(out)],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
    tampered = tmp_path / path.name
    tampered.write_bytes(path.read_bytes())
    with h5py.File(tampered, "r+") as f:
        f["steps/reward_raw"][7, 0] += 1.0
    differs = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(tampered),
                              str(tmp_path / "other.h5")], capture_output=True, text=True)
    assert differs.returncode == 1 and "MISMATCH" in differs.stdout and "step row 7" in differs.stdout


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_export_leaves_nothing_and_keeps_the_old_output(short_episode_run, tmp_path,
                                                                  monkeypatch, signum):
    """The signal arrives mid-export (here from the row check of row 5): the export ends at
    the next row, removes its temporary file and leaves an existing output as it was."""
    path = trajlog.rank_file(short_episode_run, 0)
    out = tmp_path / "dataset.h5"
    out.write_bytes(b"the previous export")
    check_row = export._check_row

    def signalled(path, r, *args):
        if r == 5:
            os.kill(os.getpid(), signum)
        return check_row(path, r, *args)
    monkeypatch.setattr(export, "_check_row", signalled)
    before = signal.getsignal(signum)
    expected = KeyboardInterrupt if signum == signal.SIGINT else export.ExportStopped
    with pytest.raises(expected):
        export.export_dataset(path, out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset.h5"]
    assert out.read_bytes() == b"the previous export"
    assert signal.getsignal(signum) == before


def test_export_stops_before_a_write_the_disk_has_no_room_for(short_episode_run, tmp_path, monkeypatch):
    """The free space runs out after the first block: the export stops before writing the
    next (HDF5 must never meet a full disk: freeing a file's objects after a failed write
    crashes the process), names the output, leaves no temporary file and keeps an old output."""
    from hybridsim import storage
    path = trajlog.rank_file(short_episode_run, 0)
    out = tmp_path / "dataset.h5"
    out.write_bytes(b"the previous export")
    checks = []

    def free_bytes(where):
        checks.append(where)
        return 1 << 40 if len(checks) <= 2 else export.HEADROOM_BYTES
    monkeypatch.setattr(storage, "free_bytes", free_bytes)
    monkeypatch.setattr(export, "BLOCK_ROWS", 4)
    with pytest.raises(storage.StorageError, match=r"dataset.h5: writing the exported dataset failed: No "
                                                   r"space left on device.*stopped before writing") as err:
        export.export_dataset(path, out, overwrite=True)
    assert err.value.disk_full and len(checks) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset.h5"]
    assert out.read_bytes() == b"the previous export"


def test_a_run_directory_export_ends_at_a_full_disk(short_episode_run, tmp_path, monkeypatch, capsys):
    """The next ranks would meet the same full disk: the export ends there, saying how far
    it got, with status 2 (not each rank reported as 'not exported' in turn)."""
    from hybridsim import cli, storage
    monkeypatch.setattr(storage, "free_bytes", lambda where: export.HEADROOM_BYTES)
    assert cli.main(["export", str(short_episode_run), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "the export ended at traj_rank00000.h5, with 0 of 1 datasets written into" in err, err
    assert "No space left on device" in err and "not exported" not in err
    assert not (tmp_path / "out").exists()  # the folder it made, empty, goes again


def hold_a_worker_under_way(proc, out) -> int:
    """The pid of a `export --jobs` worker stopped (SIGSTOP) while its rank is under way."""
    import time
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        for tmp in out.glob("*.tmp") if out.is_dir() else ():
            worker = int(tmp.name.split(".")[-2])
            os.kill(worker, signal.SIGSTOP)
            while not proc_status(worker)["State"].startswith("T"):  # every thread stopped: a signal
                time.sleep(0.001)                                      # sent now stays pending
            if tmp.exists():  # (else it finished just before the stop: try the next)
                return worker
            os.kill(worker, signal.SIGCONT)
        time.sleep(0.002)


def proc_status(pid: int) -> dict:
    return {k: v.strip() for k, v in (line.split(":", 1) for line in
                                      pathlib.Path(f"/proc/{pid}/status").read_text().splitlines())}


def wait_for_pending(pid: int, signum: int) -> None:
    """Until signal `signum` waits, undelivered, in stopped process `pid`."""
    import time
    deadline = time.monotonic() + 60
    while True:
        fields = proc_status(pid)
        if int(fields["ShdPnd"], 16) & (1 << (signum - 1)):
            return
        assert time.monotonic() < deadline, fields["ShdPnd"]
        time.sleep(0.01)


@pytest.mark.parametrize("how", ["sigterm", "sigterm-to-a-worker", "worker-killed", "parent-killed"])
def test_a_parallel_export_stopped_leaves_nothing_under_way(two_rank_run, tmp_path, how):
    """`export RUN --jobs 2` with a rank under way in a worker, held (SIGSTOP) so that it
    cannot finish first:
    - SIGTERM to the command (scancel, kill) goes on to the workers, whose exports stop and
      remove their temporary files; status 2 says so, and no worker is left;
    - SIGTERM to that worker alone stops the whole export the same way (it dropped the
      rank and exited 0);
    - a worker killed (SIGKILL: the OOM killer) ends the export with status 2 naming the
      ranks under way, and its temporary file is removed;
    - the command killed: its workers stop their ranks, leave nothing and exit (they
      waited for the next rank for ever)."""
    import time
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "export", str(two_rank_run), str(out),
                             "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = hold_a_worker_under_way(proc, out)
    if how == "worker-killed":
        os.kill(held, signal.SIGKILL)
    elif how == "parent-killed":
        workers = [int(p) for p in pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        proc.kill()
        proc.wait(timeout=60)
        os.kill(held, signal.SIGCONT)
        deadline = time.monotonic() + 60
        while any(pathlib.Path(f"/proc/{w}").exists() and not proc_status(w)["State"].startswith("Z")
                  for w in workers):
            assert time.monotonic() < deadline, "a worker outlived its parent"
            time.sleep(0.1)
        assert not list(out.glob("*.tmp"))
        return
    else:
        os.kill(held if how == "sigterm-to-a-worker" else proc.pid, signal.SIGTERM)
        if how == "sigterm":
            wait_for_pending(held, signal.SIGTERM)  # forwarded by the command
        os.kill(held, signal.SIGCONT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2, (stdout, stderr)
    if how == "worker-killed":
        assert re.search(r"error: a worker process died while exporting (traj_rank0000[01].h5(, )?)+; the "
                         r"ranks under way were stopped and left nothing", stderr), stderr
    else:
        assert "error: stopped by SIGTERM; no rank started after it, and those it stopped left nothing" in stderr
    written = int(re.search(r"the export ended, with ([01]) of 2 datasets written into", stderr).group(1))
    assert not list(out.glob("*.tmp"))
    assert out.exists() == bool(written)  # the folder it made goes again when it holds nothing
    for dataset in out.iterdir() if written else ():  # a rank that finished before the signal stays, whole
        with h5py.File(dataset, "r") as f:
            assert f["observations"].shape[:2] == (200, 2) and f["action"].shape == (200, 2)
    with pytest.raises(ProcessLookupError):
        os.kill(held, 0)


def test_a_worker_stopped_before_its_export_starts_writes_nothing(short_episode_run, tmp_path):
    """A stop signal that reaches a --jobs worker between ranks or while it sets one up is
    kept, and the export it runs next stops at once: the worker neither dies of it (which
    broke the pool) nor writes the rank after it."""
    code = ("import os, signal, sys\n"
            "from hybridsim import export\n"
            "export._worker_takes_stops()\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "print(export.export_rank(sys.argv[1], sys.argv[2], env='run', compression='lzf', overwrite=False))\n")
    done = subprocess.run([sys.executable, "-c", code, str(trajlog.rank_file(short_episode_run, 0)),
                           str(tmp_path / "dataset.h5")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == f"('stopped', {int(signal.SIGTERM)})\n", done
    assert list(tmp_path.iterdir()) == []


def test_a_stop_between_ranks_is_kept_for_the_next(short_episode_run, tmp_path):
    """One rank at a time: a SIGTERM between two ranks (or while one is set up) stopped the
    command where it stood; it is kept, and the next rank stops before writing anything.
    Once the export is over, its stops are forgotten and the handlers are back."""
    path, out = trajlog.rank_file(short_episode_run, 0), tmp_path / "d.h5"
    options = dict(env="run", compression="lzf", overwrite=False)
    before = signal.getsignal(signal.SIGTERM)
    with export.record_stops():
        os.kill(os.getpid(), signal.SIGTERM)
        assert export.export_rank(path, out, **options) == ("stopped", int(signal.SIGTERM))
    assert signal.getsignal(signal.SIGTERM) == before
    assert list(tmp_path.iterdir()) == []
    assert export.export_rank(path, out, **options)[0] == "written"


@pytest.mark.parametrize("target", ["file", "run", "run-jobs"])
def test_a_stop_while_an_export_is_set_up_ends_it_cleanly(short_episode_run, tmp_path, monkeypatch, capsys,
                                                           target, request):
    """A SIGTERM before the row loop takes the stop signals (here while the output name is
    checked) killed the command (status 143, no message): it now stops before the first
    row, with status 2 and nothing written."""
    from hybridsim import cli
    check_output = export.check_output

    def signalled(out, overwrite=False):
        os.kill(os.getpid(), signal.SIGTERM)
        return check_output(out, overwrite)
    monkeypatch.setattr(export, "check_output", signalled)
    source = {"file": lambda: trajlog.rank_file(short_episode_run, 0), "run": lambda: short_episode_run,
              "run-jobs": lambda: request.getfixturevalue("two_rank_run")}[target]()
    out = tmp_path / ("d.h5" if target == "file" else "out")
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["export", str(source), str(out), *(["--jobs", "2"] if target == "run-jobs" else [])]) == 2
    said = {"file": "nothing was written", "run": "no rank started after it, and the one it stopped left nothing",
            "run-jobs": "no rank started after it, and those it stopped left nothing"}[target]
    assert f"error: stopped by SIGTERM; {said}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [] and signal.getsignal(signal.SIGTERM) == before


def test_export_jobs_is_checked(short_episode_run, tmp_path, capsys):
    from hybridsim import cli
    assert cli.main(["export", str(short_episode_run), str(tmp_path / "out"), "--jobs", "0"]) == 2
    assert "--jobs must be 1 or more, got 0" in capsys.readouterr().err
    assert cli.main(["export", str(trajlog.rank_file(short_episode_run, 0)), str(tmp_path / "d.h5"),
                     "--jobs", "2"]) == 2
    assert "--jobs 2: exports the rank files of a run directory side by side" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("run_threads, max_threads, used", [(0, None, 0), (0, 1, 1), (1, 4, 1), (3, 2, 2)])
def test_exports_side_by_side_share_the_cpus(short_episode_run, tmp_path, monkeypatch, run_threads, max_threads,
                                             used):
    """A --jobs worker re-emulates with at most its share of the CPUs (max_threads): a run
    logged with --num-threads 0 (every core) took every core in each of N workers."""
    path = tmp_path / "traj_rank00000.h5"
    shutil.copy(trajlog.rank_file(short_episode_run, 0), path)
    with h5py.File(path, "r+") as f:
        f.attrs["config"] = json.dumps({**json.loads(f.attrs["config"]), "num_threads": run_threads})
    seen, make_env = [], replay._make_env
    monkeypatch.setattr(replay, "_make_env", lambda cfg, **kw: seen.append(cfg["num_threads"]) or make_env(cfg, **kw))
    export.export_dataset(path, tmp_path / "d.h5", max_threads=max_threads)
    assert seen == [used]


def test_exports_side_by_side_ask_for_room_for_all(short_episode_run, tmp_path, monkeypatch):
    """Each of `writers` exports asks for its block's room times their number: they all
    write into the same file system at once."""
    from hybridsim import storage
    asked = []
    monkeypatch.setattr(storage, "free_bytes", lambda where: asked.append(where) or 3 * export.HEADROOM_BYTES)
    with pytest.raises(storage.StorageError, match=r"the next rows need up to [0-9.]+ MB \([0-9.]+ MB for the 4 "
                                                   r"exports running side by side\) and [0-9.]+ MB is free"):
        export.export_dataset(trajlog.rank_file(short_episode_run, 0), tmp_path / "d.h5", writers=4)
    export.export_dataset(trajlog.rank_file(short_episode_run, 0), tmp_path / "d.h5", writers=1)


def test_a_run_directory_export_under_a_full_quota_stops_before_writing(short_episode_run, small_quota):
    """A real quota (btrfs qgroup) that statvfs does not show, filled by another file up to
    256 KB, less than the dataset's 0.66 MB: the export asks for the room first and ends
    with EDQUOT named and status 2. Without asking, HDF5 met the quota (a failed write;
    freeing the file after it may crash the process, h5py issue 914); in a subprocess so
    that a regression cannot take the test session down."""
    from test_diskfull import fill_quota
    directory = small_quota("48M")
    spare = directory / "spare"
    spare.write_bytes(b"\1" * (256 << 10))
    filler = fill_quota(directory)
    spare.unlink()
    os.sync()
    out = directory / "out"
    export_run = [sys.executable, "-m", "hybridsim", "export", str(short_episode_run), str(out)]
    done = subprocess.run(export_run, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Disk quota exceeded (EDQUOT)" in done.stderr and "a disk quota leaves less" in done.stderr, done.stderr
    assert "the export ended at traj_rank00000.h5, with 0 of 1 datasets written into" in done.stderr, done.stderr
    assert not out.exists()
    filler.unlink()
    done = subprocess.run(export_run, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in out.iterdir()] == ["dataset_rank00000.h5"]


def test_the_room_a_block_asks_for_follows_the_file_s_growth(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    growth = export._FileGrowth(path)
    assert growth.expected(10_000) == 10_000  # nothing written yet: all of it
    growth.wrote(100_000)  # 1,000 bytes on disk for 100,000
    assert growth.expected(16_000) == 2_000  # at least 1/16 of it, twice
    path.write_bytes(b"x" * 31_000)  # the next 100,000 took 30,000: the last block's share counts
    growth.wrote(100_000)
    assert growth.expected(10_000) == 6_000
    assert growth.expected(1_000_000) == 600_000


def test_an_export_asks_for_the_room_its_compressed_blocks_take(short_episode_run, small_quota, tmp_path):
    """A 0.66 MB dataset (lzf) into a 24 MB quota: the first block is short, and the file's
    growth for it sets what the next ones ask for. Every block asked for its uncompressed
    size (14.4 MB here, plus headroom) and the export was refused by the quota; and what
    it writes matches the export elsewhere."""
    directory = small_quota("24M")
    path = trajlog.rank_file(short_episode_run, 0)
    export.export_dataset(path, directory / "d.h5")
    export.export_dataset(path, tmp_path / "d.h5")
    assert_same_datasets(directory / "d.h5", tmp_path / "d.h5")


def test_a_run_directory_export_to_a_file_name_is_refused(short_episode_run, tmp_path, capsys):
    """`export RUN_DIR out.h5` made a folder named out.h5: a run exports into a folder."""
    from hybridsim import cli
    assert cli.main(["export", str(short_episode_run), str(tmp_path / "out.h5")]) == 2
    assert "a run directory exports into a folder, one dataset per rank file" in capsys.readouterr().err
    assert not (tmp_path / "out.h5").exists()


def test_export_onto_a_real_full_disk_ends_with_an_error(short_episode_run, small_fs):
    fs = small_fs("1m")
    done = subprocess.run([sys.executable, "-m", "hybridsim", "export",
                           str(trajlog.rank_file(short_episode_run, 0)), str(fs / "dataset.h5")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert f"{fs / 'dataset.h5'}: writing the exported dataset failed: No space left" in done.stderr
    assert "Traceback" not in done.stderr and list(fs.iterdir()) == []


def test_a_failed_png_frame_takes_the_episodes_frames_with_it(tmp_path, monkeypatch):
    """The disk fills at the third PNG: the error names that frame and the cause, and the
    frames written before it go too (no half episode, no empty frame file)."""
    from PIL import Image
    from hybridsim import storage
    save = Image.Image.save
    calls = []

    def failing_save(self, fp, *args, **kwargs):
        calls.append(fp)
        if len(calls) == 3:
            pathlib.Path(fp).write_bytes(b"")
            raise OSError(errno.ENOSPC, "No space left on device")
        return save(self, fp, *args, **kwargs)
    monkeypatch.setattr(Image.Image, "save", failing_save)
    frames = [np.full((4, 4, 3), k, np.uint8) for k in range(5)]
    out = tmp_path / "frames"
    with pytest.raises(storage.StorageError, match=r"frame_00002.png: writing a PNG frame failed: No "
                                                   r"space left on device.*frames written before it "
                                                   r"were removed") as err:
        replay.save_frames(frames, png_dir=str(out))
    assert err.value.disk_full and list(out.iterdir()) == []


def test_outputs_onto_a_real_full_disk_are_named(short_episode_run, small_fs, tmp_path):
    """replay --gif/--png-dir/--npz and analyze --out on a full tmpfs: exit status 2 and the
    file and cause named, no traceback, no partial file."""
    fs = small_fs("1m")
    (fs / "spare").write_bytes(b"\1" * (1000 << 10))
    path = trajlog.rank_file(short_episode_run, 0)
    named = rf"{fs}/\S+: writing .* failed: No space left on device"
    for args, message in (
            (["replay", path, "--episode", "0", "--gif", fs / "e.gif"], named),
            (["replay", path, "--episode", "0", "--png-dir", fs / "png"], named),
            (["replay", path, "--episode", "0", "--npz", fs / "e.npz"],  # its scratch file, first
             rf"no room for the episode's .* in a temporary file in {fs}"),
            (["analyze", short_episode_run, "--out", fs / "analysis"], named)):
        done = subprocess.run([sys.executable, "-m", "hybridsim", *map(str, args)], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 2, (args, done.stderr)
        assert re.search(message, done.stderr), done.stderr
        assert "Traceback" not in done.stderr
    left = sorted(str(p.relative_to(fs)) for p in fs.rglob("*") if p.is_file())
    assert all(name == "spare" or name.startswith("analysis/") for name in left), left
    assert all((fs / name).stat().st_size > 0 for name in left)


def test_export_on_a_busy_machine_waits_passively_and_says_so(short_episode_run, tmp_path):
    """As train: spinning OpenMP workers slowed an export 2.4-3.3x beside other busy
    processes (BENCHMARKS.md), so with busy cores and no policy chosen export sets PASSIVE."""
    code = ("import os, sys\n"
            "from hybridsim import cli, sysinfo\n"
            "sysinfo.cpu_busy_fraction = lambda cpus, seconds=0.25: 0.9\n"
            "rc = cli.main(sys.argv[1:])\n"
            "print('policy', os.environ.get('OMP_WAIT_POLICY'))\n"
            "raise SystemExit(rc)\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", code, "export", str(trajlog.rank_file(short_episode_run, 0)),
                           str(tmp_path / "dataset.h5")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "policy PASSIVE" in done.stdout and "are 90% busy with other work" in done.stderr


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """A 2-rank run directory (2 environments per rank, observations logged); tests that
    change its files work on a copy."""
    from mpi_util import mpiexec_or_skip
    mpiexec = mpiexec_or_skip()
    run = tmp_path_factory.mktemp("two_ranks") / "run"
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "hybridsim", "train", "--game", "pong",
                           "--backend", "cpu", "--num-envs", "2", "--total-frames", "3200",
                           "--log-dir", str(run), "--num-threads", "1", "--torch-threads", "1",
                           "--max-episode-frames", "400", "--log-every", "1000",
                           "--log-observations", "true", "--obs-stride", "5"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return run


def assert_same_datasets(a, b):
    with h5py.File(a, "r") as mine, h5py.File(b, "r") as theirs:
        assert set(mine) == set(theirs) and list(mine.attrs["env_ids"]) == list(theirs.attrs["env_ids"])
        for name in mine:
            assert np.array_equal(mine[name][()], theirs[name][()]), name


def test_export_of_another_ranks_file(tmp_path, two_rank_run):
    """Rank 1's environments are 2 and 3: their seeds and columns, and its logged
    observations, follow from the file's env ids."""
    run = tmp_path / "run"
    shutil.copytree(two_rank_run, run)
    path = trajlog.rank_file(run, 1)
    out = tmp_path / "rank1.h5"
    export.export_dataset(path, out)
    with h5py.File(out, "r") as g, h5py.File(path, "r") as f:
        assert list(g.attrs["env_ids"]) == [2, 3]
        assert set(f["observations/index"][:, 1]) == {2}  # the rank's first environment's
    _assert_export_holds_every_replayed_episode(path, out)

    # the whole run directory: each rank's dataset, as the rank file's own export
    datasets = tmp_path / "datasets"
    (datasets / "nested").mkdir(parents=True)  # an existing folder takes them beside its files
    whole = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(run), str(datasets)],
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert f"wrote 2 of 2 datasets into {datasets}" in whole.stdout
    assert sorted(p.name for p in datasets.iterdir()) == ["dataset_rank00000.h5", "dataset_rank00001.h5", "nested"]
    assert_same_datasets(out, datasets / "dataset_rank00001.h5")
    _assert_export_holds_every_replayed_episode(trajlog.rank_file(run, 0), datasets / "dataset_rank00000.h5")

    # --jobs 2: both ranks at once, in two processes, the same datasets
    side_by_side = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(run), str(tmp_path / "jobs"),
                                   "--jobs", "2"], capture_output=True, text=True, timeout=300)
    assert side_by_side.returncode == 0, side_by_side.stderr[-2000:]
    assert f"wrote 2 of 2 datasets into {tmp_path / 'jobs'}" in side_by_side.stdout
    for name in ("dataset_rank00000.h5", "dataset_rank00001.h5"):
        assert_same_datasets(datasets / name, tmp_path / "jobs" / name)
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == ["dataset_rank00000.h5", "dataset_rank00001.h5"]

    # every output is checked before any rank runs: one existing dataset refuses them all
    (datasets / "dataset_rank00000.h5").unlink()
    before = (datasets / "dataset_rank00001.h5").read_bytes()
    again = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(run), str(datasets)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 2, again.stderr
    assert ("error: 1 of the 2 datasets cannot be written, so none was: output "
            f"{datasets / 'dataset_rank00001.h5'}: already exists") in again.stderr
    assert not (datasets / "dataset_rank00000.h5").exists()
    assert (datasets / "dataset_rank00001.h5").read_bytes() == before

    # a rank the emulator does not reproduce is reported; the others are still exported
    with h5py.File(trajlog.rank_file(run, 1), "r+") as f:
        f["steps/reward_raw"][3, 1] += 1.0
    for jobs in ("1", "2"):
        mixed = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(run), str(tmp_path / f"mixed{jobs}"),
                                "--jobs", jobs], capture_output=True, text=True, timeout=300)
        assert mixed.returncode == 1, mixed.stderr[-2000:]
        assert "traj_rank00001.h5: MISMATCH" in mixed.stdout and "step row 3" in mixed.stdout
        assert "the re-emulation does NOT reproduce traj_rank00001.h5" in mixed.stdout
        assert sorted(p.name for p in (tmp_path / f"mixed{jobs}").iterdir()) == ["dataset_rank00000.h5"]
    with h5py.File(trajlog.rank_file(run, 0), "r+") as f:  # rows missing: it cannot be exported
        f.attrs["gaps"] = json.dumps([[800, 1600]])
    failed = subprocess.run([sys.executable, "-m", "hybridsim", "export", str(run), str(tmp_path / "failed")],
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert "traj_rank00000.h5: not exported: " in failed.stdout and "lacks the step rows" in failed.stdout
    assert "wrote 0 of 2 datasets" in failed.stdout and "not exported: traj_rank00000.h5" in failed.stdout
    assert not (tmp_path / "failed").exists()
