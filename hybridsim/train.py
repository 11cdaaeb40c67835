"""`hybridsim train`: actor-critic training corrected by V-trace.

Two schedules (both use hybridsim.vtrace):
- a2c (CuLE's A2C+V-trace): all environments step together for `num_steps` steps; the
  batch is then split into `num_minibatches` groups of environments that are updated in
  turn, so every group after the first was collected by a slightly older policy.
- impala: the vector env runs asynchronously (`env_batch_size` < num_envs); each batch
  that comes back is acted on with the current policy, per-environment trajectories of
  `num_steps` transitions are cut, and the learner updates on `learner_batch` of them.
  Batches hold the environments sent longest ago (`impala_order`), so runs repeat.

Defaults follow CuLE's A2C+V-trace example (NVlabs/cule examples/a2c and examples/vtrace:
RMSprop lr 0.00065, alpha 0.99, eps 1e-5, grad norm 0.5, entropy 0.01, gamma 0.99, 5
steps) and torchbeast's monobeast for the impala schedule where noted. The baseline loss
is torchbeast's, value_coef x 0.5 (vs - V)^2: CuLE's value 0.5 weighs (vs - V)^2 itself,
twice what the same 0.5 gives here. A time-limit truncation ends the return as a
terminal does, as in torchbeast, unless bootstrap_truncation adds gamma x V(final
observation) to the reward of the cut step (_truncation_values).
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
import numbers
import os
import pathlib
import pickle
import re
import shutil
import socket
import sys
import threading
import time
import uuid
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from hybridsim import dist, storage, sysinfo, vtrace
from hybridsim.actions import NUM_ACTIONS
from hybridsim.models import (RunningObservationNorm, activation_bytes_per_observation, build_model,
                              match_optimizer_state_layout, note_step, to_device)
from hybridsim.optim import RMSpropTF
from hybridsim.runlock import LOCK_NAME, RunDirectoryBusy, RunLock, sees_holder
from hybridsim.scores import human_normalized
from hybridsim.storage import StorageError
from hybridsim.train_config import OBSERVATION_SHAPE, TrainConfig, life_lost, make_vector_env

CHECKPOINT_KEYS = ("model", "optimizer", "frames", "updates", "config", "num_actions", "obs_shape")
# Settings that define what is learned: a resumed run must keep the checkpoint's values
# (the budget, logging, threads, devices and backends may change; the backends are exact).
RESUME_MUST_MATCH = ("game", "model", "use_lstm", "obs_normalization", "optimizer", "schedule", "num_steps",
                     "frame_skip", "repeat_action_probability", "noop_max", "episodic_life",
                     "life_loss_terminal", "max_episode_frames", "bootstrap_truncation", "reward_clip", "seed",
                     "lr", "lr_decay", "rmsprop_alpha", "eps", "max_grad_norm", "entropy_coef", "value_coef",
                     "gamma", "clip_rho", "clip_pg_rho", "vtrace_lambda")
# ... and those that shape the updates of one schedule only
RESUME_MUST_MATCH_PER_SCHEDULE = {"a2c": ("num_minibatches",), "impala": ("learner_batch",)}
# Settings that may differ between the ranks of one job (each rank's own hardware).
PER_RANK_SETTINGS = ("num_threads", "torch_threads", "device", "fallback_dir")
# --keep-checkpoints: the folder of the kept checkpoints, in log_dir, and their names
KEPT_CHECKPOINTS = "checkpoints"
KEPT_NAME = re.compile(r"frames_(\d+)\.pt")  # frames_N.pt, N the run's frames then
KEPT_GLOB = "frames_*.pt"
REPLACED_BY_A_RESUME = "replaced-by-a-resume-"  # + time: kept ones a resume from an earlier one replaced
# Files of a run: a fresh run refuses a directory holding any of them.
TIMELINE_FILE = "timeline.json"  # the branches the run went along, written at each resume
RUN_FILES = ("checkpoint.pt", "metrics.csv", "trajectories.h5", "traj_rank*.h5", KEPT_CHECKPOINTS, TIMELINE_FILE)


def learner_hardware(device: torch.device) -> dict:
    """What a learner's rounding depends on besides its settings and thread count: the GPU,
    or the CPU model, the instruction set torch found and oneDNN's cap on it (its
    convolutions pick kernels by ISA)."""
    if device.type == "cuda":
        return {"gpu": torch.cuda.get_device_name(device)}
    return {"cpu": sysinfo.cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA"))}


def _describe_hardware(hardware: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in hardware.items() if v is not None) or "unknown hardware"


# What torch's weights-only unpickler needs for the numpy arrays a checkpoint holds
# (episode counters and the like): numpy's array rebuild function, its scalar function
# (np.float64(...) in a config a Python sweep built, e.g. from np.logspace: a dtype and its
# bytes) and the classes of the plain dtypes (bool, integers, floats, bytes). numpy 2 keeps
# the functions in numpy._core, numpy 1 in numpy.core: a checkpoint names its writer's.
_NUMPY_RECONSTRUCT = np.ndarray((0,)).__reduce__()[0]
_NUMPY_SCALAR = np.float64(0).__reduce__()[0]
_NUMPY_CORES = ("numpy.core", "numpy._core")
_PLAIN_DTYPE_CLASSES = tuple(dict.fromkeys(type(np.dtype(code)) for code in "?bBhHiIlLqQefdS"))
CHECKPOINT_NUMPY_GLOBALS = [_NUMPY_RECONSTRUCT, _NUMPY_SCALAR, np.ndarray, np.dtype, *_PLAIN_DTYPE_CLASSES,
                            *((f, f"{core}.multiarray.{f.__name__}") for core in _NUMPY_CORES
                              for f in (_NUMPY_RECONSTRUCT, _NUMPY_SCALAR))]
# A Python caller's pathlib paths in the configs of checkpoints written before they were
# made text (pathlib.PosixPath, pathlib._local.PosixPath from Python 3.13): read as text.
CHECKPOINT_GLOBALS = CHECKPOINT_NUMPY_GLOBALS + [(pathlib.PosixPath, f"{module}.PosixPath")
                                                 for module in ("pathlib", "pathlib._local")]


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """The unpickler of the bytes a checkpoint carries pickled (the impala trajectories in
    flight): numpy arrays, numpy scalars and plain values, like the weights-only load of the
    checkpoint around them; any other global is refused before it is called."""
    ALLOWED = {("numpy", "dtype"), ("numpy", "ndarray"),
               *((f"{core}.multiarray", f.__name__) for core in _NUMPY_CORES for f in (_NUMPY_RECONSTRUCT, _NUMPY_SCALAR)),
               *((f"{core}.numeric", "_frombuffer") for core in _NUMPY_CORES),  # protocol 5's arrays
               *(("numpy.dtypes", dtype_class.__name__) for dtype_class in _PLAIN_DTYPE_CLASSES)}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"Unsupported global: {module}.{name}")
        return super().find_class(module, name)


def _unpickle_arrays(data: bytes):
    import io
    return _ArraysOnlyUnpickler(io.BytesIO(data)).load()


def _kept_by_frames(folder: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    """(frames, path) of each checkpoint train --keep-checkpoints kept in folder, in order."""
    return sorted((int(match.group(1)), path) for path in pathlib.Path(folder).glob(KEPT_GLOB)
                  if (match := KEPT_NAME.fullmatch(path.name)))


def kept_checkpoints(folder: pathlib.Path) -> list[pathlib.Path]:
    """The checkpoints train --keep-checkpoints kept in folder, in the order of their frames."""
    return [path for _, path in _kept_by_frames(folder)]


def _not_a_file(path: pathlib.Path) -> str:
    """Why path is not a regular file, as "is ..." or "does not exist"."""
    if path.is_dir():
        return "is a directory"
    if path.is_symlink() and not path.exists():
        return f"is a symbolic link to {os.readlink(path)}, which does not exist"
    return "is not a regular file" if path.exists() else "does not exist"


def _kept_advice(path: pathlib.Path) -> str:
    """For a checkpoint.pt that is missing or damaged: where --keep-checkpoints kept earlier
    ones, and how to go on from one; "" if it kept none."""
    if path.name != "checkpoint.pt":
        return ""
    if kept := kept_checkpoints(path.parent / KEPT_CHECKPOINTS):
        return (f"; --keep-checkpoints kept {len(kept)} in {kept[0].parent} (the latest is {kept[-1].name}): "
                f"copy one to {path} to --resume from it, or eval them by name")
    if kept := kept_checkpoints(path.parent):  # RUN/checkpoints given for RUN
        return f"; {path.parent} holds {len(kept)} kept checkpoints (the latest is {kept[-1].name}): name one"
    return ""


def read_checkpoint(path, map_location=None) -> dict:
    """A checkpoint written by `hybridsim train`, or an error naming the file and the problem."""
    path = pathlib.Path(path)
    if not path.is_file():
        what = _not_a_file(path) + (", not a checkpoint file" if path.is_dir() else "")
        raise FileNotFoundError(f"no checkpoint file at {path}: it {what}{_kept_advice(path)}")
    if not hasattr(torch.serialization, "safe_globals"):  # older torch has no weights-only allowlist
        raise RuntimeError(f"torch {torch.__version__} cannot load a checkpoint weights-only with numpy "
                           f"arrays: hybridsim needs torch >= 2.6 (setup.cfg)")
    try:
        # weights_only: a checkpoint from elsewhere (eval of a colleague's run) cannot run
        # code while it loads; ours hold tensors, plain Python values and a few numpy arrays.
        with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
            state = torch.load(path, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as exc:
        # torch's message wraps the unpickler's own line in advice to load unsafely; a
        # global it refuses is named "GLOBAL module.name" (allowlistable or blocked)
        refused = re.search(r"GLOBAL ([\w.]+)", str(exc))
        if refused:
            raise ValueError(f"{path}: not a hybridsim checkpoint: it holds Python objects no hybridsim "
                             f"checkpoint holds (Unsupported global: {refused.group(1)}); refused without "
                             f"running their code") from None
        detail = str(exc).split("WeightsUnpickler error:", 1)[-1].split("Check the documentation", 1)[0]
        raise ValueError(f"{path}: not a readable hybridsim checkpoint ({' '.join(detail.split()) or 'UnpicklingError'})"
                         f"{_kept_advice(path)}") from None
    except Exception as exc:  # truncated zip, empty file: torch raises many kinds
        raise ValueError(f"{path}: not a readable hybridsim checkpoint ({type(exc).__name__}: "
                         f"{str(exc) or 'no detail'}){_kept_advice(path)}") from None
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"{path}: not a hybridsim checkpoint (missing {', '.join(missing)})")
    if not isinstance(state["config"], dict):
        raise ValueError(f"{path}: not a hybridsim checkpoint (its config is a "
                         f"{type(state['config']).__name__})")
    # paths a Python caller gave, as checkpoints before plain configs hold them: text, as now
    state["config"] = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in state["config"].items()}
    if "digest" in state and checkpoint_digest(state) != state["digest"]:
        advice = _kept_advice(path) or (
            "; that point of the run is lost: the other kept checkpoints beside it are copies of their own"
            if KEPT_NAME.fullmatch(path.name) else
            "; train keeps one checkpoint, each save replacing it: restore it from a backup of the run directory, "
            "or start a new run" if path.name == "checkpoint.pt" else "; restore it from where it came from")
        raise ValueError(f"{path}: damaged checkpoint: its network, optimizer state, RNG state, action "
                         f"counters, recurrent memory or lives differ from what was written (digest mismatch; "
                         f"torch.load does not check the tensors' bytes){advice}")
    problem = _checkpoint_problem(state)
    if problem:
        raise ValueError(f"{path}: damaged checkpoint: {problem}")
    return state


DIGESTED_FIELDS = ("model", "optimizer", "torch_rng", "action_counters")


def has_nonfinite_weights(network) -> bool:
    """NaN or infinite values in a network's floating-point parameters or buffers (a module,
    or its state dict as a checkpoint holds it)."""
    weights = network.state_dict() if isinstance(network, torch.nn.Module) else network
    return not all(bool(torch.isfinite(t).all()) for t in weights.values() if torch.is_tensor(t) and t.is_floating_point())


def checkpoint_digest(state: dict) -> str:
    """blake2b of a checkpoint's tensors and arrays that load silently when damaged (the
    network, optimizer state, torch RNG, action counters, recurrent memory, lives after the
    last steps): names, dtypes, shapes, bytes."""
    h = hashlib.blake2b(digest_size=16)

    def feed(x):
        if isinstance(x, torch.Tensor):
            flat = x.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{flat.dtype}{tuple(x.shape)}".encode())
            h.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(x, np.ndarray):
            h.update(f"N{x.dtype}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        elif isinstance(x, dict):
            for key in sorted(x, key=repr):
                h.update(repr(key).encode())
                feed(x[key])
        elif isinstance(x, (list, tuple)):
            h.update(f"L{len(x)}".encode())
            for item in x:
                feed(item)
        else:
            h.update(repr(x).encode())
    for field in DIGESTED_FIELDS:
        h.update(field.encode())
        feed(state.get(field))
    # a recurrent network's memory rows and --life-loss-terminal's lives (rank states of
    # checkpoints without them add nothing, so their digests are what they were)
    rank_states = state.get("rank_states")
    rank_states = rank_states if isinstance(rank_states, list) else []
    for name in ("core_memory", "last_lives"):
        arrays = [r.get(name) for r in rank_states if isinstance(r, dict)]
        if any(a is not None for a in arrays):
            h.update(name.encode())
            feed(arrays)
    return h.hexdigest()


def _checkpoint_problem(state: dict) -> str | None:
    """What is wrong with a loaded checkpoint's fields, before anything uses them: its
    config's values have their settings' kinds (text, number, flag) and name a game, the
    counters are counts, the network a state dict."""
    config = state["config"]
    if not isinstance(config.get("game"), str):
        return f"its config names no game (game: {config.get('game')!r})"
    for field in dataclasses.fields(TrainConfig):
        default, value = field.default, config.get(field.name)
        if field.name not in config or default is None or default is dataclasses.MISSING:
            continue
        if isinstance(default, bool):
            fits, kind = isinstance(value, (bool, np.bool_)), "true/false"
        elif isinstance(default, (int, float)):
            fits, kind = isinstance(value, numbers.Real), "number"  # numpy's too
        else:
            fits, kind = isinstance(value, type(default)), type(default).__name__
        if not fits:
            return f"config {field.name} is {value!r}, not a {kind} value"
    for key in ("frames", "updates"):
        if isinstance(state[key], bool) or not isinstance(state[key], int) or state[key] < 0:
            return f"{key} is {state[key]!r}, not a count"
    if not isinstance(state["model"], dict):
        return f"its network is a {type(state['model']).__name__}, not a state dict"
    if "timeline" in state and not _is_timeline(state["timeline"]):
        return f"its timeline is {state['timeline']!r}, not a list of [frame, id] branches"
    return None


def _is_timeline(value) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(e, list) and len(e) == 2 and type(e[0]) is int and isinstance(e[1], str) for e in value)


def _timeline_before(timeline: list, frames: int) -> list:
    """The branches of a timeline that the run's first `frames` frames went through."""
    return [entry for entry in timeline if entry[0] < frames]


def _record_timeline(log_dir: pathlib.Path, timeline: list) -> None:
    try:
        storage.atomic_write(log_dir / TIMELINE_FILE, lambda fh: fh.write(json.dumps({"timeline": timeline}).encode()))
    except OSError as exc:  # the run goes on; only a later resume of a replaced branch would go unrefused
        print(f"warning: {log_dir / TIMELINE_FILE}: could not record this resume's branch ({exc})", file=sys.stderr)


def _recorded_timeline(log_dir: pathlib.Path) -> list | None:
    """The branches the run in log_dir went along (TIMELINE_FILE, written at each resume);
    None where no resume wrote it (a run that never resumed has one branch) or it does not
    read as one (then nothing is checked against it)."""
    try:
        timeline = json.loads((log_dir / TIMELINE_FILE).read_text())["timeline"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return timeline if _is_timeline(timeline) else None


def existing_run_files(log_dir: pathlib.Path) -> list[str]:
    found = {p.name for pattern in RUN_FILES for p in log_dir.glob(pattern)}
    kept = log_dir / KEPT_CHECKPOINTS
    # a checkpoints/ folder is a run's only when it holds what --keep-checkpoints writes
    # (another tool's checkpoints/ in a project directory is not moved aside)
    if KEPT_CHECKPOINTS in found and not (kept.is_dir() and any(
            re.fullmatch(KEPT_NAME.pattern + r"(\.\d+\.\d+\.tmp)?", p.name) or p.name.startswith(REPLACED_BY_A_RESUME)
            for p in kept.iterdir())):
        found.discard(KEPT_CHECKPOINTS)
    return sorted(found)


def _holds_data(path: pathlib.Path) -> bool:
    """Whether a run file holds anything worth keeping (a damaged one counts as holding)."""
    if path.name == "checkpoint.pt":
        return True
    if path.is_dir():  # the kept checkpoints
        return any(path.iterdir())
    if path.suffix == ".csv":
        with open(path, "rb") as f:
            return len(f.read(1 << 16).splitlines()) > 1  # more than the header
    try:
        from hybridsim.trajlog import open_unlocked
        with open_unlocked(path) as f:
            return bool(f["steps/action"].shape[0] or f["episodes/env_id"].shape[0])
    except Exception:
        return True


def _unused_timestamped(folder: pathlib.Path, prefix: str) -> pathlib.Path:
    """folder/PREFIXYYYYmmdd-HHMMSS, with x appended until no such path exists: where files
    set aside go."""
    path = folder / time.strftime(f"{prefix}%Y%m%d-%H%M%S")
    while path.exists():
        path = path.with_name(path.name + "x")
    return path


def _fresh_run_decision(log_dir: pathlib.Path):
    """None (the directory holds no run), ("refuse", why) or ("moved", what was done). A run
    with a checkpoint (checkpoint.pt, or kept ones) is never touched (--resume continues it).
    A run that stopped before its first checkpoint (killed, or failed at start) cannot be resumed: its files move to
    log_dir/previous-run-TIME/ and the new run starts, so a requeued job can start over and
    nothing written is lost."""
    found = existing_run_files(log_dir)
    checkpoint = log_dir / "checkpoint.pt"
    if os.path.lexists(checkpoint) and not checkpoint.is_file():  # a link to a file system not mounted here?
        return ("refuse", f"{log_dir} holds a run whose checkpoint.pt {_not_a_file(checkpoint)}: restore it "
                          f"and --resume, or choose another --log-dir")
    if not found:
        return None
    if "checkpoint.pt" in found:
        return ("refuse", f"{log_dir} already holds a run ({', '.join(found)}); continue it "
                          f"with --resume, or choose another --log-dir")
    if kept := kept_checkpoints(log_dir / KEPT_CHECKPOINTS):  # it wrote checkpoints: resumable from one
        return ("refuse", f"{log_dir} holds a run without its checkpoint.pt but with {len(kept)} kept "
                          f"checkpoints in {kept[0].parent} (the latest is {kept[-1].name}): copy the one to go "
                          f"on from to {checkpoint} and --resume, or choose another --log-dir")
    if not any(_holds_data(log_dir / name) for name in found):
        return None  # a start that failed before logging anything: nothing to keep
    aside = _unused_timestamped(log_dir, "previous-run-")
    aside.mkdir()
    for name in found + [n for n in ("tensorboard", "learning_curve.png") if (log_dir / n).exists()]:
        (log_dir / name).rename(aside / name)
    return ("moved", f"note: {log_dir} held a run that wrote no checkpoint, so it cannot be "
                     f"resumed; its files ({', '.join(found)}) are now in {aside}, and this run "
                     f"starts afresh")


def _plain_config(cfg: TrainConfig) -> dict:
    """The settings as a checkpoint holds them: plain Python values, which the weights-only
    load reads back (a Python caller's numpy scalars and paths become numbers and text)."""
    def plain(value):
        if isinstance(value, np.generic):
            return value.item()
        return os.fspath(value) if isinstance(value, os.PathLike) else value
    return {name: plain(value) for name, value in dataclasses.asdict(cfg).items()}


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _host(array) -> np.ndarray:
    """numpy for a numpy array or a torch tensor on any device."""
    return array.cpu().numpy() if torch.is_tensor(array) else np.asarray(array)


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    """The learner's device. `auto` and a bare `cuda` take GPU local_rank mod count, so the
    ranks of a node spread over its visible GPUs (NCCL refuses two ranks on one GPU); a
    launcher that already gave each rank one GPU (mpi_launch/rank_env.sh) leaves count 1."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    usable = "use cpu, cuda, cuda:K or auto"
    try:
        device = torch.device(name)
    except RuntimeError:  # torch's message lists every device type it knows
        raise ValueError(f"device {name!r} is not a device name; {usable}") from None
    if device.type not in ("cpu", "cuda"):  # meta holds no data, the others are not supported
        raise ValueError(f"device {name!r}: the learner runs on a CPU or a CUDA GPU; {usable}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r}: this torch build sees no CUDA device "
                             f"(torch {torch.__version__}, CUDA {torch.version.cuda}); use cpu or auto")
        count = torch.cuda.device_count()
        if device.index is None:
            device = torch.device("cuda", local_rank % count)
        elif device.index >= count:
            raise ValueError(f"device {name!r}: only {count} CUDA device(s) visible")
        torch.cuda.set_device(device)  # kernels and NCCL without an explicit index use it too
    return device


def use_deterministic_cuda() -> None:
    """cuDNN picks convolution algorithms by timing them and some of its backward kernels
    add with atomics, so the same seed gives other weights run to run; ask for
    deterministic kernels (PyTorch's "Reproducibility" notes). cuBLAS needs a fixed
    workspace for that, set before its first use in this process."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)  # warn where an op has none
    # that mode also fills every torch.empty with NaN, a memset per allocation that only
    # matters to code reading memory it never wrote
    torch.utils.deterministic.fill_uninitialized_memory = False


class EpisodeTracker:
    """Raw (unclipped) returns and lengths of the episodes each environment finishes."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.start_frames = np.zeros(num_envs, dtype=np.int64)
        self.episode_ids = np.zeros(num_envs, dtype=np.int64)
        self.finished: list[tuple] = []  # (env, episode_id, return, length, start, end)

    def update(self, env_ids, rewards, dones, frame):
        self.returns[env_ids] += rewards
        self.lengths[env_ids] += 1
        for env in np.asarray(env_ids)[np.asarray(dones, bool)]:
            if self.start_frames[env] >= 0:  # -1: began before a checkpoint that lacks its start
                self.finished.append((int(env), int(self.episode_ids[env]), float(self.returns[env]),
                                      int(self.lengths[env]), int(self.start_frames[env]), int(frame)))
            self.returns[env] = 0.0
            self.lengths[env] = 0
            self.start_frames[env] = frame
            self.episode_ids[env] += 1

    def state(self) -> dict:
        """The running episodes (return, length, start, id per env), for a checkpoint."""
        return {"returns": self.returns.copy(), "lengths": self.lengths.copy(),
                "start_frames": self.start_frames.copy(), "episode_ids": self.episode_ids.copy()}

    def load(self, state: dict):
        for name in ("returns", "lengths", "start_frames", "episode_ids"):
            getattr(self, name)[...] = state[name]



def _impala_env_batch(env_batch_size: int, num_envs: int) -> int:
    """The asynchronous vector env's batch in the impala schedule (0: num_envs / 2)."""
    return int(env_batch_size or max(1, int(num_envs) // 2))


def _decoded_env_state(rank_state: dict, path, rank: int) -> bytes | None:
    """A checkpointed rank's environment state as get_state() returned it (checkpoints
    before the codec field hold it uncompressed)."""
    env_state, codec = rank_state.get("env_state"), rank_state.get("env_state_codec")
    if env_state is None or codec is None:
        return env_state
    if codec != "zlib":
        raise ValueError(f"--resume: {path}: rank {rank}'s environment state is in an unknown "
                         f"encoding {codec!r} (a checkpoint from a newer hybridsim?)")
    try:
        return zlib.decompress(env_state)
    except (zlib.error, TypeError) as exc:
        raise ValueError(f"--resume: {path}: rank {rank}'s environment state is damaged (it does "
                         f"not decompress: {exc}); resume from an intact checkpoint, or start a "
                         f"new run in another --log-dir") from None


class TrainingDiverged(RuntimeError):
    """The gradients are NaN or infinite: the update is not applied and the run stops."""


METRICS_HEADER = ("frames", "updates", "seconds", "fps", "mean_return_100", "episodes", "lr", "policy_loss",
                  "baseline_loss", "entropy")


def _leave_tensorboard_write_errors_to_its_flush() -> None:
    """TensorBoard's writer thread hands an OSError (a full disk) to the next flush, which
    the log step reports by name, and then re-raises it, so Python printed the thread's
    traceback beside that report. Every log step flushes, so none is left unreported.
    Other threads' exceptions, and other exceptions, reach the hook as before."""
    previous = threading.excepthook
    if getattr(previous, "hybridsim_tensorboard", False):
        return

    def hook(args):
        from_tensorboard = type(args.thread).__module__.startswith("tensorboard.")
        if not (from_tensorboard and isinstance(args.exc_value, OSError)):
            previous(args)

    hook.hybridsim_tensorboard = True
    threading.excepthook = hook


def _check_metrics_file(path: pathlib.Path) -> None:
    """A resumed run appends to metrics.csv: one that is not hybridsim's (another header,
    not text) is refused before anything is written, so nothing in it is lost."""
    if not path.is_file() or path.stat().st_size == 0:
        return  # none, or empty: a new one is started
    try:
        with open(path, encoding="utf-8") as fh:
            header = fh.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--resume: {path}: not readable as hybridsim's metrics ({exc}); move it "
                         f"aside to resume (a new one is started)") from None
    if tuple(next(csv.reader([header]), [])) != METRICS_HEADER:
        raise ValueError(f"--resume: {path}: its first line is not hybridsim's metrics header "
                         f"({header.strip()[:80]!r}); move it aside to resume (a new one is started)")


class BudgetReached(Exception):
    """--resume of a run that has already trained its --total-frames (a finished Slurm
    array task resubmitted with the rest): nothing to train, and not an error.
    `completed` says what of the last job's closing it finished (trajlog.complete_master)."""
    completed: str | None = None


def fallback_checkpoint_name(log_dir) -> str:
    """File name of a run's final checkpoint outside a full log_dir: the directory's name
    for people, a hash of its full path so that runs/a/run and runs/b/run (or two users'
    runs in a shared /tmp) never overwrite each other's."""
    import hashlib
    resolved = pathlib.Path(log_dir).resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return f"hybridsim-{resolved.name}-{digest}-checkpoint.pt"


class Trainer:
    watchdog: dist.ProgressWatchdog | None = None  # under MPI, while train() runs
    run_lock: RunLock | None = None  # rank 0's hold on the run directory (hybridsim.runlock)

    def __init__(self, cfg: TrainConfig, comm=None):
        cfg.validate()
        self.cfg = cfg
        self.comm = comm if comm is not None else dist.init_comm()
        rank = self.rank = self.comm.rank
        self.world_size = self.comm.size
        self.log_dir = pathlib.Path(cfg.log_dir)
        # Start-up has collectives too (settings, the run directory, NCCL, the first
        # parameters): a rank stuck before one (a slow file system, a kernel compile, a
        # hang) would leave the others waiting forever, so the watchdog covers it as well.
        # A resume may wait for a killed job's trajectory file to go quiet
        # (trajlog.clear_stale_write_flags) while the other ranks wait in a collective.
        self._quiet_wait = 0.0
        if cfg.resume and cfg.log_trajectories:
            from hybridsim import trajlog
            self._quiet_wait = trajlog.quiet_seconds(cfg.log_flush_seconds)
        startup = (dist.ProgressWatchdog(rank, cfg.stall_timeout, what="starting up",
                                         first_beat_extra_seconds=self._quiet_wait,
                                         comm=self.comm).start()
                   if self.world_size > 1 else None)
        try:
            self._start(cfg, rank)
        finally:
            if startup is not None:
                startup.close()

    def _start(self, cfg: TrainConfig, rank: int):
        # Every rank must run the same settings: different budgets or schedules would leave
        # the ranks in different collectives (a hang), different log dirs split the run.
        configs = self.comm.gather(dataclasses.asdict(cfg))
        mismatch = None
        if rank == 0:
            differ = sorted({k for other in configs[1:] for k, v in other.items()
                             if configs[0].get(k) != v and k not in PER_RANK_SETTINGS})
            if differ:
                mismatch = (f"the ranks were started with different settings ({', '.join(differ)}); "
                            f"every rank must run the same command line")
        mismatch = self.comm.bcast(mismatch)
        if mismatch:
            raise ValueError(mismatch)
        if cfg.seed + self.world_size * cfg.num_envs > 2**31:
            raise ValueError(f"seed {cfg.seed} + {self.world_size} ranks x {cfg.num_envs} environments "
                             f"must stay within 2**31 (environment seeds are C ints)")
        # a run that never started leaves no folder it made (log_dir's, rank 0's --fallback-dir)
        with storage.new_directories_undone_on_error(self.log_dir, cfg.fallback_dir if rank == 0 else None):
            # Rank 0 takes the run directory (one job per directory); every rank checks that it
            # sees that directory; then rank 0 looks at it and decides for every rank (each bcast
            # also keeps the others from going on before rank 0: from looking after it moved files).
            self.run_lock = None
            taken = None
            if rank == 0:
                try:
                    if cfg.resume and not self.log_dir.is_dir():  # made below: say so, make none
                        why = "is not a directory" if self.log_dir.exists() else "does not exist"
                        raise FileNotFoundError(f"--resume: no checkpoint at {self.checkpoint_path()} "
                                                f"({self.log_dir} {why})")
                    _make_run_directory(self.log_dir)
                    self.run_lock = RunLock(self.log_dir, notice=_note).acquire()
                    removed = (storage.remove_stale_temporaries(self.log_dir, ("checkpoint.pt", "metrics.csv"))
                               if cfg.resume else [])  # the run's own files, of a directory that holds it
                    if cfg.resume and (self.log_dir / KEPT_CHECKPOINTS).is_dir():
                        removed += [f"{KEPT_CHECKPOINTS}/{name}" for name in storage.remove_stale_temporaries(
                            self.log_dir / KEPT_CHECKPOINTS, KEPT_NAME.fullmatch)]
                    if removed:
                        _note(f"note: removed {', '.join(removed)} from {self.log_dir}: half-written files "
                              f"of a job killed while writing them")
                except FileNotFoundError as exc:
                    taken = ("missing", str(exc))
                except (RunDirectoryBusy, OSError) as exc:
                    taken = ("busy", str(exc) if isinstance(exc, RunDirectoryBusy)
                             else f"{self.log_dir}: cannot take the run directory: {exc}")
            taken = self.comm.bcast(taken)
            try:
                if taken and taken[0] == "busy":
                    raise RunDirectoryBusy(taken[1])
                if taken and taken[0] == "missing":
                    raise FileNotFoundError(taken[1])
                if self.world_size > 1:  # before anything is moved aside for a run that cannot start
                    self._check_shared_run_directory()
                decision = None
                kept_folder = self.log_dir / KEPT_CHECKPOINTS
                if rank == 0 and cfg.keep_checkpoints and kept_folder.exists() and not kept_folder.is_dir():
                    decision = ("refuse", f"{kept_folder} is a file, not the folder --keep-checkpoints keeps "
                                          f"checkpoints in: move it away, or choose another --log-dir")
                elif rank == 0 and not cfg.resume:
                    try:
                        decision = _fresh_run_decision(self.log_dir)
                    except OSError as exc:
                        decision = ("refuse", f"{self.log_dir}: cannot set the earlier run's files aside: {exc}")
                decision = self.comm.bcast(decision)
                if decision and decision[0] == "refuse":
                    raise FileExistsError(decision[1])
                if decision and decision[0] == "moved" and rank == 0:
                    print(decision[1], file=sys.stderr, flush=True)
                self.log_dir.mkdir(parents=True, exist_ok=True)
                self._setup(cfg, rank)
            except BaseException:
                self.close()
                raise

    def _check_shared_run_directory(self) -> None:
        """Every rank must see the run directory rank 0 took: where --log-dir is node-local,
        the other nodes' trajectory files stay on them (no master file) and a --resume
        there finds no checkpoint."""
        holder = self.comm.bcast(self.run_lock.holder() if self.rank == 0 else None)
        # looking stays well inside the start-up watchdog's --stall-timeout (0: off)
        wait = min(15.0, self.cfg.stall_timeout / 3) if self.cfg.stall_timeout else 15.0
        blind = (None if self.rank == 0 or sees_holder(self.log_dir, holder, wait_seconds=wait)
                 else socket.gethostname())
        gathered = self.comm.gather(blind)  # one entry per rank on rank 0
        message = None
        if self.rank == 0:
            ranks = [(r, host) for r, host in enumerate(gathered) if host]
            if ranks:
                where = ", ".join(f"rank {r} on {host}" for r, host in ranks[:8])
                more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
                message = (f"--log-dir {self.log_dir} is not one directory for all ranks: {where}{more} "
                           f"do not see the run directory that rank 0 (on {holder['host']}) took "
                           f"(its {LOCK_NAME}). Their trajectory files would stay on their nodes and "
                           f"a --resume would find no checkpoint there: use a directory on a file "
                           f"system that every node mounts")
        message = self.comm.bcast(message)
        if message:
            raise ValueError(message)

    def _check_rollout_memory(self, cfg: TrainConfig) -> None:
        """A rollout that cannot fit the learner device's memory is a typo: --num-steps
        100000000 reached torch's allocator with 5.6 TB; 100000 passed a check of the
        observations alone and spent minutes in the learner's first minibatch, deaf to
        SIGTERM, before the allocator refused 45 GB."""
        if self.device.type == "cuda":
            memory, where = torch.cuda.get_device_properties(self.device).total_memory, str(self.device)
        else:
            try:
                memory, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine"
            except (ValueError, OSError):
                return
        observations = cfg.rollout_observation_bytes()
        if observations > memory:
            raise ValueError(f"num_steps {cfg.num_steps} x {cfg.rollout_width()} trajectories: the rollout's "
                             f"observations alone take {observations / 2**30:,.1f} GiB, more than the "
                             f"{memory / 2**30:,.1f} GiB of {where}")
        minibatches = cfg.num_minibatches if cfg.schedule == "a2c" else 1
        batch = (cfg.num_steps + 1) * -(-cfg.rollout_width() // minibatches)
        probe = build_model(cfg.model, OBSERVATION_SHAPE, NUM_ACTIONS, cfg.obs_normalization, cfg.use_lstm)
        learner = batch * activation_bytes_per_observation(probe, OBSERVATION_SHAPE)
        if observations + learner > memory:
            raise ValueError(f"num_steps {cfg.num_steps} x {cfg.rollout_width()} trajectories: the rollout's "
                             f"observations ({observations / 2**30:,.1f} GiB) and the {cfg.model} network's "
                             f"activations for a learner batch of {batch:,} observations (at least "
                             f"{learner / 2**30:,.1f} GiB) exceed the {memory / 2**30:,.1f} GiB of {where}: "
                             f"lower --num-steps" + (", or raise --num-minibatches" if cfg.schedule == "a2c"
                                                     else ", or --learner-batch"))

    def close(self) -> None:
        """Give up the run directory (train() does at its end; a Trainer that is not
        trained holds it until this, or until the process exits)."""
        if self.run_lock is not None:
            self.run_lock.release()
            self.run_lock = None

    def _setup(self, cfg: TrainConfig, rank: int):
        if rank == 0 and cfg.fallback_dir:  # used only once log_dir is full: a bad one is found now
            storage.check_output_directory(cfg.fallback_dir, "--fallback-dir")
        # the local rank also spreads independent tasks (HYBRIDSIM_SINGLE_PROCESS) over GPUs
        self.device = pick_device(cfg.device, dist.local_rank())
        self._check_rollout_memory(cfg)
        if self.device.type == "cuda" and cfg.cuda_deterministic:
            use_deterministic_cuda()
        self.comm = dist.with_gradient_backend(self.comm, cfg.allreduce, self.device)
        if rank == 0 and self.world_size > 1:
            print(f"{self.world_size} ranks; gradients averaged by {self.comm.gradient_path}",
                  flush=True)
        torch.set_num_threads(cfg.torch_threads or len(sysinfo.cores_to_use()))
        torch.manual_seed(cfg.seed)
        # Global env ids rank*N..rank*N+N-1; env e is seeded seed + e and draws its action
        # noise from (seed, e, its own step counter), so results do not depend on the split.
        self.env_ids = dist.env_block(rank, cfg.num_envs)
        self.env_seed = cfg.seed + int(self.env_ids[0])
        # names the run in every rank file (a resume keeps it): readers refuse a directory
        # whose files come from different runs
        self.run_id = self.comm.bcast(uuid.uuid4().hex if rank == 0 else None)
        # [frame, id] from the start and from each resume (a branch: the rows and kept
        # checkpoints after its frame are replaced): a replaced branch's checkpoint is not
        # resumed into the one that replaced it (_resumed_timeline)
        self.timeline = [[0, self.run_id]]
        self.action_counters = np.zeros(cfg.num_envs, dtype=np.uint64)
        env_batch = 0
        if cfg.schedule == "impala":
            env_batch = _impala_env_batch(cfg.env_batch_size, cfg.num_envs)
        self.env_batch = env_batch or cfg.num_envs
        self.env = make_vector_env(cfg, self.env_seed, env_batch, self.device)
        self.num_actions = int(self.env.single_action_space.n)
        self.obs_shape = tuple(self.env.single_observation_space.shape)
        self.model = to_device(build_model(cfg.model, self.obs_shape, self.num_actions,
                                           cfg.obs_normalization, cfg.use_lstm), self.device)
        # a recurrent network's memory of each environment (models.py; None: feed-forward)
        self.memory = self.model.initial_memory(cfg.num_envs, self.device)
        self._resume_memory = None  # the checkpoint's, restored with the environments
        self.comm.broadcast_parameters(self.model)
        if cfg.optimizer == "rmsprop_tf":
            self.optimizer = RMSpropTF(self.model.parameters(), lr=cfg.lr, alpha=cfg.rmsprop_alpha,
                                       eps=cfg.eps)
        elif cfg.optimizer == "rmsprop":
            self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=cfg.lr,
                                                 alpha=cfg.rmsprop_alpha, eps=cfg.eps)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, eps=cfg.eps)
        self.frames = 0  # over all ranks
        self.local_frames = 0  # this rank's frames not yet added to self.frames
        self.updates = 0
        self.episodes = EpisodeTracker(cfg.num_envs)
        # each environment's lives after its last step (-1: none seen yet), for life_loss_terminal
        self.last_lives = np.full(cfg.num_envs, -1, np.int64)
        self._resume_lives = None  # the checkpoint's, restored with the environments
        self._rank_states: list[dict] | None = None  # every rank's _rank_state, on rank 0
        self.all_episodes: list[tuple] = []  # every rank's finished episodes, on rank 0
        self.stop_requested = False  # set by request_stop (SIGUSR1/SIGTERM before a time limit)
        self.stop_reason = None  # None (budget reached), "signal" or "storage"
        self.storage_failure: StorageError | None = None  # first failed write of this rank
        self.storage_notes: list[str] = []  # what the stop after a failed write did and did not save
        self.final_checkpoint: pathlib.Path | None = None
        self.storage_report: list[str] = []  # every rank's failed writes and notes, after a run
        # whether failed writes were a full disk (or quota): this rank's, then (after a run) every rank's
        self._failed_writes_full: set[bool] = set()
        self.storage_failures_full: set[bool] = set()
        self.trajectories_closed: bool | None = None  # every rank file closed cleanly (None: no logs)
        self.reserve: storage.DiskReserve | None = None
        self.last_losses: dict[str, float] = {}
        self.traj = None
        self.master_written = False  # this job (re)wrote the trajectory master file
        # on resume: this rank's trajectory rows at the checkpoint, and whether its
        # environments restart from their seeds (trajlog records a gap or a restart)
        self._resume_traj_rows = None
        self._resume_traj_file_id = None  # the file the checkpoint's rows went into
        # on a resume with fewer ranks, rank 0's list of (path, trajectory fields of the
        # checkpoint) of the ranks this job lacks, whose files it cuts back and closes
        self._retired_rank_files: list = []
        self._resume_traj_logged_until = None  # the checkpoint frame its rows reach
        self._resume_restarts_envs = False
        self._resume_impala = None  # the checkpoint's checked impala state, for restored envs
        self._loop_state: dict = {}
        self.tb = None
        self.metrics_file = None
        self._metrics_frames = None  # frames of the last metrics row
        self.loop_seconds = None  # the training loop's, once it ends

    # ----- acting and learning -------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, local_ids=None):
        """Sample actions for the environments `local_ids` (default: all, in order)."""
        local_ids = np.arange(len(obs)) if local_ids is None else np.asarray(local_ids)
        logits, values = self.model.act_step(self._on_device(obs), self.memory, local_ids)
        logits = logits.float().cpu().numpy()
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        cdf = np.cumsum(probs / probs.sum(-1, keepdims=True), axis=-1)
        u = dist.counter_uniforms(self.cfg.seed, self.env_ids[local_ids],
                                  self.action_counters[local_ids])
        self.action_counters[local_ids] += np.uint64(1)
        actions = np.minimum((cdf < u[:, None]).sum(-1), self.num_actions - 1)
        return actions.astype(np.int64), logits, values.float().cpu().numpy()

    def _on_device(self, array) -> torch.Tensor:
        """A numpy array or a tensor (a gpu backend's batch) as a tensor on the learner's device."""
        tensor = array if torch.is_tensor(array) else torch.from_numpy(array)
        return tensor.to(self.device, non_blocking=True)

    def _update_obs_statistics(self, obs: torch.Tensor):
        """The running input statistics take this update's observations, from every rank
        (summed moments), so all ranks keep the same statistics, as one rank with all
        environments would."""
        moments = RunningObservationNorm.moments(obs)
        if self.world_size > 1:
            moments = torch.from_numpy(self.comm.allreduce_sum(moments.cpu().numpy()))
        self.model.normalize.update(moments)

    def learn(self, obs, actions, behavior_logits, rewards, dones, memory=None, truncation_values=None):
        """One update on a [T(+1), B] batch: obs [T+1, B, ...], the rest [T, B]; a recurrent
        network's memory [B, M] is each trajectory's at its first step; truncation_values
        [T, B] (bootstrap_truncation) V(final observation) where the time limit cut, else 0."""
        cfg = self.cfg
        T, B = actions.shape
        obs_t = self._on_device(obs)
        flat = obs_t.reshape(-1, *obs_t.shape[2:])  # [(T + 1) * B, ...], time-major
        raw_rewards = torch.from_numpy(rewards).float().to(self.device)
        dones_t = torch.from_numpy(dones).float().to(self.device)
        actions_t = torch.from_numpy(actions).to(self.device)
        if memory is None:
            logits, values = self.model(flat)
            logits = logits.reshape(T + 1, B, -1)
            values = values.reshape(T + 1, B)
        else:
            logits, values, _ = self.model.unroll(obs_t, memory, actions_t, raw_rewards, dones_t)
        rewards_t = raw_rewards.clamp(-1.0, 1.0) if cfg.reward_clip else raw_rewards
        if truncation_values is not None:  # the cut step's return goes on (its done stays 1)
            rewards_t = rewards_t + cfg.gamma * torch.from_numpy(truncation_values).float().to(self.device)
        discounts = cfg.gamma * (1.0 - dones_t)
        out = vtrace.from_logits(
            behavior_policy_logits=torch.from_numpy(behavior_logits).to(self.device),
            target_policy_logits=logits[:T], actions=actions_t,
            discounts=discounts, rewards=rewards_t, values=values[:T].detach(),
            bootstrap_value=values[T].detach(), clip_rho_threshold=cfg.clip_rho,
            clip_pg_rho_threshold=cfg.clip_pg_rho, lambda_=cfg.vtrace_lambda)
        pg_loss = -(out.target_action_log_probs * out.pg_advantages).mean()
        baseline_loss = 0.5 * ((out.vs - values[:T]) ** 2).mean()
        log_probs = F.log_softmax(logits[:T], dim=-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        loss = pg_loss + cfg.value_coef * baseline_loss - cfg.entropy_coef * entropy
        self.optimizer.zero_grad()
        loss.backward()
        self.comm.allreduce_gradients(self.model)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        # after the allreduce, so every rank sees the same norm and stops at the same update
        if not math.isfinite(float(grad_norm)):
            raise TrainingDiverged(
                f"training diverged at update {self.updates + 1} ({self.frames + self.local_frames:,} "
                f"frames): the gradient norm is {float(grad_norm)} (loss {float(loss.detach())}); the update is "
                f"not applied and no checkpoint is written after it. Lower --lr (now {cfg.lr:g}) or "
                f"resume from the last checkpoint with other settings")
        self.optimizer.step()
        if isinstance(self.model.normalize, RunningObservationNorm):
            # after the update: its forward pass normalized as the actor did (on-policy
            # logits); the next rollout's actions see the new statistics
            self._update_obs_statistics(flat[:T * B])  # the T transitions' observations
        self.updates += 1
        if self.updates % self.cfg.sync_check_every == 0 and not self.comm.parameters_in_sync(self.model):
            raise RuntimeError(f"rank {self.rank}: parameters differ between ranks after update "
                               f"{self.updates}; gradients were not averaged identically")
        self.last_losses = {"losses/policy": pg_loss.item(), "losses/baseline": baseline_loss.item(),
                            "losses/entropy": entropy.item(), "losses/grad_norm": float(grad_norm),
                            "charts/mean_rho": float(out.log_rhos.exp().mean())}

    def _update_lives(self, env_ids, info, stepped=None) -> np.ndarray | bool:
        """With life_loss_terminal: keeps these environments' lives for their next step, and
        says which of their steps lost a life with the game playing on: fewer lives than
        after the last step, and more than 0 (the last one ends the game: ale-py's
        life_loss_info rule). A reset's lives are kept the same way."""
        if not self.cfg.life_loss_terminal:
            return False
        lives = _host(info["lives"]).astype(np.int64)
        lost = life_lost(lives, self.last_lives[env_ids])
        if stepped is not None:  # an impala environment's first observation is no step
            lost &= stepped
        self.last_lives[env_ids] = lives
        return lost

    @torch.no_grad()
    def _truncation_values(self, info, terminated, truncated, env_ids, actions_by_env, rewards):
        """With bootstrap_truncation: V(final observation) [n] for this step's environments
        env_ids whose episode the time limit cut (truncated, not terminated), else 0; None
        without the option. The acting network gives it; a recurrent core's memory (its rows
        are the environment ids, as actions_by_env's are) goes on past the step as if the
        game had not been cut. A cut step's lives are the next game's (the reset is in the
        step), so a life lost on that very step is not seen, and it bootstraps too under
        life_loss_terminal."""
        if not self.cfg.bootstrap_truncation:
            return None
        values = np.zeros(len(truncated), np.float32)
        cut = np.nonzero(_host(truncated) & ~_host(terminated))[0]
        if len(cut) == 0:
            return values
        final = info.get("final_obs")
        if final is None:
            raise RuntimeError("bootstrap_truncation: the vector env cut episodes without handing "
                               "their final observations (info['final_obs'], autoreset_mode SameStep)")
        final = final[torch.as_tensor(cut, device=final.device) if torch.is_tensor(final) else cut]
        memory = None
        if self.memory is not None:
            rows = env_ids[cut]
            memory = self.memory[rows].clone()
            note_step(memory, slice(None), actions_by_env[rows], rewards[cut], np.zeros(len(cut)))
        values[cut] = self.model.act_step(self._on_device(final), memory)[1].float().cpu().numpy()
        return values

    def set_learning_rate(self):
        if self.cfg.lr_decay:
            fraction = max(0.0, 1.0 - self.frames / self.cfg.total_frames)
            for group in self.optimizer.param_groups:
                group["lr"] = self.cfg.lr * fraction

    # ----- logging -------------------------------------------------------------------
    def _open_logs(self):
        self.metrics_file = None
        self.tb = None
        if self.cfg.resume and self.rank == 0:  # the ranks agreed to go on: before any log is cut
            _record_timeline(self.log_dir, self.timeline)
        # the trajectory file first: its resume may be refused, before anything else is written
        if self.cfg.log_trajectories:
            from hybridsim import trajlog
            self.traj = trajlog.TrajectoryWriter(
                trajlog.rank_file(self.log_dir, self.rank), batch_size=self.env_batch,
                compression=self.cfg.log_compression,
                flush_every=1 << 20, flush_seconds=self.cfg.log_flush_seconds,  # 4 MB caps the rows
                min_flush_seconds=min(2.0, self.cfg.log_flush_seconds),
                resume_after_frame=self.frames if self.cfg.resume else None,
                resume_expected_rows=self._resume_traj_rows, resume_restarts_envs=self._resume_restarts_envs,
                resume_file_id=self._resume_traj_file_id, resume_logged_until=self._resume_traj_logged_until,
                num_actions=self.num_actions, observations=self._observation_logging(),
                env_ids=(int(self.env_ids[0]), int(self.env_ids[-1]) + 1),
                attrs={"game": self.cfg.game, "rank": self.rank, "world_size": self.world_size,
                       "run_id": self.run_id,
                       "config": dataclasses.asdict(self.cfg), "seed": self.cfg.seed,
                       "env_seed": self.env_seed, "package_versions": _package_versions(),
                       "git_revision": _git_revision()})
            if trajlog.RETIRED_AT in self.traj.file.attrs:  # its rank is back
                del self.traj.file.attrs[trajlog.RETIRED_AT]
        try:
            if self.rank == 0:
                self._retire_rank_files()
                path = self.log_dir / "metrics.csv"
                new = not path.exists() or not self.cfg.resume or path.stat().st_size == 0
                if not new:
                    _drop_metrics_after(path, self.frames)
                if self.cfg.resume:
                    _set_aside_kept_checkpoints_after(self.log_dir / KEPT_CHECKPOINTS, self.frames)
                kept = self.kept_checkpoint_path(self.frames)
                if self.cfg.resume and self.cfg.keep_checkpoints and not kept.exists():
                    # a kill during its copy (the half-written one was removed at the start)
                    self._keep_checkpoint(self.checkpoint_path())
                    if kept.exists():
                        _note(f"note: kept {self.checkpoint_path().name} ({self.frames:,} frames), which this run "
                              f"resumes from, as {kept}: it was not among the kept ones")
                # whole-line appends, cut back on a failed write: a full disk never leaves half a row
                self.metrics_file = storage.AppendFile(path, "w" if new else "a")
                if new:
                    self.metrics_file.write(_csv_line(METRICS_HEADER), "the header")
                try:
                    from torch.utils.tensorboard import SummaryWriter
                    # a resumed run hides the events a killed job logged after its checkpoint
                    self.tb = SummaryWriter(str(self.log_dir / "tensorboard"),
                                            purge_step=self.frames + 1 if self.cfg.resume else None)
                    _leave_tensorboard_write_errors_to_its_flush()
                except ImportError:
                    print("tensorboard is not installed: metrics go to metrics.csv only", file=sys.stderr)
        except BaseException:
            if self.traj is not None:
                try:
                    self.traj.close()
                except StorageError:
                    pass
            raise

    def _observation_logging(self):
        if not self.cfg.log_observations:
            return None
        from hybridsim import trajlog
        return trajlog.ObservationLogging(shape=self.obs_shape, stride=self.cfg.obs_stride,
                                          env_ids=(int(self.env_ids[0]),))

    def _check_trajectory_resume(self) -> None:
        """This rank's trajectory file would take the resume (trajlog.check_resumable, read
        only): run before the ranks agree to go on, so that no rank cuts its file, or its
        metrics, when another's refuses."""
        if not (self.cfg.resume and self.cfg.log_trajectories):
            return
        from hybridsim import trajlog
        trajlog.check_resumable(trajlog.rank_file(self.log_dir, self.rank), self.env_batch, self.num_actions,
                                self._observation_logging(), self._resume_traj_rows, self._resume_traj_file_id,
                                self.run_id, flush_seconds=self.cfg.log_flush_seconds, last_frame=self.frames,
                                logged_until=self._resume_traj_logged_until)
        for path, rank_state in self._retired_rank_files:
            trajlog.check_resumable(path, self.env_batch, self.num_actions, None, rank_state.get("traj_rows"),
                                    rank_state.get("traj_file_id"), self.run_id,
                                    flush_seconds=self.cfg.log_flush_seconds, last_frame=self.frames,
                                    logged_until=rank_state.get("traj_logged_until"))

    def _retire_rank_files(self) -> None:
        """Rank files of ranks this job lacks (a resume with fewer ranks): cut back to the
        checkpoint and closed, as their own rank's resume would (their rows after it were
        a timeline the resume replaces, and the master file would show them)."""
        from hybridsim import trajlog
        for path, rank_state in self._retired_rank_files:
            if not path.exists():
                continue
            writer = trajlog.TrajectoryWriter(
                path, batch_size=self.env_batch, num_actions=self.num_actions,
                flush_seconds=self.cfg.log_flush_seconds, resume_after_frame=self.frames,
                resume_expected_rows=rank_state.get("traj_rows"), resume_file_id=rank_state.get("traj_file_id"),
                resume_logged_until=rank_state.get("traj_logged_until"), attrs={"run_id": self.run_id})
            writer.file.attrs[trajlog.RETIRED_AT] = int(self.frames)
            writer.close()
            print(f"note: {path.name}: its rank is not in this job ({self.world_size} rank(s)); cut back to "
                  f"the checkpoint at frame {self.frames:,} and closed: its rows up to there stay in the run",
                  file=sys.stderr)

    def _merge_episodes(self):
        """Collective: the episodes every rank finished since the last call join rank 0's
        all_episodes (the metrics and the checkpoint's run statistics)."""
        first = int(self.env_ids[0])
        new = [(e[0] + first, *e[1:]) for e in self.episodes.finished[self._episodes_merged:]]
        self._episodes_merged = len(self.episodes.finished)
        gathered = self.comm.gather(new)
        if self.rank == 0:
            # by end frame, then global env id and episode id: appended rank after rank,
            # the order (and the metrics' "last 100") depended on when rank 0's clock
            # called a merge; every episode of a merge ends after those of the one before
            self.all_episodes.extend(sorted((e for part in gathered for e in part),
                                            key=lambda e: (e[5], e[0], e[1])))

    def _log_metrics(self, start_time, start_frames):
        """Collective: every rank calls it at the same iteration; rank 0 writes a row, one
        per frame count (the end of a run whose last iteration logged adds none)."""
        self._merge_episodes()
        if self.frames == self._metrics_frames:
            return
        self._metrics_frames = self.frames
        elapsed = time.perf_counter() - start_time
        fps = (self.frames - start_frames) / max(elapsed, 1e-9)
        if self.rank == 0:
            recent = [e[2] for e in self.all_episodes[-100:]]
            mean_return = float(np.mean(recent)) if recent else float("nan")
            lr = self.optimizer.param_groups[0]["lr"]
            try:
                self.metrics_file.write(_csv_line([
                    self.frames, self.updates, f"{elapsed:.1f}", f"{fps:.0f}", f"{mean_return:.3f}",
                    len(self.all_episodes), f"{lr:.3g}", self.last_losses.get("losses/policy"),
                    self.last_losses.get("losses/baseline"), self.last_losses.get("losses/entropy")]))
            except StorageError as exc:
                self._note_storage_failure(exc)
            if self.tb is not None:
                try:
                    self.tb.add_scalar("charts/fps", fps, self.frames)
                    self.tb.add_scalar("charts/learning_rate", lr, self.frames)
                    if not math.isnan(mean_return):
                        self.tb.add_scalar("charts/mean_return_100", mean_return, self.frames)
                        normalized = self.human_normalized(mean_return)
                        if normalized is not None:
                            self.tb.add_scalar("charts/human_normalized_return_100", normalized, self.frames)
                    for tag, value in self.last_losses.items():
                        self.tb.add_scalar(tag, value, self.frames)
                    self.tb.flush()  # the writer thread's errors surface here, not later
                except (OSError, RuntimeError) as exc:
                    failure = StorageError.from_exception(self.log_dir / "tensorboard",
                                                          "TensorBoard events", exc)
                    if failure.errno is not None:
                        self._note_storage_failure(failure)
                    else:  # not a write the disk refused: lose TensorBoard, keep training
                        print(f"warning: TensorBoard logging stopped: {exc}", file=sys.stderr)
                    self._close_tensorboard()
            done = min(1.0, self.frames / self.cfg.total_frames)
            bar = "#" * int(30 * done) + "." * (30 - int(30 * done))
            print(f"[{bar}] {100 * done:5.1f}%  {self.frames:,} frames  {fps:,.0f} frames/s  "
                  f"return(100) {mean_return:7.2f}  episodes {len(self.all_episodes)}",
                  flush=True)

    def _log_step(self, env_ids, episode_ids, actions, rewards, dones_term, dones_trunc, lives,
                  values, logits, frame, obs=None, stepped=None):
        """One row; `stepped` False marks a slot that holds no step (an impala environment's
        first observation): it gets the fill values of an unwritten row (env_id -1, ...)."""
        if self.traj is None:
            return
        clipped = np.clip(rewards, -1, 1) if self.cfg.reward_clip else rewards
        row = dict(action=actions, reward_raw=rewards, reward_clipped=clipped, terminated=dones_term,
                   truncated=dones_trunc, lives=lives, value=values,
                   env_id=np.asarray(env_ids) + int(self.env_ids[0]), episode_id=episode_ids,
                   global_frame=np.full(len(env_ids), frame, np.int64), behavior_logits=logits)
        if stepped is not None and not stepped.all():
            from hybridsim.trajlog import STEP_FIELDS
            empty = ~np.asarray(stepped, bool)
            for name, value in row.items():
                dtype, fill = STEP_FIELDS.get(name, (np.float32, np.nan))
                row[name] = np.array(_host(value), dtype=dtype, copy=True)
                row[name][empty] = fill
        try:
            self.traj.append_step(
                **row, observation=None if obs is None or not self.cfg.log_observations else _host(obs))
        except StorageError as exc:
            # the writer keeps this and later rows buffered; the loop stops after this
            # iteration and the stop retries them once the disk reserve is released
            self._note_storage_failure(exc)

    def _flush_trajectories(self):
        """This rank's buffered trajectory rows into its file (a failed write is noted)."""
        if self.traj is not None:
            try:
                self.traj.flush()
            except StorageError as exc:
                self._note_storage_failure(exc)

    def _flush_episodes(self):
        if self.traj is not None:
            for env, episode, ret, length, start, end in self.episodes.finished[self._episodes_logged:]:
                self.traj.append_episode(env + int(self.env_ids[0]), episode, ret, length,
                                         start, end)
        self._episodes_logged = len(self.episodes.finished)

    # ----- checkpoints ---------------------------------------------------------------
    def request_stop(self, *_):
        """Finish the current iteration, write a checkpoint and return (signal-handler safe)."""
        self.stop_requested = True

    def checkpoint_path(self) -> pathlib.Path:
        return self.log_dir / "checkpoint.pt"

    def _checkpoint_state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "frames": self.frames, "updates": self.updates,
                "torch_rng": torch.get_rng_state(), "action_counters": self.action_counters,
                "config": _plain_config(self.cfg), "num_actions": self.num_actions,
                "obs_shape": self.obs_shape, "episodes": self.all_episodes,
                "world_size": self.world_size, "run_id": self.run_id, "timeline": self.timeline,
                "gradient_backend": self._gradient_backend(), "rank_states": self._rank_states}

    def _gradient_backend(self) -> str | None:
        """What sums the ranks' gradients (--allreduce auto, or a failed nccl/gloo, decides)."""
        if not isinstance(self.comm, dist.MPIComm):
            return None
        return getattr(self.comm, "backend", "mpi")

    def save_checkpoint(self, path=None) -> pathlib.Path | None:
        """Rank 0 writes the checkpoint atomically (temporary file, fsync, rename): a write
        that fails raises StorageError and leaves the previous checkpoint as it was."""
        if self.rank != 0:
            return None
        path = pathlib.Path(path) if path is not None else self.checkpoint_path()
        self._beat(f"writing {path.name}")
        state = self._checkpoint_state()
        state["digest"] = checkpoint_digest(state)
        try:
            storage.atomic_write(path, lambda fh: torch.save(state, fh))
        except (OSError, RuntimeError) as exc:  # torch reports a short write as RuntimeError
            raise StorageError.from_exception(
                path, "the checkpoint", exc,
                "the previous checkpoint there, if any, is untouched") from exc
        if self.reserve is not None and self.reserve.held:
            self._grow_reserve(path.stat().st_size)
        if self.cfg.keep_checkpoints and path == self.checkpoint_path():
            self._keep_checkpoint(path)
        return path

    def kept_checkpoint_path(self, frames: int) -> pathlib.Path:
        return self.log_dir / KEPT_CHECKPOINTS / f"frames_{frames:012d}.pt"  # KEPT_NAME

    def _keep_checkpoint(self, path: pathlib.Path) -> None:
        """--keep-checkpoints: the checkpoint just written stays as checkpoints/frames_N.pt
        too. A copy, not a hard link: a link would share its bytes with checkpoint.pt, which
        a user's `cp other.pt checkpoint.pt` rewrites in place. A failed keep is a failed
        write (training stops, checkpoint.pt written), not a failed checkpoint."""
        kept = self.kept_checkpoint_path(self.frames)
        try:
            kept.parent.mkdir(exist_ok=True)
            with open(path, "rb") as source:
                storage.atomic_write(kept, lambda fh: shutil.copyfileobj(source, fh, 1 << 20))
        except OSError as exc:
            self._note_storage_failure(StorageError.from_exception(
                kept, "a kept checkpoint", exc, f"{path} itself was written"))

    def _rank_state(self) -> dict:
        """What a resumed rank needs besides the shared model: its environments (None where
        the backend cannot snapshot them) and its episodes in progress."""
        getter = getattr(self.env, "get_state", None)
        # compressed: ~200 KB per environment raw (mostly frames), 13-27x smaller at level 1
        # (BENCHMARKS.md), which is what the gather to rank 0 and the checkpoint carry
        env_state = None if getter is None else zlib.compress(getter(), 1)
        return {"env_state": env_state, "env_state_codec": None if env_state is None else "zlib",
                "episode_tracker": self.episodes.state(),
                **self._trajectory_resume_state(),
                "torch_threads": torch.get_num_threads(),  # a CPU learner's sums depend on it
                "learner_hardware": learner_hardware(self.device),  # and its kernels on these
                "core_memory": None if self.memory is None else _host(self.memory).copy(),
                **({"last_lives": self.last_lives.copy()} if self.cfg.life_loss_terminal else {}),
                "impala_in_flight": self._impala_resume_state()}

    def _trajectory_resume_state(self) -> dict:
        """The trajectory file as this checkpoint leaves it: its rows, its file_id and the
        frame up to which it holds the run's steps. A job that does not log carries the last
        logging job's record on, so a later job that logs again cuts the file there and
        records the frames between as a gap (replay then says so instead of a mismatch)."""
        if self.traj is not None:
            # rows a failed flush left buffered may never reach the file: counted, a resume
            # took the rows HDF5 had grown (zeros) for them as the run's
            rows = self.traj.steps_written if self.traj.failed is not None else self.traj.steps_logged
            return {"traj_rows": rows, "traj_file_id": self.traj.file_id,
                    "traj_logged_until": self.frames}
        return {"traj_rows": self._resume_traj_rows, "traj_file_id": self._resume_traj_file_id,
                "traj_logged_until": self._resume_traj_logged_until}

    def _impala_resume_state(self) -> dict | None:
        """The impala loop's state between iterations: the actions sent but not yet answered
        (the restored environments answer them after a resume, and their rows need the
        action, logits and value), and the trajectories in progress or waiting for the
        learner (compressed: mostly observations), so a resumed run learns from every step."""
        state = self._loop_state
        if "outstanding" not in state:
            return None
        last_action, last_logits, last_value = state["last"]
        pending = {"traj": {int(e): {k: [_host(x) for x in v] for k, v in buf.items()}
                            for e, buf in state["traj"].items()},
                   "ready": [{k: _host(v) for k, v in item.items()} for item in state["ready"]]}
        return {"outstanding": state["outstanding"].copy(), "action": last_action.copy(),
                "logits": last_logits.copy(), "value": last_value.copy(),
                "trajectories": zlib.compress(pickle.dumps(pending, protocol=pickle.HIGHEST_PROTOCOL), 1)}

    def _gather_rank_states(self):
        """Collective before rank 0 writes a checkpoint: every rank's _rank_state on rank 0."""
        self._rank_states = self.comm.gather(self._rank_state())

    def _note_inexact_resume(self, state: dict, mine: dict) -> None:
        """Say what makes this job's numbers round differently from the checkpoint's (it
        trains on, but will not equal an uninterrupted run bit for bit)."""
        reasons = []
        if self.device.type == "cpu" and mine.get("torch_threads") not in (None, torch.get_num_threads()):
            reasons.append(f"it ran with {mine['torch_threads']} torch threads and now has "
                           f"{torch.get_num_threads()} (pass --torch-threads {mine['torch_threads']})")
        then, now = mine.get("learner_hardware"), learner_hardware(self.device)
        if isinstance(then, dict) and any(then[k] != now[k] for k in then.keys() & now.keys()):
            reasons.append(f"its learner ran on {_describe_hardware(then)}, now on "
                           f"{_describe_hardware(now)} (other kernels)")
        if self.rank == 0:  # settings of the whole job
            saved = state["config"]
            order = saved.get("impala_order", "submission")
            if self.cfg.schedule == "impala" and order != self.cfg.impala_order:
                reasons.append(f"--impala-order {order} -> {self.cfg.impala_order} (other batches)")
            backend = state.get("gradient_backend")
            # two ranks' sum is the same in any order; three or more are added in another
            if (backend is not None and backend != self._gradient_backend()
                    and state.get("world_size", 1) == self.world_size > 2):
                reasons.append(f"gradients summed over {backend}, now over {self._gradient_backend()}")
        if reasons:
            print(f"note: rank {self.rank} will not equal an uninterrupted run bit for bit: "
                  f"{'; '.join(reasons)}", file=sys.stderr)

    def _resumed_timeline(self, path: pathlib.Path, state: dict) -> list:
        """The checkpoint's timeline with this resume as a new branch at its frames (rank 0
        records it in TIMELINE_FILE before the logs are cut). Refused where the run directory
        went on along another branch before the checkpoint's frames (a checkpoint from a
        replaced-by-a-resume folder): its metrics, trajectory rows and kept checkpoints up to
        there would not be the checkpoint's. Every rank reads the same record and decides
        alike; the new branch's id is rank 0's, which saves the checkpoints."""
        run_id = state.get("run_id")
        mine = state.get("timeline") or ([[0, run_id]] if run_id else None)  # older: one branch
        recorded = _recorded_timeline(self.log_dir)
        if mine is not None and recorded is not None:
            ours, theirs = _timeline_before(mine, self.frames), _timeline_before(recorded, self.frames)
            if ours != theirs:
                branched = min(e[0] for e in ours + theirs if (e in ours) != (e in theirs))
                raise ValueError(
                    f"--resume: {path} ({self.frames:,} frames) is from a run that a resume replaced: the run "
                    f"in {self.log_dir} went on along another branch from frame {branched:,} ({TIMELINE_FILE}), "
                    f"so its metrics, trajectory rows and kept checkpoints after that frame are not this "
                    f"checkpoint's. Resume it in a directory of its own: copy it to NEWDIR/checkpoint.pt and "
                    f"run with --resume --log-dir NEWDIR")
        return _timeline_before(mine or [[0, self.run_id]], self.frames) + [[self.frames, uuid.uuid4().hex]]

    def load_checkpoint(self):
        path = self.checkpoint_path()
        if not os.path.lexists(path):  # a dangling link: read_checkpoint names it
            raise FileNotFoundError(f"--resume: no checkpoint at {path}{_kept_advice(path)}")
        state = read_checkpoint(path, map_location="cpu")  # load_state_dict moves it to the device
        saved = state["config"]
        must_match = RESUME_MUST_MATCH + RESUME_MUST_MATCH_PER_SCHEDULE.get(self.cfg.schedule, ())
        # a setting newer than the checkpoint ran as its default then
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
        changed = [f"{k} {saved.get(k, defaults[k])!r} -> {getattr(self.cfg, k)!r}" for k in must_match
                   if saved.get(k, defaults[k]) != getattr(self.cfg, k)]
        # (num_envs is the checkpoint's in the elif)
        saved_batch = _impala_env_batch(saved.get("env_batch_size"), self.cfg.num_envs)
        if state.get("world_size", 1) == self.world_size and saved.get("num_envs", self.cfg.num_envs) != self.cfg.num_envs:
            changed.append(f"num_envs {saved['num_envs']!r} -> {self.cfg.num_envs!r} (with the same "
                           f"number of ranks the environments resume as they were)")
        elif (state.get("world_size", 1) == self.world_size and self.cfg.schedule == "impala"
              and any(isinstance(r, dict) and r.get("env_state") is not None
                      for r in state.get("rank_states") or [])
              and saved_batch != self.env_batch):
            changed.append(f"env_batch_size {saved.get('env_batch_size')!r} -> {self.cfg.env_batch_size!r} "
                           f"(the saved environments answer in batches of {saved_batch})")
        if changed:
            raise ValueError(f"--resume: these settings differ from the checkpoint's ({path}): "
                             f"{'; '.join(changed)}. Resume with the settings the run started with, or "
                             f"start a new run in another --log-dir")
        # at the budget the loop would not run, and the end (metrics row, checkpoint) repeat
        if state["frames"] >= self.cfg.total_frames:
            done = BudgetReached(f"--resume: {path} has trained {state['frames']:,} frames, the "
                                 f"budget (--total-frames {self.cfg.total_frames:,}) is reached: "
                                 f"nothing to train; raise --total-frames to train on")
            if self.rank == 0 and self.cfg.log_trajectories:
                # the last job may have stopped before closing the logs: finish that, while
                # this job still holds the run directory
                from hybridsim import trajlog
                rows = {trajlog.rank_file(self.log_dir, r).name: rs.get("traj_rows")
                        for r, rs in enumerate(state.get("rank_states") or [])}
                done.completed = trajlog.complete_master(
                    self.log_dir, state["frames"], rows,
                    idle_seconds=trajlog.quiet_seconds(self.cfg.log_flush_seconds))
            raise done
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as exc:
            raise ValueError(f"--resume: {path} holds another network: {exc}") from None
        if has_nonfinite_weights(self.model):
            raise ValueError(f"--resume: {path}: its network holds NaN or infinite weights (training "
                             f"diverged before this checkpoint): start a new run, or resume a copy kept from before")
        if self.rank == 0:
            _check_metrics_file(self.log_dir / "metrics.csv")

        def field(name, load):  # a damaged field is named, not a traceback from deep inside
            try:
                return load()
            except (KeyError, TypeError, AttributeError, ValueError, RuntimeError, IndexError) as exc:
                raise ValueError(f"--resume: {path}: damaged checkpoint: its {name} does not load "
                                 f"({type(exc).__name__}: {exc})") from None
        field("optimizer state", lambda: self.optimizer.load_state_dict(state["optimizer"]))
        match_optimizer_state_layout(self.optimizer)
        self.frames, self.updates = state["frames"], state["updates"]
        budget = saved.get("total_frames")
        if self.cfg.lr_decay and isinstance(budget, int) and budget != self.cfg.total_frames and self.rank == 0:
            then, now = (self.cfg.lr * max(0.0, 1.0 - self.frames / b) for b in (budget, self.cfg.total_frames))
            print(f"note: --total-frames {self.cfg.total_frames:,}, the run had {budget:,}: the learning "
                  f"rate decays to 0 at the new budget, so it goes on at {now:.3g} instead of {then:.3g}",
                  file=sys.stderr)
        self.run_id = state.get("run_id") or self.run_id
        self.timeline = self._resumed_timeline(path, state)
        field("torch_rng", lambda: torch.set_rng_state(state["torch_rng"]))
        if state.get("world_size", 1) == self.world_size:
            def counters():
                self.action_counters[:] = state["action_counters"][:len(self.action_counters)]
            field("action_counters", counters)
        self.all_episodes = field("episodes", lambda: list(state["episodes"]))
        rank_states = state.get("rank_states")
        if rank_states is None:  # written before rank states: rank 0's environments only
            rank_states = [{"env_state": state.get("env_state")}]
        if not isinstance(rank_states, list) or not all(isinstance(r, dict) for r in rank_states):
            raise ValueError(f"--resume: {path}: damaged checkpoint: its rank_states is not a list of "
                             f"dicts ({type(rank_states).__name__})")
        if len(rank_states) != self.world_size:
            if self.rank == 0:  # the same for every rank
                print(f"note: the checkpoint holds {len(rank_states)} rank(s)' environments, this job "
                      f"has {self.world_size}; environments restart", file=sys.stderr)
            mine = {}
            from hybridsim import trajlog
            if self.rank >= len(rank_states) and self.cfg.log_trajectories:
                # a rank new to the run (or back after a job without it, which closed its
                # file): its log goes on from here, nothing was lost
                rows = trajlog.retired_rows(trajlog.rank_file(self.log_dir, self.rank))
                if rows is not None:
                    mine = {"traj_rows": rows}
        else:
            mine = rank_states[self.rank]
        if "episode_tracker" in mine:
            field("episode_tracker", lambda: self.episodes.load(mine["episode_tracker"]))
        else:
            self._skip_unknown_episode_starts(rank_states, saved.get("num_envs"))
        self._note_inexact_resume(state, mine)
        self._resume_traj_rows = mine.get("traj_rows")
        self._resume_traj_file_id = mine.get("traj_file_id")
        self._resume_traj_logged_until = mine.get("traj_logged_until")
        if self.rank == 0 and self.cfg.log_trajectories:
            from hybridsim import trajlog
            files = [(trajlog.rank_file(self.log_dir, r), rs) for r, rs in enumerate(rank_states)
                     if r >= self.world_size]
            self._retired_rank_files = [(path, rs) for path, rs in files if path.exists()]
        env_state = _decoded_env_state(mine, path, self.rank)
        if self.memory is not None and env_state is not None:
            self._resume_memory = field("core_memory", lambda: self._checked_memory(mine["core_memory"]))
        if self.cfg.life_loss_terminal and env_state is not None:
            self._resume_lives = field("last_lives", lambda: self._checked_lives(mine["last_lives"]))
        impala = mine.get("impala_in_flight")
        if env_state is not None and self.cfg.schedule == "impala":
            if impala is not None:
                self._resume_impala = self._checked_impala_state(impala, path)
            elif self.env_batch < self.cfg.num_envs:
                # a checkpoint from before the impala state was saved: the environments would
                # answer actions nobody remembers (their steps lost from the logs and the
                # episodes), so they restart from their seeds instead
                print(f"note: {path} does not hold rank {self.rank}'s impala actions in flight "
                      f"(an older checkpoint); environments restart", file=sys.stderr)
                return None
        return env_state

    def _checked_lives(self, saved) -> np.ndarray:
        """A checkpoint's lives of this rank's environments after their last steps."""
        lives = np.asarray(saved)
        if lives.shape != (self.cfg.num_envs,) or lives.dtype.kind not in "iu":
            raise ValueError(f"{lives.dtype} array of shape {lives.shape}, not {self.cfg.num_envs} integers")
        return lives.astype(np.int64)

    def _checked_memory(self, saved) -> np.ndarray:
        """A checkpoint's recurrent memory of this rank's environments, checked for this run
        (models.py's row: h, c, previous action, previous reward, first)."""
        memory = np.asarray(saved, dtype=np.float32)
        expected = tuple(self.memory.shape)
        if memory.shape != expected:
            raise ValueError(f"shape {memory.shape}, expected {expected}")
        self.model.check_memory(memory)
        return memory

    def _skip_unknown_episode_starts(self, rank_states=(), saved_num_envs=None):
        """Episodes running at a checkpoint that lacks their start (older checkpoints, or a
        rank count that changed) would report a partial return: give each environment the
        id its episode at the checkpoint was logged with (the one after its last recorded
        episode, or the id in the checkpoint's trackers of its old ranks, whichever is
        later) and leave them out of the statistics. A resume that restarts the
        environments gives the restarted episodes the next id (_train)."""
        first = int(self.env_ids[0])
        ids = self.episodes.episode_ids

        def at_least(env, episode_id):
            local = env - first
            if 0 <= local < len(ids):
                ids[local] = max(ids[local], episode_id)
        for env, episode, *_ in self.all_episodes:
            at_least(int(env), int(episode) + 1)
        if saved_num_envs:  # the trackers of the checkpoint's ranks (another rank count)
            for r, rank_state in enumerate(rank_states):
                tracker = rank_state.get("episode_tracker") if isinstance(rank_state, dict) else None
                if tracker is not None:
                    for i, episode in enumerate(np.asarray(tracker["episode_ids"])):
                        at_least(r * int(saved_num_envs) + i, int(episode))
        self.episodes.start_frames[:] = -1  # unknown: EpisodeTracker.update drops these

    # ----- the loops -----------------------------------------------------------------
    def frames_per_agent_step(self, batch: int) -> int:
        return batch * self.cfg.frame_skip

    def train(self):
        """Train to the budget (or a stop); under MPI a watchdog ends the job if the ranks
        stop making progress together (dist.ProgressWatchdog)."""
        if self.world_size > 1:
            self.watchdog = dist.ProgressWatchdog(self.rank, self.cfg.stall_timeout,
                                                  first_beat_extra_seconds=self._quiet_wait,
                                                  comm=self.comm).start()
        try:
            return self._train()
        finally:
            if self.watchdog is not None:
                self.watchdog.close()
            self.close()

    def _beat(self, what: str = "") -> None:
        if self.watchdog is not None:
            self.watchdog.beat(self.frames, what)

    def _train(self):
        cfg = self.cfg
        refusal = None
        try:  # before any log is opened: a state that does not load leaves the run untouched
            env_state = self.load_checkpoint() if cfg.resume else None
            restore = env_state is not None and hasattr(self.env, "set_state")
            if restore:
                obs, state_info = self.env.set_state(env_state)
                if self._resume_memory is not None:  # a recurrent network's, with its environments
                    self.memory.copy_(torch.from_numpy(self._resume_memory))
            self._check_trajectory_resume()
        except BudgetReached:
            raise  # every rank reads the same checkpoint: all end there
        except Exception as exc:
            refusal = exc
        # Some refusals are one rank's own (its environments' state, its trajectory file):
        # the other ranks must not open the logs (a resume cuts them) before the job ends,
        # so all learn of it.
        refused = self.comm.bcast(self.comm.gather(None if refusal is None else str(refusal)))
        if refusal is not None or any(refused):
            self.env.close()
            if refusal is not None:
                raise refusal
            rank, why = next((r, why) for r, why in enumerate(refused) if why)
            raise ValueError(f"rank {rank} refused the resume: {why}")
        self._resume_restarts_envs = bool(cfg.resume and not restore)
        try:
            self._open_logs()
        except BaseException:
            self.env.close()
            raise
        self._episodes_logged = self._episodes_merged = 0
        try:  # from the disk reserve on: an error anywhere below releases it
            self._hold_reserve()
            if not restore:
                if cfg.resume:
                    if not hasattr(self.env, "set_state"):
                        print("note: this backend cannot restore environment states; environments "
                              "restart", file=sys.stderr)
                    # the interrupted episodes end unfinished; the restarted ones get new ids:
                    # the next one where an episode was under way (steps logged with its id),
                    # and wherever it is unknown whether one was (start -1: the checkpoint
                    # lacks this rank's tracker, and the id is the interrupted episode's)
                    interrupted = (self.episodes.lengths > 0) | (self.episodes.start_frames < 0)
                    self.episodes.episode_ids[interrupted] += 1
                    self.episodes.returns[:] = self.episodes.lengths[:] = 0  # fresh episodes
                    self.episodes.start_frames[:] = self.frames
                obs, state_info = self.env.reset(seed=self.env_seed)
                self._update_lives(_host(state_info.get("env_id", np.arange(self.cfg.num_envs))), state_info)
                if cfg.life_loss_terminal and self.rank == 0 and not cfg.resume and (self.last_lives <= 0).all():
                    print(f"note: {cfg.game} shows no lives at its start (ALE reports 0 for a game "
                          f"without them), so --life-loss-terminal ends no learner episode early",
                          file=sys.stderr)
            elif self._resume_lives is not None:
                self.last_lives[:] = self._resume_lives
            start_time, start_frames = time.perf_counter(), self.frames
            last_log = time.perf_counter()
            next_checkpoint = (self.frames // cfg.checkpoint_every + 1) * cfg.checkpoint_every
            loop = self._a2c_iteration if cfg.schedule == "a2c" else self._impala_iteration
            state = self._loop_state = {"obs": obs, "info": state_info}
            if restore and self._resume_impala is not None:  # set for impala only
                self._restore_impala_in_flight(state, self._resume_impala)
            while self.frames < cfg.total_frames:
                self.set_learning_rate()
                loop(state)
                # one collective per iteration: the frames of all ranks, any stop request and
                # any failed write (disk full), so every rank stops at the same iteration
                frames, stops, failed = self.comm.allreduce_sum(
                    np.array([self.local_frames, int(self.stop_requested),
                              int(self.storage_failure is not None)], dtype=np.int64))
                self.frames += int(frames)
                self.local_frames = 0
                self._beat()
                if failed or stops:
                    self.stop_reason = "storage" if failed else "signal"
                    if self.watchdog is not None:
                        self.watchdog.stop_acknowledged()
                    break
                self._flush_episodes()
                now = time.perf_counter()
                if self.comm.bcast(now - last_log >= cfg.log_every):  # rank 0's clock decides
                    self._log_metrics(start_time, start_frames)
                    last_log = now
                if self.frames >= next_checkpoint:
                    self._beat("checkpoint")
                    # every rank's rows up to this frame reach its file before a checkpoint
                    # that a resume would continue from: a kill after it leaves no hole
                    self._flush_trajectories()
                    if not self.comm.allreduce_sum(np.array([int(self.storage_failure is not None)]))[0]:
                        # the episodes finished since the last metrics row belong in it too:
                        # the rank states hold only the ones still running
                        self._merge_episodes()
                        self._gather_rank_states()
                        try:
                            self.save_checkpoint()
                        except StorageError as exc:
                            self._note_storage_failure(exc)  # stops at the next iteration
                    next_checkpoint += cfg.checkpoint_every
        except BaseException:
            # No collectives here: other ranks may be elsewhere. Keep what this rank has
            # (its trajectory rows, rank 0's metrics), then let the error end the job.
            if self.reserve is not None:
                self.reserve.release()
            self._flush_episodes()
            self._close(finished=False)
            raise
        return self._finish(start_time, start_frames)

    # ----- the end of a run, and a full disk -------------------------------------------
    @property
    def preempted(self) -> bool:
        return self.stop_reason == "signal"

    def _note_storage_failure(self, exc: StorageError):
        """Remember the first failed write; the loop stops at its next collective."""
        self._failed_writes_full.add(exc.disk_full)  # the advice fits every failure, not the first
        if self.storage_failure is None:
            self.storage_failure = exc
            print(f"rank {self.rank}: {exc}; stopping after this iteration", file=sys.stderr,
                  flush=True)
        elif str(exc) != str(self.storage_failure):
            self.storage_notes.append(str(exc))

    def _reserve_bytes(self) -> int:
        """Room the stop after a full disk needs: rank 0 a checkpoint, every rank a flush."""
        from hybridsim import trajlog
        row = self.env_batch * (sum(np.dtype(t).itemsize for t, _ in trajlog.STEP_FIELDS.values())
                                + 4 * self.num_actions)
        need = 0
        if self.traj is not None:  # a failed flush's rows and the next iteration's, each capped
            need += 2 * (trajlog.DEFAULT_FLUSH_BYTES + row) + trajlog.DEFAULT_MIN_FREE_BYTES + (1 << 20)
            if self.cfg.log_observations:
                need += 2 * (trajlog.DEFAULT_FLUSH_BYTES + int(np.prod(self.obs_shape)))
        if self.rank == 0:
            params = sum(p.numel() * p.element_size() for p in self.model.parameters())
            moments = 2 if self.cfg.optimizer == "adam" else 1  # Adam: 2 moments, RMSprop: 1
            need += params * (1 + moments) + len(self.all_episodes) * 64 + (1 << 20)
        return need

    def _hold_reserve(self):
        if self.rank == 0:  # reserves of ranks a resume with fewer ranks does not have
            for path in self.log_dir.glob(".disk_reserve_rank*"):
                rank = path.name[len(".disk_reserve_rank"):]
                if rank.isdigit() and int(rank) >= self.world_size:
                    path.unlink(missing_ok=True)
        if not self.cfg.disk_reserve:
            return
        need = self._reserve_bytes()
        if need == 0:
            return
        path = self.log_dir / f".disk_reserve_rank{self.rank:05d}"
        self.reserve = storage.DiskReserve(path, need)
        try:
            self.reserve.create()
        except StorageError as exc:
            self.reserve = None
            what = ("a final checkpoint and the last trajectory rows" if self.rank == 0 and self.traj is not None
                    else "a final checkpoint" if self.rank == 0 else "the last trajectory rows")
            print(f"warning: {exc}: there is less room than the reserve holds for stopping cleanly when "
                  f"the disk or quota fills up; training goes on, but {what} may not fit in "
                  f"{self.log_dir} then", file=sys.stderr)

    def _grow_reserve(self, checkpoint_bytes: int):
        """Checkpoints grow with the episode list; keep the reserve a margin above them."""
        want = int(checkpoint_bytes * 1.25) + (2 << 20)
        if want > self.reserve.nbytes:
            old = self.reserve.nbytes
            self.reserve.nbytes = want
            try:
                self.reserve.create()
            except StorageError as exc:
                self.reserve.nbytes = old
                self._note_storage_failure(exc)
                try:
                    self.reserve.create()  # at least the old size, if that is still there
                except StorageError:
                    self.reserve = None

    def _fallback_dirs(self) -> list[pathlib.Path]:
        import tempfile
        if self.cfg.fallback_dir:
            return [pathlib.Path(self.cfg.fallback_dir)]
        tmp = pathlib.Path(tempfile.gettempdir())
        try:
            if storage.same_filesystem(tmp, self.log_dir):
                self.storage_notes.append(f"no fallback for the checkpoint: {tmp} is on the same "
                                          f"file system as {self.log_dir} (set --fallback-dir)")
                return []
        except OSError:
            return []
        return [tmp]

    def _write_final_checkpoint(self) -> pathlib.Path | None:
        """Rank 0: the run's last checkpoint, in log_dir if it fits, else in a fallback dir."""
        try:
            return self.save_checkpoint()
        except StorageError as exc:
            self._note_storage_failure(exc)
        if self.reserve is not None and self.reserve.release():
            try:
                return self.save_checkpoint()
            except StorageError as exc:
                self.storage_notes.append(str(exc))
        for directory in self._fallback_dirs():
            path = directory / fallback_checkpoint_name(self.log_dir)
            try:
                directory.mkdir(parents=True, exist_ok=True)
                return self.save_checkpoint(path)
            except (StorageError, OSError) as exc:
                self.storage_notes.append(f"--fallback-dir {directory}: {exc}" if self.cfg.fallback_dir else str(exc))
        return None

    def _finish(self, start_time, start_frames) -> dict:
        """Final metrics, checkpoint and closed files; after a failed write, as much as fits."""
        self.loop_seconds = time.perf_counter() - start_time  # (bench --train; metrics round it)
        self._beat("finishing")
        if self.stop_reason == "storage" and self.reserve is not None:
            freed = self.reserve.release()  # room for the checkpoint and the buffered rows
            if freed:
                self.storage_notes.append(f"released the {freed / 1e6:.1f} MB disk reserve "
                                          f"{self.reserve.path}")
        self._flush_episodes()
        self._flush_trajectories()  # before the checkpoint counts this rank's rows
        self._log_metrics(start_time, start_frames)
        self._gather_rank_states()
        if self.rank == 0:
            self.final_checkpoint = self._write_final_checkpoint()
        self.final_checkpoint = self.comm.bcast(self.final_checkpoint)
        self._close(finished=True)
        if self.reserve is not None:
            self.reserve.release()
        # every rank learns of every rank's failed writes, so all report (and exit) alike
        mine = ([str(self.storage_failure)] if self.storage_failure is not None else []) + self.storage_notes
        reports = self.comm.bcast(self.comm.gather((self.rank, sorted(self._failed_writes_full), mine)))
        self.storage_report = [f"rank {r}: {line}" if self.world_size > 1 else line
                               for r, _, lines in reports for line in lines]
        self.storage_failures_full = {full for _, fulls, _ in reports for full in fulls}
        if self.storage_failures_full:
            self.stop_reason = "storage"  # also when the budget was reached but the end failed
        return self.summary()

    def _a2c_iteration(self, state):
        cfg = self.cfg
        T, N = cfg.num_steps, cfg.num_envs
        # Observations stay where the learner is (a gpu backend's batches never leave the
        # device); what the host needs anyway (actions, rewards, logging) is numpy.
        obs_buf = torch.empty((T + 1, N, *self.obs_shape), dtype=torch.uint8, device=self.device)
        actions = np.empty((T, N), dtype=np.int64)
        logits = np.empty((T, N, self.num_actions), dtype=np.float32)
        rewards = np.empty((T, N), dtype=np.float32)
        dones = np.empty((T, N), dtype=np.float32)
        values = np.empty((T, N), dtype=np.float32)
        truncation_values = np.zeros((T, N), np.float32) if cfg.bootstrap_truncation else None
        env_ids = np.arange(N)
        obs = state["obs"]
        start_memory = None if self.memory is None else self.memory.clone()
        for t in range(T):
            obs_buf[t].copy_(self._on_device(obs))
            actions[t], logits[t], values[t] = self.act(obs_buf[t])
            obs, reward, terminated, truncated, info = self.env.step(actions[t])
            reward, terminated, truncated = _host(reward), _host(terminated), _host(truncated)
            done = np.logical_or(terminated, truncated)
            # what the learner takes as an episode's end; the logs and returns keep whole games
            learn_done = done | self._update_lives(env_ids, info)
            rewards[t], dones[t] = reward, learn_done
            if truncation_values is not None:
                truncation_values[t] = self._truncation_values(info, terminated, truncated, env_ids, actions[t],
                                                               reward)
            note_step(self.memory, env_ids, actions[t], reward, learn_done)
            self.local_frames += self.frames_per_agent_step(N)
            episode_ids = self.episodes.episode_ids.copy()  # the ids of the steps just taken
            self.episodes.update(env_ids, reward, done, self.frames + self.local_frames)
            self._log_step(env_ids, episode_ids, actions[t], np.asarray(reward, np.float32), terminated, truncated,
                           _host(info.get("lives", np.zeros(N))), values[t], logits[t],
                           self.frames + self.local_frames, obs)
        obs_buf[T].copy_(self._on_device(obs))
        state["obs"] = obs
        # Minibatch m takes every num_minibatches-th environment, so the groups are the same
        # sets of global envs however they are split over ranks. Later groups learn from
        # data collected by an older policy; V-trace corrects for it.
        for m in range(cfg.num_minibatches):
            idx = slice(m, None, cfg.num_minibatches)
            self.learn(obs_buf[:, idx], actions[:, idx], logits[:, idx], rewards[:, idx], dones[:, idx],
                       None if start_memory is None else start_memory[idx],
                       None if truncation_values is None else truncation_values[:, idx])

    def _impala_iteration(self, state):
        """Collect until `learner_batch` trajectories of num_steps transitions are ready, then learn."""
        cfg = self.cfg
        T = cfg.num_steps
        if "traj" not in state:
            self._init_impala_state(state)
        traj, ready, outstanding = state["traj"], state["ready"], state["outstanding"]
        last_action, last_logits, last_value = state["last"]
        obs, info = state["obs"], state["info"]
        while len(ready) < cfg.learner_batch:
            env_ids = np.asarray(info["env_id"])
            # a trajectory starts from the memory its first step is chosen with (one starts
            # where the environment's buffer is empty or is cut below)
            starts = {}
            if self.memory is not None:
                new = np.array([len(traj[int(e)]["act"]) in (0, T) for e in env_ids])
                starts = dict(zip(np.nonzero(new)[0].tolist(), _host(self.memory[env_ids[new]])))
            actions, logits, values = self.act(obs, env_ids)
            for k, e in enumerate(env_ids):
                buf = traj[int(e)]
                buf["obs"].append(obs[k])
                if len(buf["act"]) == T:  # T transitions plus the next observation: cut here
                    ready.append(buf)  # per-step arrays, stacked once into the learner's batch
                    traj[int(e)] = buf = self._empty_trajectory()
                    buf["obs"].append(obs[k])
                if k in starts:
                    buf["core"].append(starts[k])
                buf["act"].append(actions[k])
                buf["logit"].append(logits[k])
            last_action[env_ids], last_logits[env_ids], last_value[env_ids] = actions, logits, values
            outstanding[env_ids] = True
            self.env.send(actions)
            obs, reward, terminated, truncated, info = self.env.recv()
            ids = np.asarray(info["env_id"])
            # False: no step, the environment's first observation after the reset (the reset
            # returns only env_batch of them; recv hands out the others)
            answered = outstanding[ids]
            outstanding[ids] = False
            reward, terminated, truncated = reward * answered, terminated & answered, truncated & answered
            done = np.logical_or(terminated, truncated)
            learn_done = done | self._update_lives(ids, info, answered)
            cut_values = self._truncation_values(info, terminated, truncated, ids, last_action, reward)
            for k, e in enumerate(ids):
                buf = traj[int(e)]
                # the reward of the buffer's last action; after a resume the buffers start
                # empty, and an action sent before the checkpoint is not in them
                if answered[k] and len(buf["rew"]) < len(buf["act"]):
                    buf["rew"].append(reward[k])
                    buf["done"].append(learn_done[k])
                    if cut_values is not None:
                        buf["boot"].append(cut_values[k])
            if not answered.any():
                continue
            stepped = ids[answered]
            note_step(self.memory, stepped, last_action[stepped], reward[answered], learn_done[answered])
            self.local_frames += self.frames_per_agent_step(len(stepped))
            frame = self.frames + self.local_frames
            episode_ids = self.episodes.episode_ids[ids].copy()
            self.episodes.update(stepped, reward[answered], done[answered], frame)
            self._log_step(ids, episode_ids, last_action[ids], np.asarray(reward, np.float32), terminated,
                           truncated, info.get("lives", np.zeros(len(ids))), last_value[ids],
                           last_logits[ids], frame, obs, stepped=answered)
        state["obs"], state["info"] = obs, info
        batch, state["ready"] = ready[:cfg.learner_batch], ready[cfg.learner_batch:]

        def stack(key):  # [T(+1), B, ...] in one copy from the per-step arrays
            first = np.asarray(batch[0][key][0])
            out = np.empty((len(batch[0][key]), len(batch)) + first.shape, first.dtype)
            for j, b in enumerate(batch):
                for t, x in enumerate(b[key]):
                    out[t, j] = x
            return out

        start_memory = None
        if self.memory is not None:
            start_memory = torch.from_numpy(np.stack([b["core"][0] for b in batch])).to(self.device)
        self.learn(stack("obs"), stack("act"), stack("logit").astype(np.float32),
                   stack("rew").astype(np.float32), stack("done").astype(np.float32), start_memory,
                   stack("boot").astype(np.float32) if cfg.bootstrap_truncation else None)

    def _init_impala_state(self, state):
        n = self.cfg.num_envs
        state["traj"] = {e: self._empty_trajectory() for e in range(n)}
        state["ready"] = []
        state["outstanding"] = np.zeros(n, bool)  # an action was sent, no reply yet
        state["last"] = (np.zeros(n, np.int64), np.zeros((n, self.num_actions), np.float32),
                         np.zeros(n, np.float32))

    def _checked_impala_state(self, saved: dict, path) -> dict:
        """_impala_resume_state's record, checked against this run before anything is written:
        a damaged one is an error naming the checkpoint, never a misaligned trajectory."""
        n, a, T = self.cfg.num_envs, self.num_actions, self.cfg.num_steps
        fields = self._trajectory_fields()
        memory_shape = (self.model.memory_size,)

        def core_ok(buf):  # a recurrent network's memory at the first step, once there is one
            return "core" not in buf or (len(buf["core"]) == min(1, len(buf["obs"]))
                                         and all(np.shape(x) == memory_shape for x in buf["core"]))

        def ready_ok(item):  # T transitions and the next observation
            return (isinstance(item, dict) and set(item) == set(fields)
                    and np.shape(item["obs"]) == (T + 1, *self.obs_shape)
                    and all(np.shape(item[k]) == (T,) for k in ("act", "rew", "done", "boot") if k in fields)
                    and np.shape(item["logit"]) == (T, a) and core_ok(item))

        def in_progress_ok(buf, in_flight):  # an observation and an action per step; the
            # rewards of the answered ones (the one in flight has none yet)
            if not isinstance(buf, dict) or set(buf) != set(fields):
                return False
            steps = len(buf["act"])
            return (len(buf["obs"]) == len(buf["logit"]) == steps <= T
                    and all(len(buf[k]) == steps - int(bool(in_flight and steps))
                            for k in ("rew", "done", "boot") if k in fields)
                    and all(np.shape(o) == self.obs_shape for o in buf["obs"])
                    and all(np.shape(x) == (a,) for x in buf["logit"])
                    and all(np.shape(x) == () for k in ("act", "rew", "done", "boot") if k in fields for x in buf[k])
                    and core_ok(buf))
        try:
            out = {"outstanding": np.asarray(saved["outstanding"], bool),
                   "last": (np.asarray(saved["action"], np.int64), np.asarray(saved["logits"], np.float32),
                            np.asarray(saved["value"], np.float32)),
                   "traj": None, "ready": []}
            ok = out["outstanding"].shape == (n,) and [f.shape for f in out["last"]] == [(n,), (n, a), (n,)]
            if ok and saved.get("trajectories") is not None:  # absent before they were saved
                pending = _unpickle_arrays(zlib.decompress(saved["trajectories"]))
                traj, ready = pending["traj"], list(pending["ready"])
                ok = (isinstance(traj, dict) and sorted(traj) == list(range(n))
                      and all(in_progress_ok(traj[e], out["outstanding"][e]) for e in range(n))
                      and all(ready_ok(item) for item in ready))
                out["traj"], out["ready"] = traj, ready
        except Exception as exc:  # unpickling damaged bytes raises many kinds
            raise ValueError(f"--resume: {path}: rank {self.rank}'s impala state is damaged "
                             f"({type(exc).__name__}: {exc})") from None
        if not ok:
            raise ValueError(f"--resume: {path}: rank {self.rank}'s impala state does not fit {n} "
                             f"environments, {a} actions and --num-steps {T}")
        return out

    def _restore_impala_in_flight(self, state, saved: dict):
        """The checked impala state of the checkpoint (_checked_impala_state)."""
        self._init_impala_state(state)
        state["outstanding"][:] = saved["outstanding"]
        for dst, src in zip(state["last"], saved["last"]):
            dst[...] = src
        if saved["traj"] is not None:
            state["traj"] = {e: {k: list(v) for k, v in saved["traj"][e].items()}
                             for e in range(self.cfg.num_envs)}
            state["ready"] = saved["ready"]

    def _trajectory_fields(self) -> tuple:
        """An impala trajectory's per-step lists (with bootstrap_truncation each step's
        _truncation_values), and a recurrent network's memory at its start."""
        return (("obs", "act", "logit", "rew", "done") + (("boot",) if self.cfg.bootstrap_truncation else ())
                + (() if self.memory is None else ("core",)))

    def _empty_trajectory(self):
        return {k: [] for k in self._trajectory_fields()}

    def _close_tensorboard(self):
        tb, self.tb = self.tb, None
        if tb is not None:
            try:
                tb.close()
            except (OSError, RuntimeError):
                pass  # its failure was already noted; event files stop at the last whole record

    def _close(self, finished: bool):
        """Close every run file; failed writes are noted (finished) or printed, never raised
        before the barrier, so one rank's full disk cannot leave the others waiting."""
        def note(exc):
            if finished:
                self._note_storage_failure(exc)
            else:
                print(f"rank {self.rank}: {exc}", file=sys.stderr)
        traj_ok = True
        if self.traj is not None:
            try:
                self.traj.close()
            except StorageError as exc:
                traj_ok = False
                note(exc)
                self.storage_notes.append(
                    f"{self.traj.path} was not closed cleanly: it holds the steps up to "
                    f"{self.traj.steps_written} if it opens (HDF5 may have left its end unwritten: "
                    f"then readers call it truncated; move it away before --resume, which starts "
                    f"this rank's log anew and records the missing steps as a gap)")
        if finished:
            traj_ok = bool(self.comm.allreduce_sum(np.array([0 if traj_ok else 1]))[0] == 0)
            self.trajectories_closed = traj_ok if self.traj is not None else None
        if self.rank == 0:
            if self.traj is not None and finished:
                from hybridsim import trajlog
                try:
                    if not traj_ok:
                        raise OSError("a rank file was not closed cleanly")
                    trajlog.write_master(self.log_dir)
                    self.master_written = True
                except (OSError, RuntimeError) as exc:
                    master = self.log_dir / trajlog.MASTER_FILE
                    try:
                        (self.log_dir / (trajlog.MASTER_FILE + ".tmp")).unlink(missing_ok=True)
                    except OSError:
                        pass
                    note(StorageError.from_exception(master, "the virtual master file", exc))
                    self.storage_notes.append(
                        f"{master} not (re)written: {exc}" if isinstance(exc, trajlog.MissingRankFilesError)
                        else f"{master} not (re)written: the traj_rank*.h5 files hold every logged row "
                             f"and hybridsim analyze reads them; hybridsim.trajlog.write_master(RUN_DIR) "
                             f"stitches them later")
            self._close_tensorboard()
            if self.metrics_file is not None:
                self.metrics_file.close()
                try:
                    write_learning_curve(self.log_dir)
                except (OSError, RuntimeError) as exc:
                    curve = self.log_dir / "learning_curve.png"
                    note(StorageError.from_exception(curve, "the learning curve", exc))
        self.env.close()

    def human_normalized(self, mean_return: float) -> float | None:
        """A mean training return as a human-normalized score; None off the Atari-57, and
        with --episodic-life, whose episodes are single lives rather than games."""
        if self.cfg.episodic_life or math.isnan(mean_return):
            return None
        return human_normalized(self.cfg.game, mean_return)

    def summary(self) -> dict:
        returns = [e[2] for e in self.all_episodes]
        # the first and the last quarter of the episodes (at most 100 each): did it learn?
        window = min(100, max(1, len(returns) // 4))
        last = float(np.mean(returns[-window:])) if returns else float("nan")
        return {"frames": self.frames, "updates": self.updates,
                "episodes": len(self.all_episodes),
                "mean_return_100": float(np.mean(returns[-100:])) if returns else float("nan"),
                "window": window,
                "mean_return_first": float(np.mean(returns[:window])) if returns else float("nan"),
                "mean_return_last": last, "human_normalized_last": self.human_normalized(last),
                "checkpoint": str(self.final_checkpoint or self.checkpoint_path()),
                "final_checkpoint": str(self.final_checkpoint) if self.final_checkpoint else None,
                "preempted": self.preempted, "stopped": self.stop_reason,
                # a full disk wants room; another error (permissions, damaged data) its own cure
                "storage_report": self.storage_report,
                "storage_disk_full": self.storage_failures_full <= {True},
                "storage_some_full": True in self.storage_failures_full,
                "trajectories_closed": self.trajectories_closed,
                "log_dir": str(self.log_dir), "rank": self.rank,
                "metrics": str(self.log_dir / "metrics.csv"),
                "trajectories": self._trajectory_files(),
                "curve": str(self.log_dir / "learning_curve.png")}

    def _trajectory_files(self) -> str | None:
        """Where the HDF5 trajectory logs are (None: not logged): the master file, or the
        rank files where this job could not write it (an earlier one's may be stale)."""
        if self.traj is None:
            return None
        from hybridsim import trajlog
        return str(self.log_dir / (trajlog.MASTER_FILE if self.master_written else "traj_rank*.h5"))


def _drop_metrics_after(path: pathlib.Path, frames: int) -> None:
    """A resumed run goes on from its checkpoint at `frames`: rows a killed job wrote after
    that belong to a timeline the resume replaces (the trajectory logs drop them too)."""
    lines = path.read_bytes().decode().splitlines(keepends=True)  # csv's "\r\n" kept as written
    keep = lines[:1] + [line for line in lines[1:]
                        if line.endswith("\n") and line.split(",", 1)[0].isdigit()
                        and int(line.split(",", 1)[0]) <= frames]
    if len(keep) == len(lines):
        return
    try:
        storage.atomic_write(path, lambda fh: fh.write("".join(keep).encode()))
    except OSError as exc:  # a full disk: the old file stays, rows and all
        print(f"warning: {path}: could not drop the rows written after the checkpoint ({exc})",
              file=sys.stderr)
        return
    print(f"{path}: dropped {len(lines) - len(keep)} rows written after the checkpoint "
          f"({frames:,} frames)", file=sys.stderr)


def _set_aside_kept_checkpoints_after(folder: pathlib.Path, frames: int) -> None:
    """A resume from an earlier kept checkpoint (copied over checkpoint.pt) replaces the run
    after it, as the metrics rows and trajectory rows after it are dropped: the kept
    checkpoints past its frames move into a folder of their own, kept, not mixed in."""
    later = [path for kept_frames, path in _kept_by_frames(folder) if kept_frames > frames]
    if not later:
        return
    aside = _unused_timestamped(folder, REPLACED_BY_A_RESUME)
    try:
        aside.mkdir()
        for path in later:
            path.rename(aside / path.name)
    except OSError as exc:
        print(f"warning: {folder}: could not move the kept checkpoints after {frames:,} frames aside ({exc})",
              file=sys.stderr)
        return
    print(f"note: this run resumes at {frames:,} frames: the {len(later)} kept checkpoint(s) written after "
          f"that, by the run this resume replaces, are now in {aside}", file=sys.stderr)


def _make_run_directory(path: pathlib.Path) -> None:
    """mkdir -p, its refusals as OSErrors that are not FileNotFoundError (that one means a
    missing checkpoint here) and that say what is wrong with the path."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError("it is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"cannot make it ({exc.strerror or exc})") from None


def _csv_line(values) -> str:
    import io
    text = io.StringIO()
    csv.writer(text).writerow(values)
    return text.getvalue()


def write_learning_curve(log_dir) -> pathlib.Path | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    log_dir = pathlib.Path(log_dir)
    rows = list(csv.DictReader(open(log_dir / "metrics.csv")))
    frames = [int(r["frames"]) for r in rows if r["mean_return_100"] not in ("nan", "")]
    returns = [float(r["mean_return_100"]) for r in rows if r["mean_return_100"] not in ("nan", "")]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(frames, returns)
    ax.set_xlabel("frames")
    ax.set_ylabel("mean return (last 100 episodes)")
    ax.set_title(f"{log_dir.name}")
    ax.grid(alpha=0.3)
    path = log_dir / "learning_curve.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _package_versions() -> str:
    import importlib.metadata as md
    versions = {}
    for name in ("hybridsim", "torch", "numpy", "ale-py", "h5py"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return json.dumps(versions)


def _git_revision() -> str:
    import subprocess
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=pathlib.Path(__file__).parent, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
