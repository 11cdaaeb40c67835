"""The side-by-side verifier itself: exact on identical emulators, precise on a planted fault."""
import pytest

from hybridsim import roms, verify

ale_py = pytest.importorskip("ale_py")
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


class FaultyALE(ale_py.ALEInterface):
    """ale-py with one planted fault after `at` frames."""

    def __init__(self, kind, at):
        super().__init__()
        self.kind, self.at, self.frames = kind, at, 0

    def act(self, action, strength=1.0):
        self.frames += 1
        reward = super().act(action, strength)
        return reward + 1 if self.kind == "reward" and self.frames == self.at else reward

    def getRAM(self, *args):
        ram = super().getRAM(*args)
        if self.kind == "ram" and self.frames >= self.at:
            ram = ram.copy()
            ram[5] ^= 1
        return ram

    def getScreenRGB(self, *args):
        rgb = super().getScreenRGB(*args)
        if self.kind == "rgb" and self.frames >= self.at:
            rgb = rgb.copy()
            rgb[100, 7, 2] ^= 4
        return rgb


def test_identical_emulators_are_exact():
    result = verify.verify(ale_py.ALEInterface, ale_py.ALEInterface, roms.rom_path("breakout"),
                           game="breakout", frames=300, reset_every=120)
    assert result.exact, str(result)
    assert result.frames == 300 and result.resets >= 2


@pytest.mark.parametrize("kind,at,field,detail", [
    ("reward", 17, "reward", "reference 0, candidate 1"),
    ("ram", 40, "RAM", "byte $85"),
    ("rgb", 60, "getScreenRGB", "at (100, 7, 2)"),
])
def test_planted_faults_are_reported_where_they_are(kind, at, field, detail):
    result = verify.verify(ale_py.ALEInterface, lambda: FaultyALE(kind, at),
                           roms.rom_path("pong"), game="pong", frames=200, full_every=10)
    assert not result.exact
    assert result.divergence.field == field
    assert detail in result.divergence.detail
    expected_frame = at if kind != "rgb" else ((at + 9) // 10) * 10
    assert result.divergence.frame == expected_frame


@pytest.mark.parametrize("args,message", [
    (["verify", "--games", "pong", "--frames", "0"], "--frames must be >= 1"),
    (["verify", "--games", "pong", "--screen-every", "0"], "--screen-every must be >= 1"),
    (["verify", "--games", "pong", "--seed", "-1"], "--seed must be >= 0"),
    (["verify", "--games", ","], "names no game"),
    (["verify", "--games", "combat"], "no game settings"),
    (["bench", "--single", "--frames", "0"], "--frames must be >= 1"),
    (["bench", "--vector", "--rounds", "0"], "--rounds must be >= 1"),
])
def test_cli_refuses_checks_that_would_check_nothing(args, message, capsys):
    """verify and bench never report success for zero frames, zero games or zero rounds."""
    from hybridsim.cli import main
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_verify_takes_game_names_as_train_does(capsys):
    from hybridsim.cli import main
    assert main(["verify", "--games", "Pong", "--frames", "30"]) == 0
    assert "pong: exact" in capsys.readouterr().out
