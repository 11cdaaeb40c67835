"""Joystick actions with ALE's ids (ale_py.Action), accepted wherever ale-py takes one."""
from __future__ import annotations

import enum
import operator


class Action(enum.IntEnum):
    """Mirrors ale_py.Action: same names, same values."""

    NOOP = 0
    FIRE = 1
    UP = 2
    RIGHT = 3
    LEFT = 4
    DOWN = 5
    UPRIGHT = 6
    UPLEFT = 7
    DOWNRIGHT = 8
    DOWNLEFT = 9
    UPFIRE = 10
    RIGHTFIRE = 11
    LEFTFIRE = 12
    DOWNFIRE = 13
    UPRIGHTFIRE = 14
    UPLEFTFIRE = 15
    DOWNRIGHTFIRE = 16
    DOWNLEFTFIRE = 17

    __str__ = enum.Enum.__str__  # "Action.FIRE", as ale-py prints it (int(a) gives 1)


NUM_ACTIONS = len(Action)


def as_action_id(action) -> int:
    """An action id from a hybridsim.Action, an ale_py.Action or an int; ValueError if out of range."""
    if hasattr(action, "value") and not isinstance(action, int):
        action = action.value  # ale_py.Action (a pybind11 enum) converts through .value
    try:
        value = operator.index(action)
    except TypeError:
        raise TypeError(f"an action must be an Action or an int, got {type(action).__name__}") from None
    if not 0 <= value < NUM_ACTIONS:
        raise ValueError(f"action {value} is out of range: expected 0..{NUM_ACTIONS - 1}")
    return value
