"""`hybridsim eval CHECKPOINT`: score a trained policy on hybridsim's or ale-py's environment.

The environment is rebuilt with the checkpoint's own settings (game, frame skip, sticky
actions, no-op starts, episode frame limit, preprocessing; episodic life off), so a policy
trained here can be scored on ALE itself; sticky actions, no-op starts and the frame limit
may be overridden (ALE's v5 protocol: sticky 0.25). The result names every setting used.
"""
from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import torch

from hybridsim.models import build_model, note_step, to_device
from hybridsim.scores import human_normalized, on_reference_protocol
from hybridsim.train import TrainConfig, has_nonfinite_weights, make_vector_env, read_checkpoint
from hybridsim.train_config import life_lost

ENVS = {"hybridsim": "cpu", "ale-py": "ale-py"}


class IncompleteEvaluation(RuntimeError):
    """Fewer episodes ended than were asked for within the step limit."""


def checkpoint_file(path) -> pathlib.Path:
    """A checkpoint's path as given, or a run directory's checkpoint.pt."""
    path = pathlib.Path(path)
    return path / "checkpoint.pt" if path.is_dir() else path


def evaluate(checkpoint, episodes: int = 10, env: str = "hybridsim", num_envs: int = 4,
             seed: int = 12345, greedy: bool = False, max_steps: int = 1_000_000,
             random_policy: bool = False, repeat_action_probability: float | None = None,
             noop_max: int | None = None, max_episode_frames: int | None = None) -> dict:
    """Mean return (and the population std) of the checkpoint's policy over `episodes`
    episodes, actions sampled from it (greedy: its most likely one); with random_policy, of
    uniformly random actions on the same environment (the level training starts from).
    None for a setting keeps the checkpoint's. Fewer episodes than asked within max_steps
    steps per environment raise IncompleteEvaluation."""
    if env not in ENVS:
        raise ValueError(f"--env must be one of {sorted(ENVS)}, got {env!r}")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    num_envs = min(num_envs, episodes)  # one without an episode to play would only be stepped
    overrides = {"repeat_action_probability": repeat_action_probability, "noop_max": noop_max,
                 "max_episode_frames": max_episode_frames}
    checkpoint = checkpoint_file(checkpoint)
    state = read_checkpoint(checkpoint, map_location="cpu")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    cfg = TrainConfig(**{k: v for k, v in state["config"].items() if k in fields})
    cfg.backend, cfg.num_envs, cfg.num_minibatches, cfg.episodic_life = ENVS[env], num_envs, 1, False
    cfg.seed = seed
    for name, value in overrides.items():
        if value is not None:
            setattr(cfg, name, value)
    cfg.validate_environment()
    settings = {"repeat_action_probability": float(cfg.repeat_action_probability),
                "noop_max": int(cfg.noop_max), "max_episode_frames": int(cfg.max_episode_frames),
                "frame_skip": int(cfg.frame_skip), "episodic_life": False,
                "actions": "random" if random_policy else "greedy" if greedy else "sampled",
                "seed": int(seed)}
    try:
        vec = make_vector_env(cfg, seed)
    except Exception as exc:  # gymnasium, ale-py and hybridsim each raise their own kinds
        raise ValueError(f"{checkpoint}: cannot build its environment ({type(exc).__name__}: {exc})") from None
    env_shape = (tuple(vec.single_observation_space.shape), int(vec.single_action_space.n))
    if env_shape != (tuple(state["obs_shape"]), int(state["num_actions"])):
        vec.close()
        raise ValueError(f"{checkpoint}: its network takes observations {tuple(state['obs_shape'])} "
                         f"and picks among {state['num_actions']} actions, but {cfg.game} on {env} "
                         f"gives {env_shape[0]} and {env_shape[1]} (another ROM or action set?)")
    model = to_device(build_model(cfg.model, state["obs_shape"], state["num_actions"],
                                  cfg.obs_normalization, cfg.use_lstm), "cpu")
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise ValueError(f"{checkpoint}: its network does not match its settings: {exc}") from None
    model.eval()
    if not random_policy and has_nonfinite_weights(model):
        raise ValueError(f"{checkpoint}: its network holds NaN or infinite weights (training diverged)")
    generator = torch.Generator().manual_seed(seed)
    obs, info = vec.reset(seed=seed)
    # Each environment owns a fixed quota of episodes, so the score does not favour the
    # episodes that happen to end first (in Pong, the short, lost ones).
    quota = np.full(num_envs, episodes // num_envs)
    quota[:episodes % num_envs] += 1
    returns, running = [], np.zeros(num_envs)
    memory = model.initial_memory(num_envs)  # a recurrent policy's, reset at each episode start
    # ... and, trained with --life-loss-terminal, at each lost life, as it was in training
    # (the games and their returns stay whole)
    lives = np.asarray(info["lives"]) if memory is not None and cfg.life_loss_terminal else None
    for _ in range(max_steps):
        if random_policy:  # uniform logits; the network is not consulted
            logits = torch.zeros(num_envs, state["num_actions"])
        else:
            with torch.no_grad():
                logits, _ = model.act_step(torch.from_numpy(obs), memory)
        if greedy and not random_policy:
            actions = logits.argmax(-1)
        else:
            actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(-1)
        obs, reward, terminated, truncated, info = vec.step(actions.numpy().astype(np.int64))
        starts = np.logical_or(terminated, truncated)
        if lives is not None:
            lives, before = np.asarray(info["lives"]), lives
            starts = starts | life_lost(lives, before)
        note_step(memory, slice(None), actions, reward, starts)
        running += reward
        for k in np.nonzero(np.logical_or(terminated, truncated))[0]:
            if quota[k] > 0:
                returns.append(float(running[k]))
                quota[k] -= 1
            running[k] = 0.0
        if not quota.any():
            break
    vec.close()
    result = {"env": env, "game": cfg.game, "episodes": len(returns), "returns": returns,
              "mean": float(np.mean(returns)) if returns else float("nan"),
              "std": float(np.std(returns)) if returns else float("nan"),
              "frames_trained": int(state["frames"]), "policy": "random" if random_policy else "trained",
              "settings": settings}
    result["human_normalized"] = human_normalized(cfg.game, result["mean"])
    result["reference_protocol"] = on_reference_protocol(settings)  # what human_normalized assumes
    if len(returns) < episodes:
        # a partial score favours the episodes that end soonest: not a result
        done = (f"the {len(returns)} that did returned {result['mean']:.2f} +- {result['std']:.2f}"
                if returns else "none did")
        limit = ("no frame limit (max_episode_frames 0)" if not cfg.max_episode_frames
                 else f"episodes cut at {cfg.max_episode_frames:,} frames")
        raise IncompleteEvaluation(
            f"only {len(returns)} of {episodes} episodes ended within {max_steps:,} steps per "
            f"environment ({limit}); {done}. Pass --max-episode-frames to cut episodes short")
    return result


def describe_settings(settings: dict) -> str:
    """One line naming the protocol an evaluation ran under."""
    limit = (f"episodes cut at {settings['max_episode_frames']:,} frames" if settings["max_episode_frames"]
             else "no episode frame limit")
    return (f"sticky actions {settings['repeat_action_probability']:g}, up to {settings['noop_max']} "
            f"no-ops at reset, {limit}, frame skip {settings['frame_skip']}, episodic life off, "
            f"{settings['actions']} actions, seed {settings['seed']}")
