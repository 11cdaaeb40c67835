"""ALE's settings (names, types, defaults) as ale-py 0.12.1 exposes them."""
from __future__ import annotations

import numpy as np

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1

# name -> (type, default). Read from a fresh ale_py.ALEInterface; tests/test_ale_surface.py
# checks every default against ale-py.
ALE_SETTINGS: dict[str, tuple[type, object]] = {
    "random_seed": (int, -1),
    "frame_skip": (int, 1),
    "max_num_frames_per_episode": (int, 0),
    "max_num_frames": (int, 0),
    "system_random_seed": (int, 4753849),
    "reward_min": (int, INT32_MIN),
    "reward_max": (int, INT32_MAX),
    "paddle_min": (int, -1),
    "paddle_max": (int, -1),
    "fragsize": (int, 64),
    "repeat_action_probability": (float, 0.25),
    "color_averaging": (bool, False),
    "truncate_on_loss_of_life": (bool, False),
    "display_screen": (bool, False),
    "sound_obs": (bool, False),
    "sound": (bool, False),
    "run_length_encoding": (bool, True),
    "restricted_action_set": (bool, False),
    "send_rgb": (bool, False),
    "rom_file": (str, ""),
    "record_screen_dir": (str, ""),
    "record_sound_filename": (str, ""),
    "cpu": (str, "low"),
}

# ALE registers "sound" with the text "false", so getString shows that until it is set.
DEFAULT_TEXT = {"sound": "false"}

# ALE features hybridsim does not have: setting them is an error rather than a no-op.
UNSUPPORTED = {
    "display_screen": "hybridsim has no display window; draw getScreenRGB() frames yourself",
    "sound": "hybridsim does not play sound; read the samples with sound_obs and getAudio()",
    "record_screen_dir": "hybridsim does not record screens; save getScreenRGB() frames yourself",
    "record_sound_filename": "hybridsim does not record sound; save getAudio() samples yourself",
}


def setting_text(value) -> str:
    """A setting as ALE's getString shows it: bools as 1/0, floats as C++ streams print
    them (six significant digits: 0.25, 0.333333)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class UnknownSettingError(KeyError, RuntimeError):
    """A key ALE does not have: a KeyError, and a RuntimeError as ale-py's ("The key ... does
    not exist or has incorrect value type"), so code written for either catches it."""

    def __str__(self):  # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class SettingTypeError(TypeError, RuntimeError):
    """A get/set method of another type than its key's (setInt on a float setting): a
    TypeError, and a RuntimeError as ale-py's."""


class Settings:
    """Typed key/value store with ALE's keys; unknown keys and wrong types raise."""

    def __init__(self):
        self._values = {name: default for name, (_, default) in ALE_SETTINGS.items()}
        self._default_text = dict(DEFAULT_TEXT)

    def _check(self, key: str, kind: type) -> None:
        if key not in ALE_SETTINGS:
            raise UnknownSettingError(f"unknown setting {key!r}; ALE's settings are: "
                                      + ", ".join(sorted(ALE_SETTINGS)))
        expected = ALE_SETTINGS[key][0]
        if expected is not kind:
            methods = {bool: "Bool", int: "Int", float: "Float", str: "String"}[expected]
            raise SettingTypeError(f"setting {key!r} is a {expected.__name__}, not a {kind.__name__}: "
                                   f"use get{methods}/set{methods}")

    def get(self, key: str, kind: type):
        # ALE keeps every setting as text: getString reads any key, getFloat an int key.
        # The other cross-type reads (getInt of 0.25 is 0) are refused, not truncated.
        expected = ALE_SETTINGS.get(key, (kind,))[0]
        if kind is str and expected is not str:
            return self._default_text.get(key) or setting_text(self._values[key])
        if kind is float and expected is int:  # through ALE's float: 2**31 - 1 reads 2**31
            return float(np.float32(self._values[key]))
        self._check(key, kind)
        return self._values[key]

    def set(self, key: str, value, kind: type) -> None:
        self._check(key, kind)
        if kind is int:
            if not hasattr(value, "__index__"):  # bools pass, as in ale-py (they are ints)
                raise TypeError(f"setting {key!r} takes an int, got {type(value).__name__}")
            value = value.__index__()  # numpy integers too, as ale-py accepts them
            if not INT32_MIN <= value <= INT32_MAX:
                raise ValueError(f"setting {key!r}: {value} does not fit a 32-bit int")
        elif kind is float:
            if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
                raise TypeError(f"setting {key!r} takes a float, got {type(value).__name__}")
            value = float(value)
        elif kind is bool:
            if not isinstance(value, (bool, np.bool_)):  # ale-py refuses 0 and 1 too
                raise TypeError(f"setting {key!r} takes a bool, got {value!r}")
            value = bool(value)
        elif kind is str and not isinstance(value, str):
            raise TypeError(f"setting {key!r} takes a str, got {type(value).__name__}")
        if key in UNSUPPORTED and value != ALE_SETTINGS[key][1]:
            raise ValueError(f"setting {key!r}: {UNSUPPORTED[key]}")
        if key == "frame_skip" and value < 1:
            raise ValueError(f"frame_skip must be >= 1, got {value}")
        if key == "repeat_action_probability" and not 0.0 <= value <= 1.0:
            raise ValueError(f"repeat_action_probability must be in [0, 1], got {value}")
        if key == "max_num_frames_per_episode" and value < 0:
            raise ValueError(f"max_num_frames_per_episode must be >= 0 (0 = off), got {value}")
        self._values[key] = value
        self._default_text.pop(key, None)
