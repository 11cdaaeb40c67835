"""`hybridsim replay` reproduces logged episodes, and notices a tampered log."""
import subprocess
import sys

import h5py
import numpy as np
import pytest

pytest.importorskip("ale_py")
from hybridsim import replay, trajlog  # noqa: E402
from hybridsim.train import TrainConfig, Trainer  # noqa: E402


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


def test_episode_out_of_range_is_named(short_episode_run):
    with pytest.raises(ValueError, match="episode 999 out of range"):
        replay.replay(trajlog.rank_file(short_episode_run, 0), 999)


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
