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

import ale_py.env

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


def make_vector_env(game: str, num_envs: int = 1, **kwargs):
    """make_vec's entry point: AtariVectorEnv from the AtariEnv registration's arguments."""
    from hybridsim.vector import AtariVectorEnv
    kwargs.pop("mode", None)
    kwargs.pop("difficulty", None)
    kwargs.pop("obs_type", None)
    kwargs.pop("render_mode", None)
    frameskip = kwargs.pop("frameskip", 4)
    if isinstance(frameskip, tuple):
        raise ValueError(f"the vector environment needs an int frameskip, got {frameskip}")
    return AtariVectorEnv(game, num_envs, frameskip=frameskip, **kwargs)
