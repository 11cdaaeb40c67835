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
