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
    minimal = [a.value for a in eager.getMinimalActionSet()]
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


def test_frames_the_caller_will_read_are_drawn_as_they_run():
    """The reads of the last acts predict the next: a screen read once per frame skip of 4
    (gymnasium's AtariEnv), or on its last two acts (a max-pool), finds its frame drawn
    (not run again); the acts nobody reads stay undrawn, and without reads every act is."""
    a = _env("breakout", 0)
    emulator = a._emu
    patterns = {"every act": {0, 1, 2, 3}, "every 4th": {3}, "last two of 4": {2, 3},
                "never": set()}
    for name, read_at in patterns.items():
        for k in range(80):
            a.act(k % 4 == 0)  # FIRE now and then: the ball moves
            if k >= 40:  # once the pattern has shown itself
                assert emulator.screen_pending() == (k % 4 not in read_at), (name, k)
            if k % 4 in read_at:
                a.getScreenRGB()


def _short_and_long_frames_rom() -> bytes:
    """Every fourth frame ends 60 lines after VSYNC, above the display's bottom, so the
    lines below keep the pixels of the frame before last (ALE draws into the buffer not
    shown last); the others run 262 lines. The background colour changes on every line
    and every frame, so each frame's pixels are its own."""
    from hybridsim.asm6502 import Assembler
    from romgen import cartridge_4k, emit_clear_ram_and_stack, emit_end_frame
    colubk, wsync, counter = 0x09, 0x02, 0x80
    asm = Assembler(0xF000)
    asm.label("reset")
    emit_clear_ram_and_stack(asm)
    asm.label("frame")
    emit_end_frame(asm)  # 3 lines
    asm.op("INC", "zp", counter)
    asm.op("LDX", "imm", 0)  # 256 lines
    asm.op("LDA", "zp", counter)
    asm.op("AND", "imm", 3)
    asm.op("CMP", "imm", 3)
    asm.op("BNE", "rel", "lines")
    asm.op("LDX", "imm", 60)
    asm.label("lines")
    asm.op("TXA")
    asm.op("CLC")
    asm.op("ADC", "zp", counter)
    asm.op("STA", "zp", colubk)
    asm.op("STA", "zp", wsync)
    asm.op("DEX")
    asm.op("BNE", "rel", "lines")
    asm.op("JMP", "abs", "frame")
    return cartridge_4k(asm, "reset")


@pytest.mark.parametrize("read_every", [1, 3, 5, 7])
def test_frames_ending_early_over_undrawn_frames_match_ale(tmp_path, read_every):
    """A frame that ends above the display's bottom while the frame under it was left
    undrawn: the console draws that one, then this one again over it (console.h,
    console_run_frame); screens read every `read_every` frames (so either buffer can be
    pending) equal ale-py's, and RAM every frame."""
    from console_oracle import ale_py
    from hybridsim._console import GAME_IDS, Emulator
    rom = _short_and_long_frames_rom()
    path = tmp_path / "seaquest.bin"  # ALE runs an unknown ROM under a game's name
    path.write_bytes(rom)
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(str(path))
    emu = Emulator(rom, GAME_IDS["none"], cart_type="4K", repeat_action_probability=0.0)
    assert np.array_equal(ale.getScreen(), emu.get_screen())
    for frame in range(120):
        ale.act(ale_py.Action.NOOP)
        emu.act(0)
        assert not ale.game_over()
        assert np.array_equal(ale.getRAM(), emu.get_ram()), f"frame {frame}: RAM"
        if frame % read_every == read_every - 1:
            assert np.array_equal(ale.getScreen(), emu.get_screen()), f"frame {frame}: screen"
