"""RIOT timer, ports and TIA inputs against ale-py, through a synthetic ROM."""
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")

from console_roms import riot_probe_rom  # noqa: E402
from hybridsim._console import GAME_IDS, Emulator, tia_render_selftest  # noqa: E402

# ALE finds ROM properties by md5, so an unknown ROM gets the defaults (joysticks), while
# the file name picks Pong's settings (its mode selection reads $96).
PONG_SETTINGS = dict(mode_select=dict(ram=0x96, value=0, hold=2))


@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_riot_probe_matches_ale(tmp_path, sticky):
    rom = riot_probe_rom()
    path = tmp_path / "pong.bin"  # ALE accepts an unknown ROM named after a supported game
    path.write_bytes(rom)
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("random_seed", 9)
    ale.setFloat("repeat_action_probability", sticky)
    ale.loadROM(str(path))
    emu = Emulator(rom, GAME_IDS["pong"], cart_type="4K", random_seed=9,
                   repeat_action_probability=sticky, **PONG_SETTINGS)
    rng = np.random.default_rng(4)
    actions = [0, 1, 3, 4, 11, 12]
    for frame in range(600):
        if frame:
            a = actions[rng.integers(len(actions))]
            strength = float(rng.choice([1.0, 0.5, 0.13, -0.7]))
            ale.act(ale_py.Action(a), strength)
            emu.act(a, paddle_strength=strength)
        r1, r2 = ale.getRAM(), emu.get_ram()
        if not np.array_equal(r1, r2):
            i = int(np.nonzero(r1 != r2)[0][0])
            pytest.fail(f"frame {frame}: RAM ${0x80 + i:02X} ale {r1[i]:#04x} emu {r2[i]:#04x}")
    assert r1[0] != 0  # the program ran


def test_fast_renderer_matches_reference():
    assert tia_render_selftest(11, 200000) == 0
