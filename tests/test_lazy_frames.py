"""Lazily drawn frames (no screen read: collisions only, pixels redrawn on demand) against
frames drawn as they run: the same rewards, RAM, screens and full emulator state.

The lazy path skips catch-ups that cannot change a collision latch (writes that leave
the shown graphics as they were, spans with no open latch); any mistake there shows as
a latch, and so a state, that differs from the eagerly drawn run.
"""
import numpy as np
import pytest

pytest.importorskip("ale_py")

from hybridsim import ALEInterface, roms  # noqa: E402

# Kernels that rewrite graphics on every line, use vertical delay (seaquest, space
# invaders), move objects with HMOVE each line, or read collisions often (breakout, pitfall).
GAMES = ["seaquest", "space_invaders", "breakout", "ms_pacman", "pitfall", "enduro", "boxing", "riverraid"]


def _env(game, seed):
    env = ALEInterface()
    env.setInt("random_seed", seed)
    env.setFloat("repeat_action_probability", 0.25)
    env.loadROM(str(roms.rom_path(game)))
    return env


@pytest.mark.parametrize("game", GAMES)
def test_lazy_frames_match_eager_frames(game):
    seed = 3
    eager, lazy = _env(game, seed), _env(game, seed)
    minimal = [int(a) for a in eager.getMinimalActionSet()]
    rng = np.random.default_rng(seed)
    for frame in range(1500):
        action = minimal[rng.integers(len(minimal))]
        reward = eager.act(action)
        eager.getScreen()  # read every frame: the next frame is drawn as it runs
        assert lazy.act(action) == reward, f"{game} frame {frame}: reward"
        assert np.array_equal(eager.getRAM(), lazy.getRAM()), f"{game} frame {frame}: RAM"
        if frame % 50 == 49:
            assert np.array_equal(eager.getScreen(), lazy.getScreen()), f"{game} frame {frame}: screen"
            assert eager.cloneState().serialize() == lazy.cloneState().serialize(), f"{game} frame {frame}: state"
        if eager.game_over():
            assert lazy.game_over()
            eager.reset_game()
            lazy.reset_game()
