"""`hybridsim analyze` against statistics computed directly from what was written."""
import json
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hybridsim import analyze, replay, trajlog
from test_trajlog import damage_header, small_run, write_rank  # noqa: F401


def test_summary_matches_the_written_data(tmp_path):
    rows0 = write_rank(trajlog.rank_file(tmp_path, 0), 60, 3, 5, seed=1, env_offset=0)
    rows1 = write_rank(trajlog.rank_file(tmp_path, 1), 40, 2, 5, seed=2, env_offset=3)
    summary = analyze.analyze(tmp_path)
    actions = np.concatenate([np.stack([r["action"] for r in rows]).ravel() for rows in (rows0, rows1)])
    assert summary["overall"]["action_counts"] == np.bincount(actions, minlength=5).tolist()
    episodes = trajlog.read_episodes(trajlog.rank_file(tmp_path, 0))
    assert summary["per_rank"]["traj_rank00000.h5"]["episodes"] == episodes["return"].size == 6
    assert summary["overall"]["episodes"] == 6 + 4
    returns = np.concatenate([trajlog.read_episodes(trajlog.rank_file(tmp_path, r))["return"] for r in (0, 1)])
    assert summary["overall"]["return_mean"] == np.mean(returns)
    assert summary["overall"]["return_max"] == returns.max()
    for name in ("returns.png", "actions.png", "throughput.png", "summary.json"):
        assert (tmp_path / name).is_file()


def test_cli_prints_summary_and_names_a_corrupt_file(tmp_path):
    write_rank(trajlog.rank_file(tmp_path, 0), 30, 2, 4, seed=3)
    result = subprocess.run([sys.executable, "-m", "hybridsim", "analyze", str(tmp_path), "--json",
                             "--no-plots"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["overall"]["episodes"] == 3
    bad = tmp_path / "traj_rank00001.h5"
    bad.write_bytes(trajlog.rank_file(tmp_path, 0).read_bytes()[:5000])
    result = subprocess.run([sys.executable, "-m", "hybridsim", "analyze", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "traj_rank00001.h5" in result.stderr and "truncated" in result.stderr


def run_cli(*args):
    # time-limited: a damaged file once hung analyze and replay in SWMR read retries
    return subprocess.run([sys.executable, "-m", "hybridsim", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("name", ["steps", "steps/action"])
def test_cli_refuses_a_damaged_file_at_once(small_run, tmp_path, name):
    src = trajlog.rank_file(small_run, 0)
    path = damage_header(src, tmp_path / src.name, name)
    for args in (["analyze", path, "--no-plots"], ["replay", path, "--episode", "0"]):
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert f"{path}: damaged trajectory file" in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["steps/action", "steps/env_id", "episodes", "episodes/return",
                                  "steps/behavior_logits"])
def test_a_missing_dataset_is_named(small_run, tmp_path, name):
    path = tmp_path / "traj_rank00000.h5"
    path.write_bytes(trajlog.rank_file(small_run, 0).read_bytes())
    with h5py.File(path, "r+") as f:
        del f[name]
    message = re.escape(f"{path}: damaged trajectory file: {name} is missing")
    with pytest.raises(trajlog.TrajectoryLogError, match=message):
        analyze.analyze(path, plots=False)
    with pytest.raises(trajlog.TrajectoryLogError, match=message):
        replay.replay(path, 0)


def test_cli_refuses_a_master_file_without_its_rank_files(small_run, tmp_path):
    master = tmp_path / trajlog.MASTER_FILE
    master.write_bytes((small_run / trajlog.MASTER_FILE).read_bytes())
    result = run_cli("analyze", master, "--no-plots")  # printed 30 episodes of fill values
    assert result.returncode == 2, result.stdout
    assert f"{master}: its rank file traj_rank00000.h5 is missing" in result.stderr
    summary = analyze.analyze(small_run / trajlog.MASTER_FILE, out_dir=tmp_path, plots=False)
    assert summary["overall"]["episodes"] == 30
