"""Side-by-side driver: ale_py.ALEInterface (the oracle) and hybridsim's Emulator.

Both get the same ROM, settings and action stream; `Lockstep.check` compares reward,
game_over, lives, RAM and screen and raises with the first divergence. ROM properties
for the test games (from ALE's DefProps.hxx and games/supported/*.cpp) live in PROPS.
"""
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")

from hybridsim._console import GAME_IDS, Emulator  # noqa: E402

# Per-ROM properties and mode selection the emulator takes from its caller.
PROPS = {
    "pong": dict(cart_type="2K", left_controller="PADDLES", right_controller="PADDLES",
                 swap_paddles=True, mode_select=dict(ram=0x96, value=0, hold=2)),
    "breakout": dict(cart_type="2K", left_controller="PADDLES",
                     mode_select=dict(ram=0xB2, value=0, hold=1)),
    "space_invaders": dict(cart_type="4K", mode_select=dict(ram=0xDC, value=0, hold=2)),
}


class Divergence(AssertionError):
    pass


class Lockstep:
    def __init__(self, game, seed=123, sticky=0.0, frame_skip=1, max_frames=0):
        self.game = game
        self.ale = ale_py.ALEInterface()
        self.ale.setLoggerMode(ale_py.LoggerMode.Error)
        self.ale.setInt("random_seed", seed)
        self.ale.setFloat("repeat_action_probability", sticky)
        self.ale.setInt("frame_skip", frame_skip)
        self.ale.setInt("max_num_frames_per_episode", max_frames)
        path = ale_py.roms.get_rom_path(game)
        self.ale.loadROM(path)
        with open(path, "rb") as f:
            rom = f.read()
        self.emu = Emulator(rom, GAME_IDS[game], random_seed=seed, repeat_action_probability=sticky,
                            frame_skip=frame_skip, max_num_frames_per_episode=max_frames,
                            **PROPS[game])
        self.actions = [int(a.value) for a in self.ale.getMinimalActionSet()]
        self.frame = 0

    def fail(self, what):
        raise Divergence(f"{self.game}: first divergence at agent frame {self.frame}: {what}")

    def check(self, colour=False):
        ale, emu = self.ale, self.emu
        r1, r2 = ale.getRAM(), emu.get_ram()
        if not np.array_equal(r1, r2):
            i = int(np.nonzero(r1 != r2)[0][0])
            self.fail(f"RAM ${0x80 + i:02X}: ale {r1[i]} emu {r2[i]}")
        s1, s2 = ale.getScreen(), emu.get_screen()
        if s1.shape != s2.shape:
            self.fail(f"screen shape ale {s1.shape} emu {s2.shape}")
        if not np.array_equal(s1, s2):
            ys, xs = np.nonzero(s1 != s2)
            self.fail(f"{len(ys)} pixels, first (row {ys[0]}, col {xs[0]}): ale {s1[ys[0], xs[0]]} "
                      f"emu {s2[ys[0], xs[0]]}")
        if ale.lives() != emu.lives():
            self.fail(f"lives ale {ale.lives()} emu {emu.lives()}")
        if ale.game_over() != emu.game_over():
            self.fail(f"game_over ale {ale.game_over()} emu {emu.game_over()}")
        if (ale.getFrameNumber(), ale.getEpisodeFrameNumber()) != (emu.frame_number(), emu.episode_frame_number()):
            self.fail("frame counters")
        if colour:
            if not np.array_equal(ale.getScreenRGB(), emu.get_screen_rgb()):
                self.fail("RGB screen")
            if not np.array_equal(ale.getScreenGrayscale(), emu.get_screen_grayscale()):
                self.fail("grayscale screen")

    def step(self, action):
        self.frame += 1
        r1 = self.ale.act(ale_py.Action(action))
        r2 = self.emu.act(action)
        if r1 != r2:
            self.fail(f"reward ale {r1} emu {r2}")

    def reset(self):
        self.ale.reset_game()
        self.emu.reset_game()
