"""ROMs ale-py ships without game settings (combat, joust, maze_craze, warlords).

ALE refuses to load them, so there is no oracle: hybridsim plays them as bare ROMs with
reward 0, never terminal, lives 0 and the full action set. These tests check that they
load through hybridsim.ALEInterface, step, render, and report no reward.
"""
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("ale_py")
pytest.importorskip("hybridsim._console")

from hybridsim import games_table, roms  # noqa: E402
from hybridsim.ale import ALEInterface  # noqa: E402

NO_SETTINGS = ["combat", "joust", "maze_craze", "warlords"]


@pytest.mark.parametrize("name", NO_SETTINGS)
def test_loads_steps_renders_without_reward(name):
    env = ALEInterface()
    env.setInt("random_seed", 1)
    env.loadROM(roms.rom_path(name))
    entry = games_table.by_name(name)
    assert not entry["ale_settings"]
    assert [a.value for a in env.getMinimalActionSet()] == list(range(18))
    assert env.getAvailableModes() == [0] and env.getAvailableDifficulties() == [0]
    assert env.lives() == 0 and not env.game_over()
    rng = np.random.default_rng(0)
    screens = set()
    for frame in range(400):
        assert env.act(int(rng.integers(18))) == 0
        assert not env.game_over() and env.lives() == 0
        if frame % 50 == 0:
            screen = env.getScreenRGB()
            assert screen.shape == env.getScreenDims() + (3,)
            screens.add(screen.tobytes())
    assert env.getFrameNumber() == 400
    assert any(any(s) for s in screens), "the ROM never drew anything"
    env.reset_game()
    assert env.getEpisodeFrameNumber() == 0 and env.act(0) == 0


def test_games_command_says_no_settings():
    out = subprocess.run([sys.executable, "-m", "hybridsim", "games"], capture_output=True,
                         text=True, check=True).stdout
    rows = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    for name in NO_SETTINGS:
        assert rows[name].endswith("none (no ALE settings)")
    for g in games_table.games():
        fields = rows[g["name"]].split()
        assert fields[1:4] == [g["md5"], g["mapper"], g["tv"]]
        assert "AUTO" not in rows[g["name"]]
    assert rows["pitfall2"].split()[2] == "DPC" and rows["pacman"].split()[3] == "PAL"


@pytest.mark.parametrize("args", [
    ["train", "--game", "joust", "--backend", "ale-py", "--total-frames", "64"],
    ["bench", "--single", "--games", "joust", "--frames", "10"],
    ["bench", "--vector", "--games", "pong,warlords", "--steps", "1", "--rounds", "1"],
    ["bench", "--train", "--games", "pong,warlords", "--train-frames", "64", "--rounds", "1"],
    ["verify", "--games", "maze_craze", "--frames", "10"],
], ids=["train", "bench-single", "bench-vector", "bench-train", "verify"])
def test_ale_py_paths_refuse_games_ale_py_cannot_load(args, tmp_path):
    """ale-py ends the whole process (C++ exit, status 1, no message of ours) on these
    games, which left a stale run lock behind `train`; each command refuses them first."""
    log_dir = tmp_path / "run"
    extra = ["--log-dir", str(log_dir)] if args[0] == "train" else []
    result = subprocess.run([sys.executable, "-m", "hybridsim", *args, *extra], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "ale-py has no game settings for it and cannot load it" in result.stderr
    assert not log_dir.exists()


def test_an_ale_py_environment_refuses_them_for_eval_and_replay():
    """eval --env ale-py and replay --env ale-py build their environment here."""
    code = ("from hybridsim.train_config import TrainConfig, make_vector_env\n"
            "try:\n"
            "    make_vector_env(TrainConfig(game='combat', backend='ale-py', num_envs=2), 0)\n"
            "except ValueError as exc:\n"
            "    print('refused:', exc)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "refused: combat: ale-py has no game settings" in result.stdout, \
        (result.returncode, result.stdout, result.stderr)
