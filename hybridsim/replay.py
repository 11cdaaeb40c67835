"""`hybridsim replay FILE --episode K`: re-emulate a logged episode and check it.

An environment's whole history follows from its seed and its actions. Replay rebuilds the
environment the run used (same backend settings, seed = run seed + global env id), feeds
it every logged action of that environment in frame order up to the end of episode K, and
checks each reward and episode end against the log (and observations, where logged).
Then it renders episode K as a GIF or PNG frames. The log is a verifiable record.

`env` picks the emulator that replays: the run's own backend (default), hybridsim's CPU
engine, or ale-py's AtariVectorEnv. The backends are bit-exact with one another, so a log
written on any of them replays on any other: replaying a hybridsim run on ale-py checks
the trajectories the agent trained on against ALE itself, in the game states a trained
agent reaches (random play rarely gets there).
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import tempfile
import typing

import numpy as np

from hybridsim import storage, trajlog
from hybridsim.config import has_field_type


@dataclasses.dataclass
class ReplayResult:
    env_id: int
    episode_id: int
    steps: int
    episode_return: float
    mismatches: list
    frames: list
    backend: str = ""  # the backend that replayed it
    game: str = ""
    transitions: dict | None = None  # replay(..., keep_transitions=True): see there

    @property
    def reproduced(self) -> bool:
        return not self.mismatches


def run_config(f) -> dict:
    """The run's settings, from a trajectory file's `config` attribute."""
    raw = f.attrs.get("config")
    if raw is None:
        raise trajlog.TrajectoryLogError(f"{f.filename}: no run config attribute; cannot replay")
    try:
        cfg = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise trajlog.TrajectoryLogError(f"{f.filename}: its run config attribute is not JSON "
                                         f"({exc}); cannot replay") from None
    if not isinstance(cfg, dict) or "seed" not in cfg or "game" not in cfg:
        raise trajlog.TrajectoryLogError(f"{f.filename}: its run config attribute lacks the game "
                                         f"or the seed; cannot replay")
    # every run writes them all; a default would rebuild another emulation (or fail at the end)
    missing = [name for name in CONFIG_NEEDED if name not in cfg]
    if missing:
        raise trajlog.TrajectoryLogError(f"{f.filename}: damaged run config attribute: it lacks "
                                         f"{', '.join(missing)}; cannot replay")
    return cfg


# the run config's settings that rebuild the run's environments or read its rows
CONFIG_NEEDED = ("backend", "schedule", "frame_skip", "repeat_action_probability", "noop_max",
                 "episodic_life", "max_episode_frames")


def _env_history(f, path, env_id: int, schedule: str) -> dict:
    """Environment env_id's logged steps in order. A run steps an environment at most once
    a row and its frame count grows row by row, so an env_id or global_frame that breaks
    either is named as damage (replayed, it would show as a disagreement with the run)."""
    steps = f["steps"]
    n = trajlog.common_rows(steps)
    env = steps["env_id"][:n]
    if n and not f.attrs.get("virtual"):  # a master's shorter ranks end in fill rows (-1)
        trajlog.synchronous_env_ids(path, env, n, schedule)
    rows, cols = np.nonzero(env == env_id)  # row by row
    frames = steps["global_frame"][:n][rows, cols]
    twice = np.nonzero(np.diff(rows) == 0)[0]
    if twice.size:
        raise trajlog.TrajectoryLogError(
            f"{path}: damaged trajectory file: steps/env_id row {rows[twice[0]]} holds env {env_id} "
            f"twice; cannot replay")
    trajlog.check_frames_grow(path, frames[:, None], rows, [env_id], "cannot replay")
    take = {name: steps[name][:n][rows, cols] for name in
            ("action", "reward_raw", "terminated", "truncated", "episode_id", "lives")}
    take["global_frame"], take["step_index"], take["column"] = frames, rows, cols
    return take


def _behavior_logits(f, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """steps/behavior_logits at (rows[k], cols[k]): one read of the rows' span (an episode's
    rows are a short stretch of the file; the whole dataset may be gigabytes)."""
    if rows.size == 0:
        return np.zeros((0, f["steps/behavior_logits"].shape[2]), np.float32)
    first = int(rows.min())
    block = f["steps/behavior_logits"][first:int(rows.max()) + 1]
    return block[rows - first, cols]


REPLAY_ENVS = {"run": None, "hybridsim": "cpu", "ale-py": "ale-py"}  # --env: backend to use


def replay(path, episode: int, *, env: str = "run", make_env=None,
           keep_transitions: bool = False, keep_frames: bool = True,
           scratch_dir=None) -> ReplayResult:
    """Replay row `episode` of the file's episodes table (0 = the first episode that ended)
    on `env`: "run" (the backend the run used), "hybridsim" or "ale-py".

    With keep_transitions, `result.transitions` holds the episode as the agent lived it,
    one entry per step t: `observations[t]` (what the policy saw when it chose
    `actions[t]`, re-emulated: the run logs few or no observations), `actions`,
    `rewards` (unclipped), `terminated`, `truncated`, `lives` (after the step),
    `behavior_logits` (the acting policy's, from the log), `global_frame`; and
    `final_observation`, the one after the last step (what a truncated episode bootstraps
    from). With `scratch_dir` the
    observations are a memmap over an unlinked temporary file there (what `replay --npz`
    does, in the output's directory: a 27,000-step episode of 4x84x84 frames is 0.76 GB),
    else an array in memory. keep_frames=False leaves `frames` (what a GIF shows) empty."""
    if env not in REPLAY_ENVS:
        raise ValueError(f"env {env!r}: expected one of {', '.join(REPLAY_ENVS)}")
    path = pathlib.Path(path)
    with trajlog.open_trajectory_file(path) as f:
        n_episodes = trajlog.common_rows(f["episodes"])
        episodes = {k: f["episodes"][k][:n_episodes] for k in trajlog.EPISODE_FIELDS}
        restarts = sorted(int(r) for r in trajlog.json_list_attr(f, "restarts"))
        gaps = [(int(a), int(b)) for a, b in trajlog.json_list_attr(f, "gaps")]
        if not 0 <= episode < episodes["env_id"].size:
            raise ValueError(f"{path}: episode {episode} out of range; the file has "
                             f"{episodes['env_id'].size} finished episodes")
        env_id = int(episodes["env_id"][episode])
        episode_id = int(episodes["episode_id"][episode])
        cfg = run_config(f)
        num_actions = f["steps/behavior_logits"].shape[2]
        history = _env_history(f, path, env_id, str(cfg.get("schedule", "a2c")))
        own_rows = history["episode_id"] == episode_id
        logits = (_behavior_logits(f, history["step_index"][own_rows], history["column"][own_rows])
                  if keep_transitions else None)
        logged_obs = {}
        if "observations" in f:
            index = f["observations/index"][()]
            for k in np.nonzero(index[:, 1] == env_id)[0]:
                logged_obs[int(index[k, 0])] = f["observations/frames"][k]
    upto = np.nonzero(history["episode_id"] <= episode_id)[0]
    if upto.size == 0:
        raise ValueError(f"{path}: no logged steps for env {env_id} episode {episode_id}")
    last = int(upto[-1])
    frame_of = history["global_frame"]
    own = np.nonzero(history["episode_id"] == episode_id)[0]
    if own.size == 0:
        raise ValueError(f"{path}: no logged steps for env {env_id} episode {episode_id}")
    # A resume that could not restore the environments restarted them from their seeds at
    # a recorded frame: replay from the last restart before the episode, resetting there.
    begin_frame = max((r for r in restarts if r < frame_of[own[0]]), default=None)
    begin = 0 if begin_frame is None else int(np.searchsorted(frame_of, begin_frame, "right"))
    for since, until in gaps:
        if (begin_frame if begin_frame is not None else -1) <= since < frame_of[last]:
            raise ValueError(
                f"{path}: env {env_id} episode {episode_id} cannot be replayed: the step rows after "
                f"frame {since} up to frame {until} were lost (the run was killed before they reached "
                f"the file, then resumed; the file's `gaps` attribute), and the replay needs their actions")
    if REPLAY_ENVS[env] is not None:
        cfg = {**cfg, "backend": REPLAY_ENVS[env]}
    check_env_config(path, cfg, env_id)
    actions = history["action"][begin:last + 1]
    outside = (actions < 0) | (actions >= num_actions)
    if outside.any():  # the emulator's own message named neither the file nor the field
        raise trajlog.TrajectoryLogError(
            f"{path}: damaged trajectory file: steps/action holds {int(outside.sum())} value(s) "
            f"outside the action set 0..{num_actions - 1} (e.g. {int(actions[outside][0])}) for "
            f"env {env_id}; cannot replay")
    seed = int(cfg["seed"]) + env_id
    mismatches, frames, total = [], [], 0.0
    seen, n_seen, final_observation = None, 0, None
    vec, obs = make_replay_env(path, cfg, seed, make_env=make_env)
    try:
        if logged_obs:
            check_logged_frames_shape(path, next(iter(logged_obs.values())).shape, np.shape(obs)[1:],
                                      "cannot replay")
        if keep_transitions:  # the whole episode's room now, not after minutes of replay
            seen = _observation_buffer((own.size, *np.shape(obs[0])), np.asarray(obs[0]).dtype, scratch_dir)
        for k in range(begin, last + 1):
            if k > begin and any(frame_of[k - 1] <= r < frame_of[k] for r in restarts):
                obs, _ = vec.reset(seed=seed)  # the run's environments restarted here
            in_episode = history["episode_id"][k] == episode_id
            if keep_transitions and in_episode:
                seen[n_seen] = obs[0]
                n_seen += 1
            obs, reward, terminated, truncated, info = vec.step(np.array([history["action"][k]], np.int64))
            if keep_transitions and k == own[-1]:  # SameStep: obs already starts the next episode
                ended = bool(terminated[0]) or bool(truncated[0])
                final_observation = np.array(info["final_obs"][0] if ended else obs[0])
            step = history["step_index"][k]
            if float(reward[0]) != float(history["reward_raw"][k]):
                mismatches.append(f"step {step}: reward {float(reward[0])} replayed, {history['reward_raw'][k]} logged")
            if bool(terminated[0]) != bool(history["terminated"][k]) or bool(truncated[0]) != bool(history["truncated"][k]):
                mismatches.append(f"step {step}: episode end differs")
            if int(info["lives"][0]) != int(history["lives"][k]):
                mismatches.append(f"step {step}: lives {int(info['lives'][0])} replayed, {history['lives'][k]} logged")
            if int(step) in logged_obs and not np.array_equal(obs[0], logged_obs[int(step)]):
                mismatches.append(f"step {step}: observation differs")
            if in_episode:
                total += float(reward[0])
                if keep_frames:
                    frames.append(np.asarray(obs[0])[-1] if np.ndim(obs[0]) == 3 else np.asarray(obs[0]))
            if len(mismatches) >= 10:
                break
    finally:
        vec.close()
    # the steps and the episodes table must tell the same story
    if not mismatches:
        if own.size != int(episodes["length"][episode]):
            mismatches.append(f"episode {episode_id}: {own.size} steps logged, the episodes table says "
                              f"{int(episodes['length'][episode])}")
        if total != float(episodes["return"][episode]):
            mismatches.append(f"episode {episode_id}: return {total} replayed, the episodes table says "
                              f"{float(episodes['return'][episode])}")
        if not (history["terminated"][own[-1]] or history["truncated"][own[-1]]):
            mismatches.append(f"episode {episode_id}: its last logged step does not end it")
    transitions = None
    if keep_transitions and not mismatches:  # never an unverified record
        transitions = {"observations": seen,
                       "final_observation": final_observation, "behavior_logits": logits}
        transitions.update({name: history[source][own] for name, source in
                            (("actions", "action"), ("rewards", "reward_raw"), ("terminated", "terminated"),
                             ("truncated", "truncated"), ("global_frame", "global_frame"), ("lives", "lives"))})
    return ReplayResult(env_id, episode_id, int(own.size), total, mismatches, frames,
                        backend=str(cfg["backend"]), game=str(cfg["game"]), transitions=transitions)


def _observation_buffer(shape, dtype, directory=None) -> np.ndarray:
    """An array of `shape` for an episode's observations: in memory, or with `directory`
    backed by an unlinked temporary file there (its pages can go to disk, where that
    directory is on a disk; the file's blocks are freed once no view of the array is left)."""
    if directory is None:
        return np.empty(shape, dtype)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    with tempfile.TemporaryFile(dir=directory) as fh:  # np.memmap keeps its own descriptor
        try:
            # the blocks now: a page of a sparse file that finds the disk full later is a
            # SIGBUS (mmap(2)), not an error
            storage.allocate(fh.fileno(), nbytes)
        except OSError as exc:
            raise OSError(exc.errno, f"no room for the episode's {nbytes / 2**20:.1f} MiB of observations in a "
                                     f"temporary file in {directory} while it replays ({exc.strerror}); free "
                                     f"space there or write the .npz to another file system") from None
        return np.memmap(fh, dtype=dtype, mode="w+", shape=shape)


def check_env_config(path, cfg: dict, env_id: int) -> None:
    """Refuse a run config attribute that cannot rebuild the run's environment (a setting
    of the wrong type or out of range), naming the file and the setting: these failed as a
    traceback deep in the emulator (frame_skip 0), or without the file (seed "x")."""
    from hybridsim.train_config import TrainConfig

    def damaged(what: str):
        return trajlog.TrajectoryLogError(f"{path}: damaged run config attribute: {what}; cannot replay")

    hints = typing.get_type_hints(TrainConfig)
    for name, value in cfg.items():
        kind = hints.get(name)
        if kind in (int, float, str, bool) and not has_field_type(kind, value):
            raise damaged(f"{name} is {value!r}, not of type {kind.__name__}")
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    train_cfg = TrainConfig(**{k: v for k, v in cfg.items() if k in names})
    train_cfg.num_envs = 1
    checks = train_cfg.environment_checks() + [
        (0 <= train_cfg.seed + env_id < 2**31,
         f"seed {train_cfg.seed} + env id {env_id} must be in [0, 2**31)"),
        # the vector environment's own refusal named neither the file nor the attribute
        (0 <= train_cfg.num_threads < 2**31,
         f"num_threads must be in [0, 2**31) (0: one per core), got {train_cfg.num_threads}")]
    for ok, message in checks:
        if not ok:
            raise damaged(message)
    from hybridsim.roms import rom_path
    try:
        rom_path(train_cfg.game)
    except (FileNotFoundError, ValueError) as exc:
        raise damaged(f"game {train_cfg.game!r}: {exc}") from None


def _make_env(cfg: dict, seed: int, num_envs: int = 1):
    from hybridsim.train_config import TrainConfig, make_vector_env
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    train_cfg = TrainConfig(**{k: v for k, v in cfg.items() if k in fields})
    train_cfg.num_envs = num_envs
    train_cfg.num_minibatches = 1
    return make_vector_env(train_cfg, seed)


def check_logged_frames_shape(path, logged_shape, env_shape, outcome: str) -> None:
    """Logged observations of another shape than the run's environments make differed from
    every re-emulated one, which read as a log of another run: it is damage to the layout."""
    if tuple(logged_shape) != tuple(env_shape):
        raise trajlog.TrajectoryLogError(
            f"{path}: damaged trajectory file: observations/frames holds frames of shape "
            f"{tuple(logged_shape)}, but the run's environments observe {tuple(env_shape)}; {outcome}")


def make_replay_env(path, cfg: dict, seed: int, num_envs: int = 1, make_env=None):
    """The run's vector environment of num_envs and its first observation, reset with the
    first seeded `seed`, with the errors a log's config can cause named."""
    vec = None
    try:
        vec = (make_env or _make_env)(cfg, seed=seed, num_envs=num_envs)
        obs, _ = vec.reset(seed=seed)
        return vec, obs
    except RuntimeError as exc:
        if vec is not None:
            vec.close()
        if cfg.get("backend") in ("gpu", "hybrid") and not cfg.get("gpu_emulate"):
            raise RuntimeError(
                f"{path}: the run used --backend {cfg['backend']}, which cannot start here ({exc}); "
                f"replay it on the CPU with --env hybridsim (hybridsim's CPU engine is bit-exact "
                f"with the GPU backends) or --env ale-py") from exc
        raise
    except Exception as exc:
        if vec is not None:
            vec.close()
        if type(exc).__module__.startswith("gymnasium"):  # ale-py's refusal of a setting
            raise trajlog.TrajectoryLogError(f"{path}: its run config attribute does not make an "
                                             f"environment ({exc}); cannot replay") from exc
        raise


def check_new_file(name: str, option: str, what: str, overwrite: bool) -> None:
    path = pathlib.Path(name)
    if path.is_dir():
        raise IsADirectoryError(f"{option} {name}: is a directory; name the {what} file to write")
    if trajlog.is_trajectory_log(path):
        raise FileExistsError(f"{option} {name}: is a run's trajectory log, which no output replaces "
                              f"(--overwrite or not); name a new file")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{option} {name}: already exists; name a new file, or pass "
                              f"--overwrite to replace it")
    if path.parent.exists() and not path.parent.is_dir():
        raise NotADirectoryError(f"{option} {name}: {path.parent} is a file, not a directory")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{option} {name}: directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise PermissionError(f"{option} {name}: cannot write into {path.parent}")
    why = storage.why_no_new_file(path.parent)
    if why:
        raise OSError(f"{option} {name}: cannot make a file in {path.parent} ({why})")


def check_outputs(gif: str | None = None, png_dir: str | None = None, overwrite: bool = False,
                  npz: str | None = None) -> None:
    """Refuse, before a replay that can take minutes, outputs save_frames or save_transitions
    could not write, would overwrite (unless `overwrite`) or would mix with older frames."""
    if gif:
        check_new_file(gif, "--gif", "GIF", overwrite)
    if npz:
        check_new_file(npz, "--npz", ".npz", overwrite)
        if not str(npz).endswith(".npz"):  # numpy would add the suffix to a name without it
            raise ValueError(f"--npz {npz}: name a file ending in .npz")
        if gif and os.path.abspath(gif) == os.path.abspath(npz):
            raise ValueError(f"--gif and --npz name the same file, {npz}")
    if png_dir:
        storage.check_output_directory(png_dir, "--png-dir")
        if any(pathlib.Path(png_dir).glob("frame_*.png")):
            raise FileExistsError(f"--png-dir {png_dir}: already holds frame_*.png files (another "
                                  f"replay's?); name an empty or new directory")


def save_frames(frames, gif: str | None = None, png_dir: str | None = None, scale: int = 3,
                overwrite: bool = False) -> list[str]:
    from PIL import Image
    check_outputs(gif, png_dir, overwrite)
    images = [Image.fromarray(np.asarray(f, np.uint8)).resize(
        (f.shape[1] * scale, f.shape[0] * scale), Image.NEAREST) for f in frames]
    written = []
    if gif:
        # through a temporary file: an interrupted write leaves no half GIF (nor half of
        # the file --overwrite replaces)
        storage.write_output(gif, "the GIF", lambda fh: images[0].save(
            fh, format="GIF", save_all=True, append_images=images[1:], duration=50, loop=0))
        written.append(gif)
    if png_dir:
        out = pathlib.Path(png_dir)
        out.mkdir(parents=True, exist_ok=True)
        names = [out / f"frame_{k:05d}.png" for k in range(len(images))]
        for name, image in zip(names, images):
            try:
                image.save(name)
            except OSError as exc:  # no part of an episode (a full disk): its frames go too
                for written_name in names:
                    written_name.unlink(missing_ok=True)
                raise storage.StorageError.from_exception(
                    name, "a PNG frame", exc, "the episode's frames written before it were removed") from exc
        written.append(str(out))
    return written


def save_transitions(result: ReplayResult, npz: str, source, overwrite: bool = False) -> str:
    """Write a reproduced episode's transitions (replay(..., keep_transitions=True)) as a
    compressed .npz, with what identifies them: `game`, `env_id`, `episode_id`,
    `episode_return`, `backend` (that replayed it) and `source` (the trajectory file)."""
    check_outputs(npz=npz, overwrite=overwrite)
    if result.transitions is None:
        raise ValueError("no transitions to write: replay with keep_transitions=True, and only "
                         "an episode the replay reproduced")
    arrays = dict(result.transitions, env_id=np.int64(result.env_id),
                  episode_id=np.int64(result.episode_id),
                  episode_return=np.float64(result.episode_return),
                  backend=np.str_(result.backend), source=np.str_(str(source)),
                  game=np.str_(result.game))
    storage.write_output(npz, "the transitions", lambda fh: np.savez_compressed(fh, **arrays))
    return npz
