"""RAM-stream oracle test of cuda/games.h against ale-py 0.12.1.

For every game a seeded random stream of minimal actions (held for random lengths) is
played in ale-py with frame_skip 1 and no sticky actions, with a few reset_game calls;
each frame's RAM goes into hybridsim._games.GameTracker and reward, lives and game_over
must equal ale-py's on every frame. The settings' internal variables (score baseline,
lives counter, latches) are also compared with what ALE serialises in cloneState().
See games_oracle.py for how the tracker is put into ALE's post-reset state.

A second stream per game pokes edge values into the RAM bytes the game's rule reads
(ale.setRAM before the frame), reaching wrap-arounds, blank digits and game-over
markers that random play seldom does; the multi-mode games also run in their last mode.

HYBRIDSIM_GAMES_FRAMES=N sets the frames per game (default 800; e.g. 30000 for a long
run; the poked and other-mode streams scale with it).
"""
import json

import pytest

from conftest import REPO
from games_oracle import frames_per_game, run_poked, run_stream

# ale-py cannot load the games ALE has no settings for (tests/test_no_settings_games.py).
TABLE = [g for g in json.loads((REPO / "data" / "games.json").read_text())["games"]
         if g.get("ale_settings", True)]
NAMES = [g["name"] for g in TABLE]
# Games with several modes, played in their last mode and hardest difficulty.
OTHER_MODES = [(g["name"], g["modes"][-1], g["difficulties"][-1]) for g in TABLE
               if len(g["modes"]) > 1]


@pytest.mark.parametrize("name", NAMES)
def test_ram_stream_matches_ale(name):
    stats = run_stream(name, frames_per_game(800), seed=0, resets=2)
    assert stats["frames"] == frames_per_game(800)
    assert stats["episodes"] >= 3


@pytest.mark.parametrize("name,mode,difficulty", OTHER_MODES)
def test_ram_stream_in_other_mode(name, mode, difficulty):
    frames = frames_per_game(800) // 4
    stats = run_stream(name, frames, seed=1, resets=1, mode=mode, difficulty=difficulty)
    assert stats["frames"] == frames


@pytest.mark.parametrize("name", NAMES)
def test_poked_ram_matches_ale(name):
    """Edge values written into the bytes the rule reads (wraps, blanks, game over)."""
    frames = frames_per_game(800) * 3 // 8
    stats = run_poked(name, frames, seed=0)
    assert stats["frames"] == frames and stats["pokes"] > 0


def test_harness_catches_a_wrong_tracker():
    """A tracker that forgets one reward must be caught on that very frame."""
    from hybridsim._games import GameTracker
    from games_oracle import Divergence

    class DropsFirstReward(GameTracker):
        dropped = False

        def step(self, ram):
            r = super().step(ram)
            if r and not self.dropped:
                self.dropped = True
                return 0
            return r

    with pytest.raises(Divergence, match="reward"):
        run_stream("alien", 800, seed=0, check_internal=False, tracker_cls=DropsFirstReward)


def test_batch_api_matches_tracker():
    """step_batch over an (n, 8) int32 state array == one GameTracker per row."""
    import numpy as np
    from hybridsim._games import GameTracker, game_id, lives_batch, reset_batch, step_batch
    from games_oracle import make_ale

    names = ["breakout", "qbert", "tennis", "riverraid", "chopper_command", "skiing"]
    frames = 300
    rams = np.zeros((frames, len(names), 128), np.uint8)
    for j, name in enumerate(names):
        ale = make_ale(name)
        ale.reset_game()
        acts = ale.getMinimalActionSet()
        rng = np.random.default_rng(j)
        rams[0, j] = ale.getRAM()
        for f in range(1, frames):
            ale.act(acts[int(rng.integers(len(acts)))])
            rams[f, j] = ale.getRAM()
    ids = np.array([game_id(n) for n in names], np.int32)
    states = np.full((len(names), 8), -7, np.int32)
    reset_batch(ids, states)
    trackers = [GameTracker(n) for n in names]
    rewards = np.zeros(len(names), np.int32)
    for f in range(frames):
        step_batch(ids, states, np.ascontiguousarray(rams[f]), rewards)
        lives, term = lives_batch(ids, states)
        for j, t in enumerate(trackers):
            assert t.step(rams[f, j]) == rewards[j]
            assert tuple(states[j]) == t.get_state()
            assert (t.lives(), t.terminal()) == (lives[j], term[j])
