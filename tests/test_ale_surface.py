"""The parts of the ale_py-compatible surface that need no emulation: actions, settings, ROMs."""
import array
import os

import numpy as np
import pytest

import hybridsim
from hybridsim import roms
from hybridsim.actions import Action, as_action_id
from hybridsim.settings import ALE_SETTINGS, Settings

ale_py = pytest.importorskip("ale_py")


def test_action_enum_mirrors_ale_py():
    assert {a.name: a.value for a in Action} == {
        name: value.value for name, value in ale_py.Action.__members__.items()}
    assert as_action_id(ale_py.Action.UPFIRE) == 10
    with pytest.raises(ValueError, match="out of range"):
        as_action_id(18)
    with pytest.raises(TypeError, match="an Action or an int"):
        as_action_id("fire")


def test_top_level_names_stand_in_for_ale_py_s():
    import hybridsim
    # ale-py's public names but SDL_SUPPORT, AtariEnvStepMetadata and ALEVectorInterface
    # (no display, and the vector environment is AtariVectorEnv), loaded on first use
    missing = {"SDL_SUPPORT", "AtariEnvStepMetadata", "ALEVectorInterface"}
    for name in set(ale_py.__all__) - missing:
        assert name in hybridsim.__all__ and name in dir(hybridsim), name
        assert getattr(hybridsim, name).__name__ == getattr(ale_py, name).__name__, name
    assert issubclass(hybridsim.AtariEnv, ale_py.AtariEnv)
    with pytest.raises(AttributeError, match="no attribute 'AtariEnvs'"):
        hybridsim.AtariEnvs


def test_setting_defaults_match_ale_py():
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    reference = ale_py.ALEInterface()
    getters = {int: reference.getInt, float: reference.getFloat, bool: reference.getBool,
               str: reference.getString}
    ours = Settings()
    for key, (kind, _) in ALE_SETTINGS.items():
        assert ours.get(key, kind) == pytest.approx(getters[kind](key)), key


def test_settings_reject_unknown_keys_and_wrong_types():
    s = Settings()
    with pytest.raises(KeyError, match="unknown setting 'frameskip'"):
        s.get("frameskip", int)
    with pytest.raises(TypeError, match="is a float"):
        s.set("repeat_action_probability", 1, int)
    with pytest.raises(TypeError, match="takes an int"):
        s.set("frame_skip", "4", int)
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        s.set("frame_skip", 0, int)
    s.set("frame_skip", 4, int)
    assert s.get("frame_skip", int) == 4


def test_cross_type_reads_bool_ints_logger_modes_and_action_names_follow_ale_py():
    """Side by side with ale-py: getString reads any key as ALE's text, getFloat an int key;
    setInt takes a bool, setBool refuses 1; setLoggerMode refuses a str, takes 2; str(Action)
    names the member; states hash. getInt of a float key stays refused (ale-py gives 0)."""
    import hybridsim
    from hybridsim.ale import ALEInterface, ALEState, LoggerMode
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ours, theirs = ALEInterface(), ale_py.ALEInterface()
    for a in (ours, theirs):
        a.setInt("frame_skip", True)
        a.setBool("color_averaging", True)
        a.setFloat("repeat_action_probability", 1 / 3)
    for key in ALE_SETTINGS:
        assert ours.getString(key) == theirs.getString(key), key
    for key, (kind, _) in ALE_SETTINGS.items():
        if kind is int:  # ALE reads them through a float32: reward_max's 2**31 - 1 as 2**31
            assert ours.getFloat(key) == theirs.getFloat(key), key
    for a in (ours, theirs):
        a.setInt("paddle_max", 2**24 + 1)
    assert ours.getFloat("paddle_max") == theirs.getFloat("paddle_max") == 2**24
    for a in (ours, theirs):
        with pytest.raises(TypeError):
            a.setBool("color_averaging", 1)
        for mode in ("x", np.int64(2)):
            with pytest.raises(TypeError):
                type(a).setLoggerMode(mode)
        type(a).setLoggerMode(2)
    with pytest.raises(TypeError, match="is a float, not a int"):
        ours.getInt("repeat_action_probability")
    ours.setLoggerMode(LoggerMode.Warning)
    ours.setLoggerMode(ale_py.LoggerMode.Error)
    assert hybridsim.LoggerMode is LoggerMode
    assert [m.name for m in LoggerMode] == list(ale_py.LoggerMode.__members__)
    assert str(Action.DOWNLEFTFIRE) == str(ale_py.Action.DOWNLEFTFIRE) == "Action.DOWNLEFTFIRE"
    assert int(Action.FIRE) == 1
    assert ALEState().getFrameNumber() == ale_py.ALEState().getFrameNumber() == 0
    assert len({ALEState(b"ab"), ALEState(b"ab"), ALEState(b"cd")}) == 2


def test_rom_lookup_and_errors(tmp_path):
    path = roms.rom_path("SpaceInvaders")
    assert path.name == "space_invaders.bin"
    assert len(roms.read_rom(path)) == 4096
    with pytest.raises(FileNotFoundError, match="no ROM for game 'not_a_game'; looked for"):
        roms.rom_path("not_a_game")
    with pytest.raises(FileNotFoundError, match=r"no ROM for game 'SpaceInvader' \(did you mean "
                                                r"'space_invaders'\?\); looked for .*space_invader.bin"):
        roms.rom_path("SpaceInvader")
    from hybridsim import games_table
    with pytest.raises(ValueError, match=r"unknown game 'breakot' \(did you mean 'breakout'\?\); supported: "):
        games_table.by_name("breakot")
    with pytest.raises(FileNotFoundError, match="ROM file not found"):
        roms.read_rom(tmp_path / "missing.bin")
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\0" * 1000)
    with pytest.raises(ValueError, match="1000 bytes is not a 2600 cartridge size"):
        roms.read_rom(odd)
    with pytest.raises(IsADirectoryError):
        roms.read_rom(tmp_path)
    # "" was read as "." (a directory), /dev/null and a FIFO as directories, a NUL as missing
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    for path, message in (("", "the path is empty"), (b"", "the path is empty"),
                          ("/dev/null", "not a regular file"), (fifo, "not a regular file"),
                          (f"{tmp_path}/x\0y.bin", "contains a NUL")):
        with pytest.raises(ValueError, match=message):
            roms.read_rom(path)
        with pytest.raises(ValueError, match=message):
            hybridsim.ALEInterface().loadROM(path)
    with pytest.raises(ValueError, match="the path is empty"):
        hybridsim.ALEInterface.isSupportedROM("")
    with pytest.raises(RuntimeError, match="fifo.bin is not a regular file"):  # said "does not exist"
        hybridsim.ALEInterface.isSupportedROM(fifo)


def test_the_rest_of_ale_py_surface(tmp_path):
    """saveScreenPNG writes the screen ale-py's writes; a state reports the mode and
    difficulty it was cloned in, as ale-py's; without sound_obs the audio is ale-py's zeros
    (with it: tests/test_sound.py)."""
    import numpy as np
    from PIL import Image

    import hybridsim
    ale_py = pytest.importorskip("ale_py")
    ours, theirs = hybridsim.ALEInterface(), ale_py.ALEInterface()
    theirs.setLoggerMode(ale_py.LoggerMode.Error)
    path = roms.rom_path("space_invaders")
    for ale in (ours, theirs):
        ale.loadROM(str(path))
        ale.setMode(ale.getAvailableModes()[3])
        ale.setDifficulty(1)
        ale.reset_game()
        for _ in range(90):
            ale.act(ale.getMinimalActionSet()[1])
    ours.saveScreenPNG(str(tmp_path / "ours.png"))
    theirs.saveScreenPNG(str(tmp_path / "theirs.png"))
    mine, ref = (np.asarray(Image.open(tmp_path / f"{n}.png").convert("RGB")) for n in ("ours", "theirs"))
    assert mine.shape == ref.shape == (210, 320, 3) and np.array_equal(mine, ref)
    a, b = ours.cloneState(), theirs.cloneState()
    assert (a.getCurrentMode(), a.getDifficulty()) == (b.getCurrentMode(), b.getDifficulty()) == (
        theirs.getAvailableModes()[3], 1)
    assert ours.getAudioSize() == theirs.getAudioSize() == 512
    assert np.array_equal(ours.getAudio(), theirs.getAudio()) and not ours.getAudio().any()


def test_misuse_ale_py_answers_with_runtime_error_is_one_here_too():
    """ale-py raises RuntimeError for an unknown key, a get/set of the wrong type, and a mode
    or difficulty the game lacks; ours are KeyError/TypeError/ValueError with clearer text,
    and RuntimeErrors too, so code written for ale-py still catches them."""
    import ale_py
    from hybridsim.ale import ALEInterface
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    calls = [lambda a: a.setInt("nonexistent_key", 3),
             lambda a: a.setInt("repeat_action_probability", 1),
             lambda a: a.setBool("frame_skip", True),
             lambda a: a.setMode(99), lambda a: a.setDifficulty(7)]
    for call in calls:
        for cls in (ale_py.ALEInterface, ALEInterface):
            a = cls()
            a.loadROM(str(roms.rom_path("pong")))
            with pytest.raises(RuntimeError):
                call(a)
    a = ALEInterface()
    with pytest.raises(RuntimeError, match="'rom_file' is a str, not a int: use getString/setString"):
        a.getInt("rom_file")  # the methods' names, not getStr/setStr
    with pytest.raises(RuntimeError, match="is a float, not a int: use getFloat/setFloat"):
        a.setInt("repeat_action_probability", 1)


def test_argument_types_are_named_where_the_extension_spoke_cython():
    """cloneState("x") was taken as True (ale-py refuses it); act's strength "x" failed in
    the extension without its name; getRAM(out) gave Cython buffer messages; a read-only
    out, "buffer source array is read-only"; ALEState(5) made five zero bytes (ale-py
    refuses it, and ALEState(2**40) asked for a terabyte)."""
    from hybridsim.ale import ALEInterface, ALEState
    a = ALEInterface()
    a.loadROM(str(roms.rom_path("pong")))
    for flag in ("x", 2, None):
        with pytest.raises(TypeError, match="include_rng must be a bool"):
            a.cloneState(flag)
    for strength in ("x", None, [1.0]):
        with pytest.raises(TypeError, match="paddle_strength must be a number"):
            a.act(3, strength)
    assert a.act(3, True) == a.act(3, np.float32(0.5)) == 0  # numbers, as ale-py takes them
    for nan in (float("nan"), np.float32("nan")):
        with pytest.raises(ValueError, match="paddle_strength is NaN"):
            a.act(3, nan)
    read_only = np.zeros(128, np.uint8)
    read_only.flags.writeable = False
    for out in (np.zeros((2, 64), np.uint8), np.zeros(128, np.int64), [0] * 128, np.zeros(256, np.uint8)[::2]):
        with pytest.raises(ValueError, match=r"out must be a C-contiguous uint8 array of shape \(128,\)"):
            a.getRAM(out)
    with pytest.raises(ValueError, match="out must be a writable array"):
        a.getRAM(read_only)
    screen = np.zeros((210, 160), np.uint8)
    screen.flags.writeable = False
    with pytest.raises(ValueError, match="out must be a writable array"):
        a.getScreen(screen)
    out = np.zeros(128, np.uint8)
    a.getRAM(out)
    assert np.array_equal(out, a.getRAM())
    for data in (5, 2**40, None):
        with pytest.raises(TypeError, match="ALEState needs serialized state bytes"):
            ALEState(data)
    # bytes that are no state reported frame 0, mode 0 (ale-py's getters raise)
    assert ALEState().getFrameNumber() == 0
    garbage = ALEState(bytes(range(256)) * 4)
    for getter in (garbage.getFrameNumber, garbage.getEpisodeFrameNumber,
                   garbage.getCurrentMode, garbage.getDifficulty):
        with pytest.raises(ValueError, match="1024 bytes are not a serialized hybridsim state"):
            getter()
    a.act(0)
    assert ALEState(a.cloneState().serialize()).getFrameNumber() == a.getFrameNumber()
    for flag in (None, 0, [], "False", "no"):  # were read as bools; ale-py refuses them
        with pytest.raises(TypeError, match="with_truncation must be a bool"):
            a.game_over(flag)
    assert a.game_over(np.bool_(False)) is False and a.game_over(False) is False


def test_a_wrong_output_array_raises_what_ale_py_raises_too():
    """ale-py answers a wrong shape with RuntimeError and a wrong type, dtype, layout or a
    read-only array with TypeError; hybridsim's errors are those classes and ValueError."""
    from hybridsim.ale import ALEInterface
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    path = str(roms.rom_path("pong"))
    ours, theirs = ALEInterface(), ale_py.ALEInterface()
    ours.loadROM(path)
    theirs.loadROM(path)
    read_only, read_only_small = np.zeros((210, 160, 3), np.uint8), np.zeros((10, 10, 3), np.uint8)
    read_only.flags.writeable = read_only_small.flags.writeable = False
    cases = [("getScreenRGB", np.zeros((10, 10, 3), np.uint8)), ("getScreenGrayscale", np.zeros((210, 10), np.uint8)),
             ("getScreenRGB", np.zeros((210, 160, 3), np.float32)), ("getRAM", [0] * 128),
             ("getRAM", np.zeros(256, np.uint8)[::2]), ("getScreenRGB", read_only),
             ("getRAM", np.zeros(127, np.uint8)), ("getRAM", np.zeros((128, 1), np.uint8)),
             ("getScreenRGB", read_only_small), ("getRAM", bytes(128)), ("getRAM", bytearray(64)),
             ("getRAM", array.array("b", bytes(128))), ("getRAM", memoryview(bytearray(512)).cast("i")),
             ("getRAM", memoryview(bytearray(128)))]
    cases[-1][1].release()  # a released view: a plain ValueError before
    for method, out in cases:
        with pytest.raises((RuntimeError, TypeError)) as reference:
            getattr(theirs, method)(out)
        with pytest.raises(type(reference.value), match="out must be a") as raised:
            getattr(ours, method)(out)
        assert isinstance(raised.value, ValueError), (method, raised.value)
    for ale in (ours, theirs):  # a writable 128-byte uint8 buffer is filled, as an array is
        for _ in range(60):
            ale.act(0)
    for make in (bytearray, lambda n: memoryview(bytearray(n)), lambda n: array.array("B", bytes(n))):
        filled = [make(128), make(128)]
        assert ours.getRAM(filled[0]) is None and theirs.getRAM(filled[1]) is None
        assert bytes(filled[0]) == bytes(filled[1]) == ours.getRAM().tobytes() and any(filled[0])
    with pytest.raises(TypeError, match="got ale_py.*ALEState .ale-py's states hold its own"):
        ours.restoreState(theirs.cloneState())


def test_rom_lookups_answer_as_ale_pys_do():
    """`import hybridsim as ale_py` code calls roms.get_rom_path and roms.get_all_rom_ids."""
    import hybridsim
    ids = hybridsim.roms.get_all_rom_ids()
    assert ids == ale_py.roms.get_all_rom_ids() and "pong" in ids
    assert [hybridsim.roms.get_rom_path(i) for i in ids] == [ale_py.roms.get_rom_path(i) for i in ids]
    with pytest.warns(UserWarning, match="Rom SpaceInvaders not supported"):
        assert hybridsim.roms.get_rom_path("SpaceInvaders") is None


def test_cpu_tensors_are_filled_as_ale_py_fills_them():
    """ale-py takes a CPU torch.uint8 tensor as the output of getRAM and the screens (through
    DLPack) and refuses a wrong dtype, shape or layout; hybridsim refused every tensor."""
    torch = pytest.importorskip("torch")
    from hybridsim.ale import ALEInterface
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    path = str(roms.rom_path("pong"))
    ours, theirs = ALEInterface(), ale_py.ALEInterface()
    for ale in (ours, theirs):
        ale.loadROM(path)
        for _ in range(60):
            ale.act(0)
    u8 = dict(dtype=torch.uint8)
    filled = [("getRAM", (128,)), ("getScreen", (210, 160)), ("getScreenRGB", (210, 160, 3)),
              ("getScreenGrayscale", (210, 160))]
    for method, shape in filled:
        mine, reference = torch.zeros(shape, **u8), torch.zeros(shape, **u8)
        assert getattr(ours, method)(mine) is None and getattr(theirs, method)(reference) is None
        assert torch.equal(mine, reference) and mine.any(), method
    refused = [("getRAM", torch.zeros(128, dtype=torch.float32)), ("getRAM", torch.zeros(127, **u8)),
               ("getScreen", torch.zeros(210, 80, **u8)), ("getScreen", torch.zeros(210, 320, **u8)[:, ::2])]
    for method, out in refused:
        with pytest.raises((RuntimeError, TypeError)) as reference:
            getattr(theirs, method)(out)
        with pytest.raises(type(reference.value), match="out must be a"):
            getattr(ours, method)(out)
