"""RAM-stream oracle test of cuda/games.h against ale-py 0.12.1.

For every game a seeded random stream of minimal actions (held for random lengths) is
played in ale-py with frame_skip 1 and no sticky actions, with a few reset_game calls;
each frame's RAM goes into hybridsim._games.GameTracker and reward, lives and game_over
must equal ale-py's on every frame. The settings' internal variables (score baseline,
lives counter, latches) are also compared with what ALE serialises in cloneState().
See games_oracle.py for how the tracker is put into ALE's post-reset state.

HYBRIDSIM_GAMES_FRAMES=N sets the frames per game (default 800; e.g. 30000 for a long run).
"""
import json

import pytest

from conftest import REPO
from games_oracle import frames_per_game, run_stream

NAMES = [g["name"] for g in json.loads((REPO / "data" / "games.json").read_text())["games"]]


@pytest.mark.parametrize("name", NAMES)
def test_ram_stream_matches_ale(name):
    stats = run_stream(name, frames_per_game(800), seed=0, resets=2)
    assert stats["frames"] == frames_per_game(800)
    assert stats["episodes"] >= 3


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
