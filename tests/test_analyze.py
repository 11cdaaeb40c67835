"""`hybridsim analyze` against statistics computed directly from what was written."""
import json
import subprocess
import sys

import numpy as np

from hybridsim import analyze, trajlog
from test_trajlog import write_rank


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
