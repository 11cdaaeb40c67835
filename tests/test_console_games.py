"""Console-level exactness over more ROMs: RAM and screen against ale-py 0.12.1.

The emulator runs without game settings (game "none"), so only what the console
computes is compared: all 128 RAM bytes, the screen and the frame counters, every
frame, through ALE's own resets when its game ends. Each case exercises a mapper or a
TIA property: F8 with HMOVE blanks off (ms_pacman), E0 (montezuma_revenge), FE
(robotank), F6 (road_runner), DPC (pitfall2), YStart 40 (qbert), PAL detection and colour loss
(keystone_kapers), RESET as a starting action, and mode selection recipes.
"""
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")

from hybridsim._console import GAME_IDS, Emulator  # noqa: E402
from hybridsim.carts import ale_cart_type, detect_cart_type  # noqa: E402

# ROM properties (ALE's DefProps.hxx) and reset recipes (ALE's games/supported/*.cpp).
CASES = {
    "seaquest": dict(),
    "ms_pacman": dict(hmove_blanks=False, mode_select=dict(ram=0x99, value=1, ram2=0xA1, value2=1, hold=10)),
    "montezuma_revenge": dict(),
    "robotank": dict(),
    "road_runner": dict(),
    "qbert": dict(ystart=40),
    "berzerk": dict(mode=1, mode_select=dict(ram=0x80, value=1, hold=2, before=[("act", 0, 20)])),
    "keystone_kapers": dict(starting_actions=(40,)),
    "beam_rider": dict(starting_actions=(3,)),
    "double_dunk": dict(mode_select={"custom": "double_dunk"}, starting_actions=(10,)),
    "pitfall2": dict(starting_actions=(2,)),  # DPC cartridge
    "kaboom": dict(left_controller="PADDLES", starting_actions=(1,)),  # left paddle only
    "carnival": dict(ystart=26, height=214),
    # 60 NOOP + 2 FIRE starting actions, mode selection on a paddle game
    "casino": dict(left_controller="PADDLES", mode_select=dict(ram=0xD4, value=0, hold=2),
                   starting_actions=[0] * 60 + [1, 1]),
}


def run_lockstep(game, frames, sticky, seed=5, **overrides):
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("random_seed", seed)
    ale.setFloat("repeat_action_probability", sticky)
    path = ale_py.roms.get_rom_path(game)
    ale.loadROM(path)
    with open(path, "rb") as f:
        cart, image = detect_cart_type(f.read())
    emu = Emulator(image, GAME_IDS["none"], cart_type=cart, random_seed=seed,
                   repeat_action_probability=sticky, **overrides)
    actions = [int(a.value) for a in ale.getMinimalActionSet()]
    rng = np.random.default_rng(1)
    for frame in range(frames + 1):
        if frame:
            a = actions[rng.integers(len(actions))]
            strength = float(rng.choice([1.0, 0.37]))  # paddle speed (ignored by joysticks)
            ale.act(ale_py.Action(a), strength)
            emu.act(a, paddle_strength=strength)
        r1, r2 = ale.getRAM(), emu.get_ram()
        if not np.array_equal(r1, r2):
            i = int(np.nonzero(r1 != r2)[0][0])
            pytest.fail(f"{game} frame {frame}: RAM ${0x80 + i:02X} ale {r1[i]} emu {r2[i]}")
        s1, s2 = ale.getScreen(), emu.get_screen()
        assert s1.shape == s2.shape, f"{game}: screen shape ale {s1.shape} emu {s2.shape}"
        if not np.array_equal(s1, s2):
            ys, xs = np.nonzero(s1 != s2)
            pytest.fail(f"{game} frame {frame}: {len(ys)} pixels differ, first (row {ys[0]}, col {xs[0]}) "
                        f"ale {s1[ys[0], xs[0]]} emu {s2[ys[0], xs[0]]}")
        assert ale.getEpisodeFrameNumber() == emu.episode_frame_number(), f"{game} frame {frame}: counters"
        if frame % 100 == 0:
            assert np.array_equal(ale.getScreenRGB(), emu.get_screen_rgb()), f"{game} frame {frame}: RGB"
            assert np.array_equal(ale.getScreenGrayscale(), emu.get_screen_grayscale()), \
                f"{game} frame {frame}: grayscale"
        if ale.game_over():
            ale.reset_game()
            emu.reset_game()
    return emu


@pytest.mark.parametrize("game", sorted(CASES))
def test_console_matches_ale(game):
    emu = run_lockstep(game, 300, 0.25, **CASES[game])
    assert emu.tv_standard == ("PAL" if game == "keystone_kapers" else "NTSC")


def test_cart_detection_matches_ale_counts():
    """ALE's detection over the shipped ROMs (counts from ALE_FACTS.md)."""
    import collections
    import os
    folder = os.path.dirname(ale_py.roms.get_rom_path("pong"))
    counts = collections.Counter()
    for name in os.listdir(folder):
        if name.endswith(".bin"):
            with open(os.path.join(folder, name), "rb") as f:
                counts[ale_cart_type(f.read())] += 1
    assert counts == {"2K": 20, "4K": 52, "F8": 24, "E0": 3, "F6": 4, "F6SC": 2, "F8SC": 1, "FE": 1, "DPC": 1}


def test_bad_arguments_raise():
    with open(ale_py.roms.get_rom_path("pong"), "rb") as f:
        rom = f.read()
    with pytest.raises(ValueError):
        Emulator(rom, GAME_IDS["pong"], cart_type="4K")
    with pytest.raises(ValueError):
        Emulator(rom, GAME_IDS["pong"], cart_type="2K", display_format="SECAM")
    with pytest.raises(ValueError):
        Emulator(rom, 12345, cart_type="2K")
    with pytest.raises(ValueError):
        detect_cart_type(b"\0" * 12288)  # FASC is not implemented


def test_dpc_clone_restore_matches_ale():
    """ALE stores the DPC's fractional music clock to 1e-8; restoring must round alike."""
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)
    path = ale_py.roms.get_rom_path("pitfall2")
    ale.loadROM(path)
    with open(path, "rb") as f:
        cart, image = detect_cart_type(f.read())
    emu = Emulator(image, GAME_IDS["none"], cart_type=cart, repeat_action_probability=0.0,
                   starting_actions=(2,))
    actions = [int(a.value) for a in ale.getMinimalActionSet()]
    rng = np.random.default_rng(8)
    for _ in range(100):
        a = actions[rng.integers(len(actions))]
        ale.act(ale_py.Action(a))
        emu.act(a)
    s1, s2 = ale.cloneState(), emu.clone_state()
    for _ in range(50):
        ale.act(ale_py.Action(0))
        emu.act(0)
    ale.restoreState(s1)
    emu.restore_state(s2)
    for frame in range(300):
        a = actions[rng.integers(len(actions))]
        ale.act(ale_py.Action(a))
        emu.act(a)
        assert np.array_equal(ale.getRAM(), emu.get_ram()), f"frame {frame} after restore: RAM"
        assert np.array_equal(ale.getScreen(), emu.get_screen()), f"frame {frame} after restore: screen"
