"""hybridsim.ALEInterface: a drop-in for ale_py.ALEInterface (ale-py 0.12.1).

Same method names, arguments and return types; `from hybridsim import ALEInterface` in
place of `from ale_py import ALEInterface` changes nothing else. Where ale-py would print
and exit (a missing ROM, an unsupported game) this raises an exception naming the problem.
Settings are read when a ROM is loaded, as in ALE.
"""
from __future__ import annotations

import enum
import functools
import os
import pathlib
import time
import warnings

import numpy as np

from hybridsim import HybridsimWarning, games_table, roms
from hybridsim.actions import NUM_ACTIONS, Action, as_action_id
from hybridsim.settings import Settings

PLAYER_B_NOOP = 18  # ALE's id of player B's NOOP


@functools.cache
def _action_members() -> tuple:
    """ale_py.Action's members by id (a plain Enum, unequal to ints and to hybridsim.Action's),
    as ale-py's action sets hold, so code written for ale-py finds ale_py.Action.FIRE in
    ours; without ale-py (ROMs from $ALE_ROMS_DIR), hybridsim.Action's."""
    try:
        from ale_py import Action as members
    except ImportError:
        members = Action
    return tuple(members(a) for a in range(NUM_ACTIONS))


class LoggerMode(enum.Enum):
    """Mirrors ale_py.LoggerMode (a plain enum, as ale-py's is not an int)."""

    Info = 0
    Warning = 1
    Error = 2


class ALEState:
    """An opaque emulator snapshot, like ale_py.ALEState (serialize() gives bytes)."""

    def __init__(self, data: bytes = b"", rom_md5: str = "", frame_number: int | None = None,
                 episode_frame_number: int | None = None, mode: int | None = None,
                 difficulty: int | None = None):
        if not isinstance(data, (bytes, bytearray, memoryview)):  # bytes(5): five zero bytes
            raise TypeError(f"ALEState needs serialized state bytes, got {type(data).__name__}")
        self._data = bytes(data)
        self._rom_md5 = rom_md5
        # ALEState(serialized bytes), as ale-py's, reads the numbers from the bytes
        held = (frame_number, episode_frame_number, mode, difficulty)
        if None in held:
            from hybridsim._console import state_summary
            # bytes that are no state: None, which the getters refuse (ale-py's raise SystemError)
            summary = state_summary(self._data) or (None if self._data else 0,) * 4
            held = tuple(summary[k] if v is None else v for k, v in enumerate(held))
        self._frame_number, self._episode_frame_number, self._mode, self._difficulty = held

    def _held(self, value):
        if value is None:
            raise ValueError(f"this ALEState's {len(self._data)} bytes are not a serialized "
                             f"hybridsim state")
        return value

    def serialize(self) -> bytes:
        return self._data

    def getFrameNumber(self) -> int:
        return self._held(self._frame_number)

    def getEpisodeFrameNumber(self) -> int:
        return self._held(self._episode_frame_number)

    def getCurrentMode(self) -> int:
        """The game mode when the state was cloned."""
        return self._held(self._mode)

    def getDifficulty(self) -> int:
        """The difficulty when the state was cloned."""
        return self._held(self._difficulty)

    def equals(self, other: "ALEState") -> bool:
        return isinstance(other, ALEState) and self._data == other._data

    __eq__ = equals

    def __hash__(self):  # equal states hash alike; ale-py's states hash too
        return hash(self._data)


def _png_bytes(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of an (H, W, 3) array (PNG spec: signature, IHDR, IDAT, IEND)."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    h, w, _ = rgb.shape
    rows = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))  # filter type 0 per row
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8 bits, truecolour
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def _output_view(buffer):
    """An output argument as the core's checks see it. ale-py fills any writable uint8
    buffer it can view as an array: numpy arrays, buffer-protocol objects (bytearray,
    memoryview, array('B')) and DLPack tensors in host memory (a CPU torch.uint8 tensor).
    Those become a view of their memory, whose dtype, shape and writability the core then
    checks; anything else goes on to the core, which refuses it by name."""
    if buffer is None or isinstance(buffer, np.ndarray):
        return buffer
    if hasattr(buffer, "__dlpack__"):
        try:
            return np.from_dlpack(buffer)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:  # a GPU tensor, say
            from hybridsim._console import OutputTypeError
            raise OutputTypeError(f"out must be a writable uint8 array in host memory; this "
                                  f"{type(buffer).__name__} cannot be viewed as one ({exc})") from exc
    try:
        return np.asarray(memoryview(buffer))
    except (TypeError, ValueError):  # no buffer, or a released memoryview: the core names it
        return buffer


class RamIndexError(IndexError, RuntimeError, TypeError):
    """setRAM's index outside 0..127 (ale-py raises RuntimeError above it, and its binding
    a TypeError below 0: each catches it)."""


class RamValueError(ValueError, TypeError):
    """setRAM's value outside 0..255 (ale-py's binding refuses it as a TypeError)."""


class UnavailableSettingError(ValueError, RuntimeError):
    """A mode or difficulty the game does not have. A ValueError, and a RuntimeError as
    ale-py's ("Invalid game mode requested"), so code written for either catches it."""


def _require_int(what: str, value) -> None:
    """ale-py's integer arguments refuse floats and strings (no truncation); bools pass, as
    in ale-py (they are ints)."""
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {value!r}")


def _game_id(name: str) -> int:
    from hybridsim import _console
    ids = getattr(_console, "GAME_IDS", {})
    if name in ids:
        return ids[name]
    from hybridsim import _games
    return _games.game_id(name)


class ALEInterface:
    def __init__(self):
        self._settings = Settings()
        self._emu = None
        self._entry = None
        self._md5 = ""
        self._rom = b""
        self._mode = None
        self._difficulty = None
        self._warn_on_other_image = True  # AtariVectorEnv says it once, in its own words

    # ----- settings ------------------------------------------------------------------
    @staticmethod
    def setLoggerMode(mode: LoggerMode) -> None:
        """Accepted for compatibility (hybridsim reports problems as exceptions); a mode
        that is neither a LoggerMode nor its number is refused, as ale-py refuses it."""
        kind = type(mode)
        if kind is LoggerMode or (kind.__name__ == "LoggerMode" and kind.__module__.startswith("ale_py")):
            return
        if isinstance(mode, int) and mode in {m.value for m in LoggerMode}:  # ale-py: no numpy ints
            return
        raise TypeError(f"setLoggerMode takes a LoggerMode (hybridsim.LoggerMode or "
                        f"ale_py.LoggerMode) or its number 0-2, got {kind.__name__} {mode!r}")

    def getInt(self, key: str) -> int:
        return self._settings.get(key, int)

    def setInt(self, key: str, value: int) -> None:
        self._settings.set(key, value, int)

    def getFloat(self, key: str) -> float:
        return self._settings.get(key, float)

    def setFloat(self, key: str, value: float) -> None:
        self._settings.set(key, value, float)

    def getBool(self, key: str) -> bool:
        return self._settings.get(key, bool)

    def setBool(self, key: str, value: bool) -> None:
        self._settings.set(key, value, bool)

    def getString(self, key: str) -> str:
        return self._settings.get(key, str)

    def setString(self, key: str, value: str) -> None:
        self._settings.set(key, value, str)

    # ----- loading -------------------------------------------------------------------
    @staticmethod
    def isSupportedROM(rom) -> str | None:
        """The game of a ROM file ale-py ships (by its md5, as ale-py: a renamed copy is
        known, a modified image under a game's name is not), or None."""
        path = pathlib.Path(os.fsdecode(roms.check_rom_path(rom)))
        if not path.is_file():  # ale-py raises RuntimeError for these too
            what = ("is a directory, not a ROM file" if path.is_dir() else
                    "is not a regular file" if path.exists() else "does not exist")
            raise RuntimeError(f"isSupportedROM: {path} {what}")
        try:
            data = roms.read_rom(path)
        except (OSError, ValueError):
            return None
        entry = games_table.by_md5(roms.md5_hex(data))
        return None if entry is None else entry["name"]

    def loadROM(self, rom) -> None:
        if not isinstance(rom, (str, bytes, os.PathLike)):
            raise TypeError(f"loadROM needs a ROM file's path (str, bytes or os.PathLike), got {rom!r}")
        path = pathlib.Path(os.fsdecode(roms.check_rom_path(rom)))  # str, bytes or os.PathLike, as ale-py
        self._load_identified(path, *games_table.identify_rom(path))

    def _load_identified(self, path: pathlib.Path, entry: dict, data: bytes, md5: str) -> None:
        """loadROM of a file already read and identified (games_table.identify_rom): the
        vector env loads one image many times, reading the file once."""
        from hybridsim import _console
        from hybridsim.console_props import emulator_kwargs
        seed = self._settings.get("random_seed", int)
        if seed == -1:  # ALE: -1 seeds the environment RNG from the clock
            seed = int(time.time() * 1000) & 0x7FFFFFFF
        seed &= 0xFFFFFFFF  # other negative seeds: ALE seeds its mt19937 with (uint32_t)seed
        image, kwargs = emulator_kwargs(entry, data, md5=md5)
        s = self._settings
        for key, value in entry.get("settings", {}).items():  # ALE's modifyEnvironmentSettings
            s.set(key, value, int)
        self._emu = _console.Emulator(
            image, _game_id(entry["name"]), random_seed=seed,
            frame_skip=s.get("frame_skip", int),
            repeat_action_probability=s.get("repeat_action_probability", float),
            max_num_frames_per_episode=s.get("max_num_frames_per_episode", int),
            reward_min=s.get("reward_min", int), reward_max=s.get("reward_max", int),
            truncate_on_loss_of_life=s.get("truncate_on_loss_of_life", bool),
            color_averaging=s.get("color_averaging", bool),
            paddle_min=s.get("paddle_min", int), paddle_max=s.get("paddle_max", int),
            system_random_seed=s.get("system_random_seed", int) & 0xFFFFFFFF,
            sound=s.get("sound_obs", bool), **kwargs)  # ALE reads sound_obs at loadROM only
        if md5 != entry["md5"] and self._warn_on_other_image:  # ale-py prints a warning too
            warnings.warn(f"{games_table.rom_mismatch(entry['name'], path, md5)}; played as ALE does: by "
                          f"its file name, with Stella's default cartridge properties",
                          HybridsimWarning, stacklevel=3)  # loadROM's caller
        self._entry, self._md5, self._rom = entry, md5, data
        self._settings.set("rom_file", str(path), str)
        self._mode = entry.get("default_mode", 0)
        self._difficulty = entry.get("default_difficulty", 0)

    def _require_rom(self):
        if self._emu is None:
            raise RuntimeError("no ROM loaded: call loadROM(path) first")
        return self._emu

    # ----- playing -------------------------------------------------------------------
    # act and game_over run once per frame: a plain int in range skips the conversion, and
    # the loaded-ROM test is inline (the wrappers cost about 2% of a seaquest frame before).
    def act(self, action, paddle_strength: float = 1.0) -> int:
        emu = self._emu
        if emu is None:
            emu = self._require_rom()  # raises
        if type(action) is not int or not 0 <= action < NUM_ACTIONS:
            action = as_action_id(action)  # Action, ale_py.Action, numpy ints; range errors
        if type(paddle_strength) is not float and not isinstance(paddle_strength, (int, float, np.number)):
            raise TypeError(f"act: paddle_strength must be a number, got {paddle_strength!r}")  # as ale-py's
        if paddle_strength != paddle_strength:  # ale-py casts NaN to int (undefined); the vector env refuses it too
            raise ValueError("act: paddle_strength is NaN; pass a number (a huge or infinite one "
                             "saturates: the paddle goes to its end)")
        return emu.act(action, PLAYER_B_NOOP, paddle_strength, 0.0)

    def game_over(self, with_truncation: bool = True) -> bool:  # ale-py takes it positionally too
        emu = self._emu
        if emu is None:
            emu = self._require_rom()  # raises
        # None and "no" were read as bools (identity tests first: this runs every step)
        if with_truncation is not True and with_truncation is not False \
                and not isinstance(with_truncation, np.bool_):
            raise TypeError(f"game_over: with_truncation must be a bool, got {with_truncation!r}")
        return emu.game_over(with_truncation)

    def game_truncated(self) -> bool:
        emu = self._require_rom()
        return bool(emu.game_over(True)) and not bool(emu.game_over(False))

    def reset_game(self) -> None:
        self._require_rom().reset_game()

    def lives(self) -> int:
        return int(self._require_rom().lives())

    def getFrameNumber(self) -> int:
        return int(self._require_rom().frame_number())

    def getEpisodeFrameNumber(self) -> int:
        return int(self._require_rom().episode_frame_number())

    # ----- actions, modes, difficulties -----------------------------------------------
    def getMinimalActionSet(self) -> list:  # of ale_py.Action, as ale-py's (_action_members)
        self._require_rom()
        return [_action_members()[a] for a in self._entry["minimal_actions"]]

    def getLegalActionSet(self) -> list:
        # ALE's legal set after loadROM: all 18 unless the game refuses some (Lost Luggage).
        self._require_rom()
        legal = self._entry.get("legal_actions")
        return [_action_members()[a] for a in (range(NUM_ACTIONS) if legal is None else legal)]

    def getAvailableModes(self) -> list[int]:
        self._require_rom()
        return list(self._entry["modes"])

    def getAvailableDifficulties(self) -> list[int]:
        self._require_rom()
        return list(self._entry["difficulties"])

    def setMode(self, mode: int) -> None:
        """Select a game mode; as in ALE it takes effect at the next reset_game."""
        self._require_rom()
        _require_int("setMode", mode)
        if mode not in self._entry["modes"]:
            raise UnavailableSettingError(f"mode {mode} is not available for {self._entry['name']}: "
                             f"choose one of {self._entry['modes']}")
        self._apply_mode(mode)

    def _apply_mode(self, mode: int) -> None:
        from hybridsim.console_props import mode_select_for
        self._emu.set_mode(mode, mode_select_for(self._entry.get("set_mode"), mode))
        self._mode = mode

    def setDifficulty(self, difficulty: int) -> None:
        emu = self._require_rom()
        _require_int("setDifficulty", difficulty)
        if difficulty not in self._entry["difficulties"]:
            raise UnavailableSettingError(f"difficulty {difficulty} is not available for {self._entry['name']}: "
                             f"choose one of {self._entry['difficulties']}")
        emu.set_difficulty(difficulty)
        self._difficulty = difficulty

    # ----- observations --------------------------------------------------------------
    def getRAMSize(self) -> int:
        return 128

    def getRAM(self, buffer: np.ndarray | None = None):
        ram = self._require_rom().get_ram(_output_view(buffer))
        return None if buffer is not None else ram

    def setRAM(self, index: int, value: int) -> None:
        emu = self._require_rom()
        _require_int("setRAM index", index)
        _require_int("setRAM value", value)
        if not 0 <= index < 128:
            raise RamIndexError(f"setRAM index {index} out of range 0..127")
        if not 0 <= value <= 255:
            raise RamValueError(f"setRAM value {value} out of range 0..255")
        emu.set_ram(index, value)

    def getScreenDims(self) -> tuple:
        return tuple(self._require_rom().screen_shape)

    def getScreen(self, buffer: np.ndarray | None = None):
        screen = self._require_rom().get_screen(_output_view(buffer))
        return None if buffer is not None else screen

    def getScreenRGB(self, buffer: np.ndarray | None = None):
        screen = self._require_rom().get_screen_rgb(_output_view(buffer))
        return None if buffer is not None else screen

    def getScreenGrayscale(self, buffer: np.ndarray | None = None):
        # (H, W, 1), the shape of a gymnasium grayscale observation, is filled too (ale-py
        # 0.12.1 refuses it: "Expected a numpy array with two dimensions")
        out = _output_view(buffer)
        if isinstance(out, np.ndarray) and out.ndim == 3 and out.shape[2] == 1:
            self._require_rom().get_screen_grayscale(out[:, :, 0])  # a view: never a copy
            return None
        screen = self._require_rom().get_screen_grayscale(out)
        return None if buffer is not None else screen

    def saveScreenPNG(self, filename) -> None:
        """Write the current screen as an RGB PNG, each pixel doubled in width (320 wide, as
        ale-py writes it: the 2600's pixels are about twice as wide as tall)."""
        rgb = np.ascontiguousarray(np.repeat(self.getScreenRGB(), 2, axis=1), dtype=np.uint8)
        pathlib.Path(filename).write_bytes(_png_bytes(rgb))

    def getAudio(self, buffer: np.ndarray | None = None):
        """The 512 sound samples of the last act (uint8, 128 is silence), as ALE's sound
        observation makes them: with sound_obs set before loadROM; zeros otherwise, and
        before the first act. Into `buffer` (uint8, 512) if given."""
        audio = self._require_rom().get_audio(_output_view(buffer))
        return None if buffer is not None else audio

    def getAudioSize(self) -> int:
        from hybridsim import _console
        self._require_rom()
        return _console.SOUND_SAMPLES_PER_ACT

    # ----- states --------------------------------------------------------------------
    def cloneState(self, include_rng: bool = False) -> ALEState:  # ale-py takes it positionally too
        emu = self._require_rom()
        if not isinstance(include_rng, (bool, np.bool_)):  # "x" and 2 were taken as True
            raise TypeError(f"cloneState: include_rng must be a bool, got {include_rng!r}")
        return ALEState(emu.clone_state(include_rng), self._md5, self.getFrameNumber(),
                        self.getEpisodeFrameNumber(), int(self._mode), int(self._difficulty))

    def cloneSystemState(self) -> ALEState:
        return self.cloneState(include_rng=True)

    def __reduce_ex__(self, protocol):
        # The emulator lives in a C extension object; its state travels as cloneState() bytes.
        raise TypeError("cannot pickle hybridsim.ale.ALEInterface: save "
                        "cloneState().serialize() and restore it with restoreState(ALEState(...)) instead")

    def restoreState(self, state) -> None:
        emu = self._require_rom()
        if not isinstance(state, ALEState):
            kind = f"{type(state).__module__}.{type(state).__qualname__}"
            why = (" (ale-py's states hold its own emulator's layout; clone one with this interface's "
                   "cloneState)" if kind.startswith("ale_py") else "")
            raise TypeError(f"restoreState takes a hybridsim.ALEState, got {kind}{why}")
        if state._rom_md5 and state._rom_md5 != self._md5:
            raise ValueError("restoreState: this state was cloned from another ROM "
                             f"(md5 {state._rom_md5}, loaded {self._md5})")
        mode, difficulty = state._mode, state._difficulty  # None for bytes that are no state
        # a game's default need not be among its selectable ones (backgammon: difficulty 0,
        # selectable 3)
        modes = {*self._entry["modes"], self._entry.get("default_mode", 0)}
        difficulties = {*self._entry["difficulties"], self._entry.get("default_difficulty", 0)}
        if mode not in modes or difficulty not in difficulties:
            # bytes of another game or of none: the emulator's own check names that first
            current = emu.clone_state(True)
            emu.restore_state(state.serialize())
            emu.restore_state(current)
            raise UnavailableSettingError(f"restoreState: its state fields mode and difficulty hold {mode} "
                                          f"and {difficulty}, which {self._entry['name']} does not have")
        emu.restore_state(state.serialize())
        # as ALE's: the state brings back its mode (the next reset_game plays it) and its
        # difficulty switches (from the next frame)
        if mode != self._mode:
            self._apply_mode(mode)
        if difficulty != self._difficulty:
            emu.set_difficulty(difficulty)
            self._difficulty = difficulty

    def restoreSystemState(self, state) -> None:
        self.restoreState(state)
