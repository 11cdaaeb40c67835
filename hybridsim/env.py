"""Gymnasium environments on hybridsim's emulator, registered like ale-py's.

    gymnasium.make("hybridsim/Pong-v5")             # ale_py.env.AtariEnv semantics
    gymnasium.make("hybridsim/PongNoFrameskip-v4")  # and every v0/v4/v5 variant ale-py has
    gymnasium.make_vec("hybridsim/Pong-v5", num_envs=16)  # hybridsim.AtariVectorEnv

The single environment is ale-py's own AtariEnv (its seeding, frame skip, continuous
actions, observation types) with hybridsim.ALEInterface in place of ale_py.ALEInterface.
Registration (hybridsim/registration.py) runs on `import hybridsim` when gymnasium is
installed, and through the "gymnasium.envs" entry point (setup.cfg) for gymnasium versions
that load plugins.
"""
from __future__ import annotations

import ale_py
import ale_py.env
import numpy as np

class AtariEnv(ale_py.env.AtariEnv):
    """ale_py.env.AtariEnv driven by hybridsim's emulator (same arguments)."""

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
        super().__init__(*args, **kwargs)
        # ale-py's get_action_meanings and get_keys_to_action look actions up by
        # ale_py.Action (a pybind11 enum, unequal to hybridsim.Action's IntEnum members), and
        # gymnasium's AtariPreprocessing calls the first: keep ale-py's own members.
        self._action_set = [ale_py.Action(int(a)) for a in self._action_set]

    def step(self, action):
        """ale-py's step, after checking a discrete action (ale-py would index its action
        set with it: -1 silently picks the last action)."""
        if not self.continuous and not (type(action) is int and 0 <= action < len(self._action_set)):
            index = np.asarray(action)  # numpy ints, 0-d arrays; everything else is refused
            if index.shape != () or index.dtype.kind not in "iu":
                raise TypeError(f"action must be an int index into the action set, got {action!r}")
            if not 0 <= int(index) < len(self._action_set):
                raise ValueError(f"action must be in 0..{len(self._action_set) - 1} (the action set "
                                 f"has {len(self._action_set)} actions), got {int(index)}")
        return super().step(action)


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
    frameskip = kwargs.pop("frameskip", 4)
    if isinstance(frameskip, tuple):
        raise ValueError(f"the vector environment needs an int frameskip, got {frameskip}")
    return AtariVectorEnv(game, num_envs, frameskip=frameskip, **kwargs)
