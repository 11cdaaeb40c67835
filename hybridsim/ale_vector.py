"""hybridsim.ALEVectorInterface: ale-py's low-level vector interface (ale_py.ALEVectorInterface,
what its AtariVectorEnv drives as `.ale`) over hybridsim's batched engine.

Same constructor (a ROM path, then ALE's names: frame_skip, max_episode_steps), same calls
and results: reset(env_ids, seeds) -> (obs, info), send(action_ids, paddle_strengths),
recv() -> (obs, rewards, terminations, truncations, info). It is a view of an
AtariVectorEnv: `AtariVectorEnv(...).ale` drives that environment itself, as in ale-py.
"""
from __future__ import annotations

import os

import numpy as np


class ALEVectorInterface:
    """ale_py.ALEVectorInterface on hybridsim's engine (see the module docstring)."""

    def __init__(self, rom_path: str | os.PathLike, num_envs: int, frame_skip: int = 4, stack_num: int = 4,
                 img_height: int = 84, img_width: int = 84, grayscale: bool = True, maxpool: bool = True,
                 noop_max: int = 30, use_fire_reset: bool = True, episodic_life: bool = False,
                 life_loss_info: bool = False, reward_clipping: bool = True, max_episode_steps: int = 108000,
                 repeat_action_probability: float = 0.0, full_action_space: bool = False,
                 batch_size: int = 0, num_threads: int = 0, thread_affinity_offset: int = -1,
                 autoreset_mode: str = "NextStep", *, backend: str = "cpu", device: int = 0):
        from hybridsim.vector import AtariVectorEnv
        self._env = AtariVectorEnv(
            None, num_envs, rom_file=rom_path, frameskip=frame_skip, stack_num=stack_num,
            img_height=img_height, img_width=img_width, grayscale=grayscale, maxpool=maxpool,
            noop_max=noop_max, use_fire_reset=use_fire_reset, episodic_life=episodic_life,
            life_loss_info=life_loss_info, reward_clipping=reward_clipping,
            max_num_frames_per_episode=max_episode_steps,
            repeat_action_probability=repeat_action_probability, full_action_space=full_action_space,
            batch_size=batch_size, num_threads=num_threads, thread_affinity_offset=thread_affinity_offset,
            autoreset_mode=autoreset_mode, backend=backend, device=device)

    @classmethod
    def _of(cls, env) -> "ALEVectorInterface":
        """The interface of an existing AtariVectorEnv (its `.ale`)."""
        view = cls.__new__(cls)
        view._env = env
        return view

    def get_action_set(self) -> list:
        """The Actions that action ids index (the minimal set, or all 18 with full_action_space)."""
        from hybridsim.ale import _action_members  # ale_py.Action's, as ALEInterface's sets
        return [_action_members()[int(a)] for a in self._env._engine_action_set]

    def get_num_envs(self) -> int:
        return self._env.num_envs

    def get_observation_shape(self) -> tuple:
        return self._env.single_observation_space.shape

    def reset(self, env_ids, seeds) -> tuple:
        """Reset env_ids, environment env_ids[k] with seeds[k] (negative: keep its seed).
        Returns (obs, info): of every environment in sync mode (those not reset as they
        stand), of the first batch_size to finish in async mode."""
        ids, seeds = _int_list("env_ids", env_ids), _int_list("seeds", seeds)
        env = self._env
        if len(ids) != len(seeds):
            raise ValueError(f"env_ids and seeds must have the same size, got {len(ids)} and {len(seeds)}")
        bad = ids[(ids < 0) | (ids >= env.num_envs)]
        if len(bad):
            raise IndexError(f"reset env_id {int(bad[0])} is out of range [0, {env.num_envs})")
        unique, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"reset has a duplicate env_id={int(unique[counts > 1][0])}")
        mask = np.zeros(env.num_envs, dtype=bool)
        mask[ids] = True
        order = np.argsort(ids, kind="stable")  # AtariVectorEnv takes seeds in env order
        return env.reset(seed=seeds[order], options={"reset_mask": mask})

    def send(self, action_ids, paddle_strengths) -> None:
        """One step of the environments of the last result: an index into get_action_set()
        and a paddle strength each."""
        actions = np.asarray(action_ids)
        strengths = np.asarray(paddle_strengths)
        if actions.ndim != 1 or strengths.ndim != 1 or len(actions) != len(strengths):
            raise ValueError(f"action_ids and paddle_strengths must be 1-D and of the same size, got "
                             f"shapes {actions.shape} and {strengths.shape}")
        self._env._send_with_strengths(actions, strengths)

    def recv(self) -> tuple:
        """(obs, rewards, terminations, truncations, info) of the next batch_size environments."""
        return self._env.recv()

    def handle(self):
        """ale-py's handle is its C++ engine's address, for its XLA (JAX) functions."""
        self._env.xla()  # raises, saying why

    def __repr__(self) -> str:
        return f"hybridsim.ALEVectorInterface over {self._env!r}"


def _int_list(name: str, values) -> np.ndarray:
    """A 1-D int64 array from a sequence of ints (ale-py takes Sequence[int] and refuses
    floats and bools)."""
    array = np.asarray(values)
    if array.size == 0:
        array = array.astype(np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be a sequence of ints, got {values!r}")
    if array.dtype == np.uint64 and (array > np.iinfo(np.int64).max).any():  # would wrap to < 0
        raise TypeError(f"{name} must fit in a signed 64-bit int, got {values!r}")
    return array.astype(np.int64)
