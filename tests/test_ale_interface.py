"""hybridsim.ALEInterface as a drop-in for ale_py.ALEInterface, checked side by side."""
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
pytest.importorskip("hybridsim._console")

import hybridsim  # noqa: E402
from hybridsim import roms, verify  # noqa: E402
from hybridsim.ale import ALEInterface  # noqa: E402

FRAMES = 600


@pytest.mark.parametrize("game", ["pong", "breakout", "space_invaders"])
@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_matches_ale_py_frame_by_frame(game, sticky):
    result = verify.verify(ale_py.ALEInterface, ALEInterface, roms.rom_path(game), game=game,
                           frames=FRAMES, repeat_action_probability=sticky, seed=3,
                           reset_every=250, full_every=25)
    assert result.exact, str(result)


def loaded(game="breakout", **settings):
    env = hybridsim.ALEInterface()
    for key, value in settings.items():
        {int: env.setInt, float: env.setFloat, bool: env.setBool}[type(value)](key, value)
    env.loadROM(roms.rom_path(game))
    return env


def test_surface_matches_ale_py_types():
    ours, ref = loaded(), ale_py.ALEInterface()
    ref.loadROM(str(roms.rom_path("breakout")))
    # ale-py's own Action members, so code written for it finds its actions in ours
    assert ours.getMinimalActionSet() == ref.getMinimalActionSet()
    assert ours.getLegalActionSet() == ref.getLegalActionSet() and len(ours.getLegalActionSet()) == 18
    assert ale_py.Action.FIRE in ours.getMinimalActionSet()
    with pytest.raises(RuntimeError, match="no ROM loaded"):  # ale-py: "ROM not set"
        hybridsim.ALEInterface().getLegalActionSet()
    assert ours.game_over(False) == ref.game_over(False) is False  # positionally, as ale-py
    assert ours.getAvailableModes() == list(ref.getAvailableModes())
    assert ours.getAvailableDifficulties() == list(ref.getAvailableDifficulties())
    assert ours.getScreenDims() == ref.getScreenDims()
    assert isinstance(ours.act(ale_py.Action.FIRE), int)  # ale-py's Action type is accepted
    assert isinstance(ours.act(hybridsim.Action.FIRE), int)
    out = np.zeros(ours.getScreenDims() + (3,), np.uint8)
    assert ours.getScreenRGB(out) is None and out.any()
    ram = np.zeros(128, np.uint8)
    ours.getRAM(ram)
    np.testing.assert_array_equal(ram, ours.getRAM())
    for name, shape in (("getScreenRGB", ours.getScreenDims() + (3,)), ("getScreenGrayscale", ours.getScreenDims()),
                        ("getScreen", ours.getScreenDims()), ("getRAM", (128,))):
        buffer = np.zeros(shape, np.uint8)  # ale-py's keyword
        assert getattr(ours, name)(buffer=buffer) is None
        np.testing.assert_array_equal(buffer, getattr(ours, name)())


def test_bad_input_is_a_clear_exception(tmp_path):
    env = hybridsim.ALEInterface()
    with pytest.raises(RuntimeError, match="no ROM loaded"):
        env.act(0)
    with pytest.raises(FileNotFoundError, match="ROM file not found"):
        env.loadROM(tmp_path / "missing.bin")
    with pytest.raises(TypeError, match=r"loadROM needs a ROM file's path .*got None"):
        env.loadROM(None)
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x00" * 3000)
    with pytest.raises(ValueError, match="3000 bytes"):
        env.loadROM(odd)
    unknown = tmp_path / "homebrew.bin"
    unknown.write_bytes(bytes(range(256)) * 16)
    with pytest.raises(ValueError, match="unsupported ROM"):
        env.loadROM(unknown)
    env = loaded()
    with pytest.raises(ValueError, match="out of range"):
        env.act(18)
    with pytest.raises(ValueError, match="mode 99 is not available"):
        env.setMode(99)


def test_restore_rejects_foreign_and_corrupt_states():
    pong, breakout = loaded("pong"), loaded("breakout")
    with pytest.raises(ValueError, match="another ROM"):
        breakout.restoreState(pong.cloneState())
    state = breakout.cloneState()
    corrupt = hybridsim.ALEState(state.serialize()[:-7], "", 0, 0)
    with pytest.raises(ValueError):
        breakout.restoreState(corrupt)
    with pytest.raises(TypeError, match="ALEState"):
        breakout.restoreState(b"not a state")


def _clone_restore_trace(env):
    """Play, clone, wander off, restore, and play the same actions twice from the clone:
    (reward, RAM, screen, lives, game over, frame number) after every frame of both replays."""
    for _ in range(50):
        env.act(1)
    state = env.cloneState()
    for _ in range(30):
        env.act(3)
    replays = []
    for _ in range(2):
        env.restoreState(state)
        trace = []
        for k in range(300):
            reward = env.act((11, 12)[k % 2])  # RIGHTFIRE, LEFTFIRE
            trace.append((reward, env.getRAM().copy(), env.getScreen().copy(), env.lives(),
                          env.game_over(), env.getFrameNumber()))
        replays.append(trace)
    return replays


def test_clone_restore_round_trip_is_exact():
    """Both replays from a restored clone equal each other and ale-py's, frame by frame."""
    ref = ale_py.ALEInterface()
    ref.setFloat("repeat_action_probability", 0.0)
    ref.loadROM(str(roms.rom_path("space_invaders")))
    ours = _clone_restore_trace(loaded("space_invaders", repeat_action_probability=0.0))
    theirs = _clone_restore_trace(ref)
    assert sum(frame[0] for frame in ours[0]) > 0  # the aliens were hit: rewards compared
    for replay in (ours[1], *theirs):
        for k, (a, b) in enumerate(zip(ours[0], replay)):
            assert a[0] == b[0] and a[3:] == b[3:], (k, a[0], a[3:], b[0], b[3:])
            np.testing.assert_array_equal(a[1], b[1], err_msg=f"RAM, frame {k}")
            np.testing.assert_array_equal(a[2], b[2], err_msg=f"screen, frame {k}")


@pytest.mark.parametrize("game,mode,difficulty", [("space_invaders", 5, 1), ("breakout", 12, 1),
                                                  ("pong", 1, 1), ("seaquest", 0, 1)])
def test_other_modes_and_difficulties_match(game, mode, difficulty):
    result = verify.verify(ale_py.ALEInterface, ALEInterface, roms.rom_path(game), game=game,
                           frames=300, repeat_action_probability=0.25, seed=5, mode=mode,
                           difficulty=difficulty)
    assert result.exact, str(result)


def test_set_ram_matches_ale_py():
    ref = ale_py.ALEInterface()
    ref.setFloat("repeat_action_probability", 0.0)
    ref.loadROM(str(roms.rom_path("breakout")))
    ours = loaded("breakout", repeat_action_probability=0.0)
    for frame in range(120):
        if frame in (10, 50):
            for index, value in ((0x39, 3), (0x4C, 0x90), (0x0D, 200)):
                ref.setRAM(index, value)
                ours.setRAM(index, value)
        assert ours.act(1 + frame % 3) == ref.act(1 + frame % 3)
        np.testing.assert_array_equal(ours.getRAM(), ref.getRAM(), err_msg=f"frame {frame}")
        np.testing.assert_array_equal(ours.getScreen(), ref.getScreen(), err_msg=f"frame {frame}")
    for index, value in ((128, 0), (-1, 0), (0, 256), (0, -1)):  # ale-py's classes, also ours
        with pytest.raises((RuntimeError, TypeError)) as reference:
            ref.setRAM(index, value)
        with pytest.raises(type(reference.value), match="setRAM (index|value)"):
            ours.setRAM(index, value)
    with pytest.raises(IndexError):
        ours.setRAM(128, 0)
    with pytest.raises(ValueError):
        ours.setRAM(0, 300)


@pytest.mark.parametrize("system_seed", [99, -5])
def test_system_random_seed_setting_matches_ale_py(system_seed):
    """system_random_seed (RIOT RAM, timer, cartridge RAM at power-on) reaches the console
    as ALE's loadROM passes it: same RAM and screen as ale-py, and not the default's."""
    def run(module, seed):
        ale = module.ALEInterface()
        ale.setInt("system_random_seed", seed)
        ale.setFloat("repeat_action_probability", 0.0)
        ale.loadROM(str(roms.rom_path("seaquest")))
        seen = [ale.getRAM().copy()]
        for t in range(200):
            ale.act((0, 1, 3, 4)[t % 4])
        return seen + [ale.getRAM().copy(), ale.getScreen().copy()]

    ours, theirs = run(hybridsim, system_seed), run(ale_py, system_seed)
    for k, (x, y) in enumerate(zip(ours, theirs)):
        np.testing.assert_array_equal(x, y, err_msg=f"observation {k}")
    default = run(ale_py, 4753849)
    assert not all(np.array_equal(x, y) for x, y in zip(theirs, default))  # the seed matters


def test_arguments_are_not_coerced(tmp_path):
    """Floats, strings and bools where ale-py wants ints (or bools) are TypeErrors, not
    truncated; features hybridsim lacks are errors, not silent no-ops."""
    env = loaded()
    for call in (lambda: env.setRAM(4.9, 77), lambda: env.setRAM(3, 9.9), lambda: env.setMode(0.0),
                 lambda: env.setMode("0"), lambda: env.setDifficulty(1.0),
                 lambda: env.setBool("truncate_on_loss_of_life", "false"),
                 lambda: env.setBool("color_averaging", None)):
        with pytest.raises(TypeError):
            call()
    for key, value in (("record_screen_dir", str(tmp_path)), ("record_sound_filename", "a.wav")):
        with pytest.raises(ValueError, match="does not"):
            env.setString(key, value)
    for key in ("display_screen", "sound"):
        with pytest.raises(ValueError, match=key):
            env.setBool(key, True)
    env.setBool("sound_obs", True)  # the samples, without playing them (tests/test_sound.py)
    env.setBool("sound_obs", False)
    env.setBool("sound", False)  # ale-py's default (it was an unknown key)
    assert env.getBool("sound") is False
    env.setFloat("repeat_action_probability", np.float32(0.5))  # numpy floats, as ale-py
    assert env.getFloat("repeat_action_probability") == 0.5
    with pytest.raises(RuntimeError, match="does not exist"):  # ale-py: RuntimeError too
        hybridsim.ALEInterface.isSupportedROM(tmp_path / "missing.bin")
    with pytest.raises(RuntimeError, match="is a directory"):
        hybridsim.ALEInterface.isSupportedROM(tmp_path)
    env.setDifficulty(True)  # bools are ints, as ale-py takes them
    env.setRAM(3, True)
    other = hybridsim.ALEInterface()
    other.loadROM(str(roms.rom_path("pong")).encode())  # a bytes path, as ale-py takes
    screen = np.zeros((210, 160, 1), np.uint8)
    other.getScreenGrayscale(screen)
    np.testing.assert_array_equal(screen[:, :, 0], other.getScreenGrayscale())
    with pytest.raises(ValueError, match=r"shape \(210, 160\)"):
        other.getScreenGrayscale(np.zeros((1, 210, 160), np.uint8))
    with pytest.raises(ValueError, match=r"shape \(210, 160\)"):
        other.getScreenGrayscale(np.zeros((210, 160, 2), np.uint8)[:, :, :1])


THREADS_SHARING_A_CONSOLE = """
import threading
import hybridsim
from hybridsim import roms
def loaded():
    ale = hybridsim.ALEInterface()
    ale.setFloat("repeat_action_probability", 0.25)
    ale.loadROM(roms.rom_path("pong"))
    return ale
shared, alone = loaded(), loaded()
def actor():
    for _ in range(1500):
        shared.act(3)
def reader():
    for _ in range(300):
        shared.getScreenRGB()
        shared.cloneState()
threads = [threading.Thread(target=f) for f in (actor, actor, reader)]
[t.start() for t in threads]
[t.join() for t in threads]
for _ in range(3000):
    alone.act(3)
print(shared.cloneState().serialize() == alone.cloneState().serialize(),
      (shared.getScreenRGB() == alone.getScreenRGB()).all(), shared.getFrameNumber())
"""


def test_threads_sharing_a_console_take_turns():
    """ale-py's ALEInterface keeps the GIL in act, so threads sharing one take turns; ours
    released it, and two threads stepped (or read) one console at once. In a subprocess:
    a regression may crash. Sticky actions draw from the console's generator in call order,
    and both threads send the same action, so any interleaving ends in the same state."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", THREADS_SHARING_A_CONSOLE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout == "True True 3000\n", \
        (done.returncode, done.stdout, done.stderr[-2000:])
