"""hybridsim.ALEInterface against ale_py.ALEInterface on every game with ALE settings.

Each game is driven side by side through `hybridsim verify` with a seeded random stream of
minimal actions: reward, lives, game_over and RAM every frame, the screen every frame or
every third frame (hybridsim draws unread frames on demand; both paths are covered), RGB
and grayscale every 50 frames, two reset_game calls and a cloneState/restoreState round
trip; and each game with modes or difficulties in its last ones. HYBRIDSIM_ORACLE_FRAMES=N runs longer (`hybridsim verify --all` is the long form);
HYBRIDSIM_ORACLE_MODES=all runs every other mode and every other difficulty of each game.
"""
import os

import pytest

from hybridsim import games_table, roms, verify

ale_py = pytest.importorskip("ale_py")
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)

from hybridsim.ale import ALEInterface  # noqa: E402

FRAMES = int(os.environ.get("HYBRIDSIM_ORACLE_FRAMES", "240"))
TABLE = [g for g in games_table.games() if g.get("ale_settings", True)]
GAMES = [g["name"] for g in TABLE]
# Each game also in a non-default mode and difficulty where it has one: its last ones.
OTHER = [(g["name"], g["modes"][-1], g["difficulties"][-1]) for g in TABLE
         if len(g["modes"]) > 1 or len(g["difficulties"]) > 1]
if os.environ.get("HYBRIDSIM_ORACLE_MODES") == "all":  # each mode, and each difficulty, on its own
    OTHER = ([(g["name"], m, g["difficulties"][0]) for g in TABLE for m in g["modes"][1:]]
             + [(g["name"], g["modes"][0], d) for g in TABLE for d in g["difficulties"][1:]])


@pytest.mark.parametrize("sticky,screen_every", [(0.25, 3), (0.0, 1)])
@pytest.mark.parametrize("game", GAMES)
def test_game_matches_ale_py(game, sticky, screen_every):
    result = verify.verify(ale_py.ALEInterface, ALEInterface, roms.rom_path(game), game=game,
                           frames=FRAMES, repeat_action_probability=sticky, seed=11,
                           reset_every=FRAMES // 3, screen_every=screen_every,
                           clone_at=FRAMES // 2)
    assert result.exact, str(result)
    assert result.frames == FRAMES


@pytest.mark.parametrize("game,mode,difficulty", OTHER)
def test_game_in_other_mode_matches_ale_py(game, mode, difficulty):
    result = verify.verify(ale_py.ALEInterface, ALEInterface, roms.rom_path(game), game=game,
                           frames=FRAMES, repeat_action_probability=0.25, seed=5,
                           reset_every=FRAMES // 2, screen_every=2, mode=mode, difficulty=difficulty)
    assert result.exact, str(result)
