"""TIA picture details against ale-py through synthetic ROMs (screens compared per frame)."""
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")

from console_roms import short_frames_rom  # noqa: E402
from hybridsim._console import (GAME_IDS, Emulator, screen_rgb_selftest, tia_render_selftest,  # noqa: E402
                               tia_skip_spans_selftest)

PONG_SETTINGS = dict(mode_select=dict(ram=0x96, value=0, hold=2))  # see test_console_riot.py


def test_short_frames_and_score_priority_match_ale(tmp_path):
    rom = short_frames_rom()
    path = tmp_path / "pong.bin"
    path.write_bytes(rom)
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(str(path))
    emu = Emulator(rom, GAME_IDS["pong"], cart_type="4K", repeat_action_probability=0.0, **PONG_SETTINGS)
    for frame in range(600):
        if frame:
            ale.act(ale_py.Action(0))
            emu.act(0)
        assert np.array_equal(ale.getRAM(), emu.get_ram()), f"frame {frame}: RAM"
        s1, s2 = ale.getScreen(), emu.get_screen()
        if not np.array_equal(s1, s2):
            ys, xs = np.nonzero(s1 != s2)
            pytest.fail(f"frame {frame}: {len(ys)} pixels differ, first (row {ys[0]}, col {xs[0]}) "
                        f"ale {s1[ys[0], xs[0]]} emu {s2[ys[0], xs[0]]}")


@pytest.mark.parametrize("simd", [True, False], ids=["avx2", "portable"])
def test_fast_renderer_matches_reference(simd):
    """Both pixel loops of the fast renderer (cuda/tia_simd.h and the portable one)."""
    try:
        result = tia_render_selftest(12, 200000, simd=simd)
    except ValueError as exc:
        if simd and "no AVX2" in str(exc):  # nothing else is a reason to skip
            pytest.skip(str(exc))
        raise
    assert result == 0


def test_screen_rgb_simd_matches_loop():
    """getScreenRGB's AVX2 conversion (cuda/screen_rgb.h) against the portable loop, with
    odd (colour-loss) indices and nothing written past the screen."""
    assert screen_rgb_selftest(3, 300) == 0


def test_skipped_spans_match_the_line_loop():
    """Lazily drawn catch-ups with nothing to latch: closed form against the loop."""
    assert tia_skip_spans_selftest(5, 300000) == 0
