"""Side-by-side comparison of two ALEInterface implementations, frame by frame.

The reference is ale_py.ALEInterface (ale-py 0.12.1); the candidate is
hybridsim.ALEInterface. Both get the same ROM, settings and action stream; every frame
compares reward, game_over, lives, RAM and the palette screen (and with `sound` the act's
512 sound samples), and regularly the RGB and grayscale screens, through reset_game calls
and a cloneState/restoreState round trip.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Divergence:
    frame: int
    field: str
    detail: str

    def __str__(self):
        return f"frame {self.frame}: {self.field} differs ({self.detail})"


@dataclasses.dataclass
class VerifyResult:
    game: str
    frames: int
    resets: int
    divergence: Divergence | None = None

    @property
    def exact(self) -> bool:
        return self.divergence is None

    def __str__(self):
        if self.exact:
            return f"{self.game}: exact ({self.frames} frames, {self.resets} resets)"
        return f"{self.game}: {self.divergence}"


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    index = tuple(int(i) for i in np.argwhere(a != b)[0])
    return f"at {index}: reference {a[index]}, candidate {b[index]}"


def _compare_frame(ref, cand, frame: int, reward_ref, reward_cand, full: bool, screen: bool = True,
                   sound: bool = False):
    if reward_ref != reward_cand:
        return Divergence(frame, "reward", f"reference {reward_ref}, candidate {reward_cand}")
    for name in ("game_over", "lives"):
        a, b = getattr(ref, name)(), getattr(cand, name)()
        if a != b:
            return Divergence(frame, name, f"reference {a}, candidate {b}")
    ram_ref, ram_cand = ref.getRAM(), cand.getRAM()
    if not np.array_equal(ram_ref, ram_cand):
        index = int(np.argwhere(ram_ref != ram_cand)[0][0])
        return Divergence(frame, "RAM", f"byte ${0x80 + index:02X}: reference {ram_ref[index]}, "
                                        f"candidate {ram_cand[index]}")
    if sound:
        a, b = ref.getAudio(), cand.getAudio()
        if not np.array_equal(a, b):
            return Divergence(frame, "getAudio", "sample " + _first_difference(a, b))
    getters = (["getScreen"] if screen or full else []) + (["getScreenRGB", "getScreenGrayscale"] if full else [])
    for getter in getters:
        a, b = getattr(ref, getter)(), getattr(cand, getter)()
        if a.shape != b.shape:
            return Divergence(frame, getter, f"shape {a.shape} vs {b.shape}")
        if not np.array_equal(a, b):
            return Divergence(frame, getter, "pixel " + _first_difference(a, b))
    return None


def verify(make_reference, make_candidate, rom_path, *, game: str = "", frames: int = 1000,
           repeat_action_probability: float = 0.25, seed: int = 0, reset_every: int = 0,
           full_every: int = 50, mode: int | None = None, difficulty: int | None = None,
           clone_at: int | None = None, screen_every: int = 1, sound: bool = False) -> VerifyResult:
    """Drive both interfaces with the same stream; return the first divergence, if any.

    Reward, lives, game_over and RAM are compared after every frame, the screen every
    `screen_every` frames (hybridsim leaves frames whose screen is not read undrawn and
    draws them on demand, so a sparse reading checks that path too). With `sound`, both
    load with sound_obs and every act's samples are compared too.
    """
    envs = []
    for make in (make_reference, make_candidate):
        env = make()
        env.setInt("random_seed", seed)
        env.setFloat("repeat_action_probability", float(repeat_action_probability))
        env.setInt("frame_skip", 1)
        env.setBool("sound_obs", sound)
        env.loadROM(str(rom_path))
        if mode is not None:
            env.setMode(mode)
        if difficulty is not None:
            env.setDifficulty(difficulty)
        if mode is not None or difficulty is not None:
            env.reset_game()
        envs.append(env)
    ref, cand = envs
    result = VerifyResult(game or str(rom_path), 0, 0)
    div = _compare_frame(ref, cand, 0, 0, 0, full=True, sound=sound)
    if div:
        result.divergence = div
        return result
    actions = [int(getattr(a, "value", a)) for a in ref.getMinimalActionSet()]
    rng = np.random.default_rng(seed)
    clone_at = frames // 2 if clone_at is None else clone_at
    saved = None
    for frame in range(1, frames + 1):
        action = actions[rng.integers(len(actions))]
        reward_ref = ref.act(action)
        reward_cand = cand.act(action)
        div = _compare_frame(ref, cand, frame, reward_ref, reward_cand,
                             full=(frame % full_every == 0), screen=(frame % screen_every == 0), sound=sound)
        if div:
            result.divergence = div
            result.frames = frame
            return result
        result.frames = frame
        if frame == clone_at:
            saved = (ref.cloneState(), cand.cloneState(), frame)
        elif saved is not None and frame == saved[2] + 25:
            ref.restoreState(saved[0])
            cand.restoreState(saved[1])
            div = _compare_frame(ref, cand, frame, 0, 0, full=True, sound=sound)
            if div:
                div.field = "after restoreState: " + div.field
                result.divergence = div
                return result
            saved = None
        if ref.game_over() or (reset_every and frame % reset_every == 0):
            ref.reset_game()
            cand.reset_game()
            result.resets += 1
            div = _compare_frame(ref, cand, frame, 0, 0, full=True, sound=sound)
            if div:
                div.field = "after reset_game: " + div.field
                result.divergence = div
                return result
    return result
