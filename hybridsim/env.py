"""Gymnasium environments on hybridsim's emulator, registered like ale-py's.

    gymnasium.make("hybridsim/Pong-v5")             # ale_py.env.AtariEnv semantics
    gymnasium.make("hybridsim/PongNoFrameskip-v4")  # and every v0/v4/v5 variant ale-py has
    gymnasium.make_vec("hybridsim/Pong-v5", num_envs=16)  # hybridsim.AtariVectorEnv

The single environment is ale-py's own AtariEnv (its seeding, frame skip, continuous
actions, observation types) with hybridsim.ALEInterface in place of ale_py.ALEInterface.
Registration (hybridsim/registration.py) runs on `import hybridsim` when gymnasium is
installed (gymnasium 1.x loads no plugins; `gymnasium.make("hybridsim:hybridsim/Pong-v5")`
imports it first).
"""
from __future__ import annotations

import inspect
import operator

import ale_py
import ale_py.env
import numpy as np

from hybridsim.roms import rom_path
from hybridsim.vector import is_real


class ActionOutOfRangeError(ValueError, IndexError):
    """An action index outside the action set. A ValueError, and an IndexError as ale-py's
    (it indexes a list with the action), so code written for either catches it."""


class AtariEnv(ale_py.env.AtariEnv):
    """ale_py.env.AtariEnv driven by hybridsim's emulator (same arguments)."""

    # No display window of its own (ale-py's "human" mode opens SDL's): rgb_array only, so
    # gymnasium.make(..., render_mode="human") wraps it in gymnasium's HumanRendering
    # (pygame), and gymnasium's env checker, which makes every listed mode, passes.
    metadata = {**ale_py.env.AtariEnv.metadata, "render_modes": ["rgb_array"]}

    # ale-py's constructor assigns `self.ale = ale_py.ALEInterface()` and configures it
    # at once; this property puts hybridsim's drop-in ALEInterface in its place.
    @property
    def ale(self):
        return self._hybridsim_ale

    @ale.setter
    def ale(self, value):
        from hybridsim.ale import ALEInterface
        self._hybridsim_ale = value if isinstance(value, ALEInterface) else ALEInterface()

    def __init__(self, *args, **kwargs):
        args, kwargs = self._check_arguments(*args, **kwargs)
        # ale-py's constructor builds an ale_py.ALEInterface before the setter above replaces
        # it, which printed ale-py's banner ("Powered by Stella") for every environment;
        # ale-py's AtariEnv sets the same Error level itself, only after that construction.
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        super().__init__(*args, **kwargs)

    @staticmethod
    def _check_arguments(*args, **kwargs):
        """What ale-py lets through: an unknown game only warns and then fails inside
        loadROM, a NaN threshold turns every continuous action into NOOP. Returns the
        arguments for ale-py's constructor, the game as its ROM's name ("MsPacman" is
        "ms_pacman", as AtariVectorEnv takes it; ale-py's lookup knows only the latter)."""
        bound = inspect.signature(ale_py.env.AtariEnv.__init__).bind(None, *args, **kwargs)
        game = bound.arguments["game"]
        if not isinstance(game, str) or not game:
            raise TypeError(f"game must be a game's name, such as 'pong', got {game!r}")
        bound.arguments["game"] = rom_path(game).stem  # names the installed games if none is
        threshold = bound.arguments.get("continuous_action_threshold",
                                        bound.signature.parameters["continuous_action_threshold"].default)
        if not is_real(threshold) or not np.isfinite(threshold):
            raise ValueError(f"continuous_action_threshold must be a finite number, got {threshold!r}")
        return bound.args[1:], bound.kwargs

    _closed = False

    def close(self):
        self._closed = True
        super().close()

    def _check_open(self, call: str) -> None:
        if self._closed:  # ale-py plays on after close(); an error says the code is wrong
            raise RuntimeError(f"{call}() on a closed environment")

    def reset(self, *, seed=None, options=None):
        self._check_open("reset")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        """ale-py's step, after checking the action (ale-py would index its action set with
        a discrete one: -1 silently picks the last action; a continuous one it only asserts)."""
        self._check_open("step")
        if self.continuous:
            return super().step(self._continuous_action(action))
        if not (type(action) is int and 0 <= action < len(self._action_set)):
            # what indexes ale-py's action set (operator.index): numpy ints, 0-d int arrays,
            # one-element int tensors (a policy run on obs[None]); a Python bool is an int (and
            # in gymnasium's Discrete, and ale-py plays it), numpy's bool is neither. Negative
            # ones are refused (ale-py's list indexing plays -1 as the last action)
            try:
                value = operator.index(action)  # also ints beyond int64 (2**70)
            except TypeError:
                raise TypeError(f"action must be an int index into the action set, got {action!r}") from None
            if not 0 <= value < len(self._action_set):
                size = len(self._action_set)
                raise ActionOutOfRangeError(f"action must be in 0..{size - 1} (the action set has "
                                            f"{size} actions), got {value}")
            action = value
        return super().step(action)

    @staticmethod
    def _continuous_action(action) -> np.ndarray:
        """(radius, theta, fire) as the float32 array of shape (3,) ale-py requires; real
        array-likes of that shape are converted, anything else is refused by name."""
        values = np.asarray(action)
        if values.shape != (3,) or values.dtype.kind not in "iuf":
            raise TypeError(f"a continuous action is an array of 3 numbers (radius, theta, fire), "
                            f"got {action!r}")
        values = values.astype(np.float32)
        if not np.isfinite(values).all():
            raise ValueError(f"a continuous action must be finite, got {values.tolist()}")
        return values


SINGLE_ENV_ONLY = ("mode", "difficulty", "obs_type", "render_mode")  # AtariEnv arguments


def make_vector_env(game: str, num_envs: int = 1, **kwargs):
    """make_vec's entry point: AtariVectorEnv from the AtariEnv registration's arguments."""
    from hybridsim.vector import AtariVectorEnv
    single_only = sorted(k for k in SINGLE_ENV_ONLY if kwargs.get(k) is not None)
    if single_only:  # ale-py's vector environment refuses them too (TypeError)
        raise TypeError(f"the vector environment has no {', '.join(map(repr, single_only))} "
                        f"argument{'s' if len(single_only) > 1 else ''}: its observations are "
                        f"preprocessed frame stacks (grayscale, img_height, img_width, stack_num) "
                        f"of the game's default mode and difficulty")
    for key in SINGLE_ENV_ONLY:
        kwargs.pop(key, None)
    # a (low, high) frameskip: AtariVectorEnv raises gymnasium's error, as ale-py's does
    return AtariVectorEnv(game, num_envs, frameskip=kwargs.pop("frameskip", 4), **kwargs)
