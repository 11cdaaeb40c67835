"""HDF5 trajectory logs: one SWMR file per rank plus a master file of virtual datasets.

Layout (docs/HDF5_LAYOUT.md): per-rank file `traj_rank{R:05d}.h5` with
- /steps/<field>: [S, B] (behavior_logits [S, B, A]), one row per vector-env step, B the
  batch of environments that step returned (all of the rank's envs in synchronous mode);
- /episodes/<column>: [E], one row per finished episode;
- /observations/frames [K, *obs_shape] and /observations/index [K, 3] (step, env_id,
  global_frame): the observation each logged step returned, every `obs_stride` steps for
  the chosen envs, when observations are logged;
- attributes on the root: format_version, rank, world_size and what the run passes
  (game, config, package versions, git revision, seeds).
Reading needs only h5py and numpy. Writers buffer rows and append them on flush
(resize, write, flush), so a reader in SWMR mode, or after a kill -9, sees every row up
to the last flush.
"""
from __future__ import annotations

import dataclasses
import errno
import fnmatch
import functools
import itertools
import json
import os
import pathlib
import re
import stat
import sys
import time
import uuid

import h5py
import numpy as np

from hybridsim import HybridsimWarning, storage
from hybridsim.storage import StorageError

FORMAT_VERSION = 1
RANK_FILE_PATTERN = "traj_rank{rank:05d}.h5"
DEFAULT_FLUSH_EVERY = 64  # steps buffered between appends
DEFAULT_FLUSH_BYTES = 4 << 20  # ... or this many bytes of rows or observations, if sooner
DEFAULT_MIN_FREE_BYTES = 1 << 20  # free space a flush leaves, or it stops before writing
MASTER_FILE = "trajectories.h5"
MASTER_ROOM_BYTES = 4 << 20  # room asked for before writing it (it takes well under 1 MB)

# name -> (dtype, fill value used by the master file where a rank has no row)
STEP_FIELDS = {
    "action": (np.int16, -1),
    "reward_raw": (np.float32, np.nan),
    "reward_clipped": (np.float32, np.nan),
    "terminated": (np.bool_, False),
    "truncated": (np.bool_, False),
    "lives": (np.int16, -1),
    "value": (np.float32, np.nan),
    "env_id": (np.int32, -1),
    "episode_id": (np.int64, -1),
    "global_frame": (np.int64, -1),
    "unix_time": (np.float64, np.nan),
}
EPISODE_FIELDS = {
    "env_id": np.int32,
    "episode_id": np.int64,
    "return": np.float64,
    "length": np.int64,
    "start_frame": np.int64,
    "end_frame": np.int64,
}
# what the master file's episodes read where a rank file is missing (HDF5's default, 0,
# would look like a real episode to a plain h5py reader)
EPISODE_FILL = {"env_id": -1, "episode_id": -1, "return": np.nan, "length": -1, "start_frame": -1,
                "end_frame": -1}


class TrajectoryLogError(RuntimeError):
    """A trajectory file could not be written or read; the message names the file."""


class MissingRankFilesError(TrajectoryLogError):
    """A run directory lacks some of its ranks' files (check_one_run with all_ranks)."""


def dataset_kwargs(compression: str | None):
    # fletcher32: a checksum per chunk, so a damaged block fails to read instead of
    # decompressing to plausible numbers (HDF5 checks only metadata by itself)
    if compression in (None, "none"):
        return {"fletcher32": True}
    if compression == "gzip":
        return {"compression": "gzip", "compression_opts": 4, "shuffle": True, "fletcher32": True}
    if compression == "lzf":
        return {"compression": "lzf", "shuffle": True, "fletcher32": True}
    raise ValueError(f"compression must be 'lzf', 'gzip' or 'none', got {compression!r}")


@dataclasses.dataclass
class ObservationLogging:
    """Which observations to keep: for each listed env id, its first step in each block of
    `stride` rows (every `stride`-th row when every row holds every environment, as in the
    synchronous schedule; in the asynchronous one an environment is in some rows only)."""
    shape: tuple
    stride: int = 100
    env_ids: tuple = (0,)


class TrajectoryWriteError(StorageError, TrajectoryLogError):
    """Rows could not be written to a trajectory file (disk full, quota, I/O error).

    The file still opens and holds every row of the last successful flush; the rows that
    failed stay buffered in the writer, and `close()` tries them once more.
    """


class TrajectoryWriter:
    """Appends per-step rows and finished episodes of one rank to its HDF5 file.

    Rows go into preallocated numpy buffers and are written in one resize + write per
    dataset at flush time: every `flush_every` steps; at the first whole chunk of
    `chunk_steps` rows once `min_flush_seconds` have passed; after `flush_seconds` in any
    case; or when the buffered rows or observations reach `flush_bytes`. Whole chunks
    matter: a flush that ends inside a compressed chunk rewrites that chunk at the next
    flush, and HDF5 does not reuse the freed space in SWMR mode (flushing every 8 steps
    made a file 5.7x larger and 5x slower to write than every 64); a flush costs about
    10-20 ms, mostly the metadata flush, so a fast run should not flush every chunk. A flush that fails leaves the file as it was
    after the previous one (rows are written at offsets the writer tracks itself, so a
    retry rewrites the same places) and keeps the rows buffered.
    """

    def __init__(self, path, *, batch_size: int, num_actions: int, attrs: dict | None = None,
                 observations: ObservationLogging | None = None, compression: str = "lzf",
                 flush_every: int = DEFAULT_FLUSH_EVERY, chunk_steps: int = 256,
                 resume_after_frame: int | None = None,
                 min_free_bytes: int | None = DEFAULT_MIN_FREE_BYTES,
                 flush_seconds: float | None = None, flush_bytes: int = DEFAULT_FLUSH_BYTES,
                 min_flush_seconds: float | None = None, resume_expected_rows: int | None = None,
                 resume_restarts_envs: bool = False, resume_file_id: str | None = None,
                 resume_logged_until: int | None = None, env_ids: tuple[int, int] | None = None):
        """Create the file, or with `resume_after_frame` reopen an existing one and drop the
        rows logged after that global frame (they will be produced again by the resumed run).

        Before each flush the writer checks that the file system (and a quota) keeps
        `min_free_bytes` free beyond what the flush adds, and raises TrajectoryWriteError
        (ENOSPC, EDQUOT) without writing if not, so HDF5 never sees a half-done write
        (storage.missing_room; None: no check).

        On resume, `resume_expected_rows` is the row count the file had when the checkpoint
        was written (the trainer flushes first): fewer rows up to that frame mean rows were
        lost (a kill before they reached the file), recorded as a gap in the root attribute
        `gaps`; `resume_restarts_envs` says the environments restart from their seeds at
        this frame (a backend without snapshots), recorded in `restarts`. Replay reads both.
        `resume_file_id`, the file's `file_id` the checkpoint recorded, refuses another
        run's file put in its place; a missing file is started anew at the checkpoint's
        frame, the rows before it recorded as a gap. `resume_logged_until`: the checkpoint
        frame up to which the file holds the run's rows, when the jobs since did not log
        (--log-trajectories false): the rows after it are cut and the frames from there to
        `resume_after_frame` recorded as a gap. `env_ids`: [first, last + 1) of the
        environment ids the rows hold from here on, recorded in the root attribute
        `env_ranges` ([from_frame, first, stop] each) that analyze checks them against."""
        if batch_size < 1 or num_actions < 1:
            raise ValueError(f"batch_size and num_actions must be >= 1, got {batch_size}, {num_actions}")
        self.path = pathlib.Path(path)
        self.batch_size = batch_size
        self.num_actions = num_actions
        row_bytes = batch_size * (sum(np.dtype(t).itemsize for t, _ in STEP_FIELDS.values())
                                  + 4 * num_actions)
        self.flush_every = max(1, min(flush_every, flush_bytes // row_bytes))
        self.flush_seconds = flush_seconds
        self.min_flush_seconds = min_flush_seconds
        self.chunk_steps = chunk_steps
        self.flush_bytes = flush_bytes
        self._obs_bytes = 0
        self._last_flush = time.time()
        self._shape = (batch_size,)
        self._logits_shape = (batch_size, num_actions)
        self.observations = observations
        self.min_free_bytes = min_free_bytes
        self.failed: TrajectoryWriteError | None = None
        self._steps_written = 0
        self._episodes_written = 0
        self._obs_written = 0
        self._new_buffers(self.flush_every)
        self._pending_episodes: list[tuple] = []
        self._pending_obs: list[tuple] = []
        self._obs_last_block: dict[int, int] = {}  # env id -> row // stride of its last observation
        kw = self._dataset_kw = dataset_kwargs(compression)
        self._alive = None  # a shared lock on the file while this writer lives (see _hold_alive)
        if resume_after_frame is not None and self.path.exists():
            self._reopen(resume_after_frame, resume_expected_rows, resume_restarts_envs, resume_file_id,
                         (attrs or {}).get("run_id"), resume_logged_until, env_ids)
            self.file_id = str(self.file.attrs.get("file_id", ""))
            self._open_datasets()
            self._hold_alive()
            return
        try:
            self.file = h5py.File(self.path, "w", libver="latest")
        except OSError as exc:
            raise TrajectoryLogError(f"{self.path}: cannot create trajectory file: {exc}") from exc
        f = self.file
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["file_id"] = self.file_id = uuid.uuid4().hex  # masters and resumes check it
        f.attrs["compression"] = compression or "none"
        for key, value in (attrs or {}).items():
            f.attrs[key] = value if isinstance(value, (int, float, str, np.number)) else json.dumps(value)
        if env_ids is not None:
            f.attrs["env_ranges"] = json.dumps([[int(resume_after_frame or 0), *map(int, env_ids)]])
        steps = f.create_group("steps")
        for name, (dtype, _) in STEP_FIELDS.items():
            steps.create_dataset(name, shape=(0, batch_size), maxshape=(None, batch_size),
                                 dtype=dtype, chunks=(chunk_steps, batch_size), **kw)
        steps.create_dataset("behavior_logits", shape=(0, batch_size, num_actions),
                             maxshape=(None, batch_size, num_actions), dtype=np.float32,
                             chunks=(max(1, chunk_steps // 4), batch_size, num_actions), **kw)
        episodes = f.create_group("episodes")
        for name, dtype in EPISODE_FIELDS.items():
            episodes.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype,
                                    chunks=(1024,), **kw)
        if observations is not None:
            self._create_observations(f, observations, kw)
        if resume_after_frame is not None and (
                resume_expected_rows or (resume_expected_rows is None and resume_after_frame > 0)):
            # the file the checkpoint's rows went into is gone (deleted, moved, not copied),
            # or the checkpoint's job did not log (None): no row before this frame is here
            f.attrs["gaps"] = json.dumps([[0, int(resume_after_frame)]])
            if resume_restarts_envs:
                f.attrs["restarts"] = json.dumps([int(resume_after_frame)])
            counted = (f"the {resume_expected_rows} step rows the checkpoint counted"
                       if resume_expected_rows else "the steps before the checkpoint, which its "
                       "job did not log,")
            print(f"warning: {self.path}: missing; {counted} (up to frame {resume_after_frame}) "
                  f"are not in the new file started here; recorded in its `gaps` attribute",
                  file=sys.stderr)
        f.swmr_mode = True  # every dataset exists now; readers may attach while we append
        self._open_datasets()
        self._hold_alive()

    @staticmethod
    def _create_observations(f, observations: ObservationLogging, kw: dict):
        obs = f.create_group("observations")
        obs.attrs["stride"] = observations.stride
        obs.attrs["env_ids"] = np.asarray(observations.env_ids, dtype=np.int32)
        shape = tuple(observations.shape)
        obs.create_dataset("frames", shape=(0, *shape), maxshape=(None, *shape), dtype=np.uint8,
                           chunks=(1, *shape), **kw)
        obs.create_dataset("index", shape=(0, 3), maxshape=(None, 3), dtype=np.int64, chunks=(1024, 3),
                           **kw)  # compressed like every other dataset

    def _hold_alive(self):
        """Hold a shared flock on the file while writing: HDF5 drops its own lock once SWMR
        writing starts, and clear_stale_write_flags must tell a live writer from a dead one
        (the kernel drops a dead process's locks)."""
        import fcntl
        self._alive = open(self.path, "rb")
        try:
            fcntl.flock(self._alive, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:  # a file system without flock: nothing to hold
            self._alive.close()
            self._alive = None

    def _open_datasets(self):
        # Held open for the writer's life: HDF5 writes a dataset's cached chunks when its
        # last handle closes, and h5py only prints (never raises) an error from that close,
        # so with short-lived handles a full disk would lose rows silently. Held handles
        # leave the writing to file.flush(), which raises.
        steps = self.file["steps"]
        self._steps_ds = {name: steps[name] for name in self._buffers}
        self._episodes_ds = {name: self.file["episodes"][name] for name in EPISODE_FIELDS}
        self._obs_ds = ({name: self.file["observations"][name] for name in ("frames", "index")}
                        if "observations" in self.file else None)

    def _new_buffers(self, rows: int):
        b, a = self.batch_size, self.num_actions
        self._buffers = {name: np.empty((rows, b), dtype) for name, (dtype, _) in STEP_FIELDS.items()}
        self._buffers["behavior_logits"] = np.empty((rows, b, a), np.float32)
        self._buffered = 0

    def _reopen(self, last_frame: int, expected_rows: int | None, restarts_envs: bool,
                file_id: str | None, run_id: str | None, logged_until: int | None = None,
                env_ids: tuple[int, int] | None = None):
        # every check that can refuse the resume, before anything changes the file
        kept = check_resumable(self.path, self.batch_size, self.num_actions, self.observations, expected_rows,
                               file_id, run_id, flush_seconds=self.flush_seconds, wait=False,
                               last_frame=last_frame, logged_until=logged_until)
        # the writer of a killed or aborted job; it flushed at least every flush_seconds
        clear_stale_write_flags(self.path, idle_seconds=quiet_seconds(self.flush_seconds))
        try:
            self.file = h5py.File(self.path, "a", libver="latest")
        except OSError as exc:
            raise TrajectoryLogError(f"{self.path}: cannot reopen trajectory file to resume: {exc}") from exc
        try:
            # new datasets (observations logged from this resume on) as the file's others
            self._dataset_kw = dataset_kwargs(str(self.file.attrs.get("compression", "lzf")))
            ranges = None
            if "env_ranges" in self.file.attrs:  # (an older file's are unknown: none are added)
                # read before anything changes; those of the timeline the resume replaces go with
                # its rows (a retired rank's file too, reopened without env_ids)
                ranges = [r for r in json_list_attr(self.file, "env_ranges") if r[0] < last_frame]
                if env_ids is not None and (not ranges or ranges[-1][1:] != list(map(int, env_ids))):
                    ranges.append([int(last_frame), *map(int, env_ids)])
            self._truncate_for_resume(last_frame, expected_rows, restarts_envs, kept, logged_until)
            if ranges:
                self.file.attrs["env_ranges"] = json.dumps(ranges)
            elif ranges is not None:
                del self.file.attrs["env_ranges"]
        except TrajectoryLogError:
            self.file.close()
            raise
        except (OSError, RuntimeError, KeyError, ValueError) as exc:
            self.file.close()
            raise TrajectoryLogError(f"{self.path}: cannot resume logging into it: {exc}") from exc

    def _truncate_for_resume(self, last_frame: int, expected_rows: int | None, restarts_envs: bool,
                             kept: tuple, logged_until: int | None = None):
        # check_resumable passed (_reopen), and found the rows kept: nothing below refuses
        steps = self.file["steps"]
        obs = self.file["observations"] if "observations" in self.file else None
        gaps = json_list_attr(self.file, "gaps")
        restarts = json_list_attr(self.file, "restarts")
        cut = _resume_cut(last_frame, logged_until)
        last_row_frames, keep, keep_eps, keep_obs = kept
        episodes = self.file["episodes"]
        if obs is not None:
            index = obs["index"][:keep_obs]
            stride = max(1, int(obs.attrs.get("stride", 1)))
            last_block = {int(env): int(row) // stride for row, env, _ in index}
        resumes = json_list_attr(self.file, "resumes")
        unlogged = None
        if cut < last_frame:  # known: the jobs since the checkpoint at `cut` did not log
            unlogged = [int(last_row_frames[keep - 1]) if keep else 0, int(last_frame)]
        elif expected_rows is None:  # an older checkpoint that does not say: from the rows
            unlogged = _unlogged_frames(last_row_frames[:keep], last_frame,
                                        [g[1] for g in gaps] + restarts + resumes)
        # the checks passed: from here on the file changes
        if expected_rows is not None and keep < expected_rows:
            _record_lost_rows(self.file, self.path, gaps, last_row_frames, keep, expected_rows, last_frame)
        elif unlogged is not None:
            gaps = gaps + [unlogged]
            self.file.attrs["gaps"] = json.dumps(gaps)
            print(f"warning: {self.path}: holds steps up to frame {unlogged[0]} only, and this "
                  f"run resumes at frame {last_frame} (the checkpoint's job did not log "
                  f"trajectories: --log-trajectories false?); the frames between are recorded "
                  f"in its `gaps` attribute (replay refuses episodes across a gap)", file=sys.stderr)
        if restarts_envs:
            self.file.attrs["restarts"] = json.dumps(restarts + [int(last_frame)])
        # where the run stopped and went on: analyze leaves the stopped time out of throughput
        self.file.attrs["resumes"] = json.dumps(resumes + [int(last_frame)])
        for name in (*STEP_FIELDS, "behavior_logits"):
            steps[name].resize(keep, axis=0)
        for name in EPISODE_FIELDS:
            episodes[name].resize(keep_eps, axis=0)
        if obs is not None:
            obs["frames"].resize(keep_obs, axis=0)
            obs["index"].resize(keep_obs, axis=0)
        elif self.observations is not None:  # a run that starts logging observations on resume
            self._create_observations(self.file, self.observations, self._dataset_kw)
        self._steps_written, self._episodes_written, self._obs_written = keep, keep_eps, keep_obs
        if obs is not None:
            self._obs_last_block = last_block
        self.chunk_steps = steps["action"].chunks[0]
        self.file.flush()
        self.file.swmr_mode = True

    def append_step(self, *, action, reward_raw, reward_clipped, terminated, truncated, lives,
                    value, env_id, episode_id, global_frame, behavior_logits, observation=None,
                    unix_time=None):
        """Buffer one step's row; flushes every `flush_every` steps (may raise TrajectoryWriteError)."""
        row = {"action": action, "reward_raw": reward_raw, "reward_clipped": reward_clipped,
               "terminated": terminated, "truncated": truncated, "lives": lives, "value": value,
               "env_id": env_id, "episode_id": episode_id, "global_frame": global_frame}
        for name, array in row.items():
            if getattr(array, "shape", None) != self._shape and np.shape(array) != self._shape:
                raise ValueError(f"{name} must have shape ({self.batch_size},), got {np.shape(array)}")
        if getattr(behavior_logits, "shape", None) != self._logits_shape \
                and np.shape(behavior_logits) != self._logits_shape:
            raise ValueError(f"behavior_logits must have shape ({self.batch_size}, {self.num_actions}), "
                             f"got {np.shape(behavior_logits)}")
        if self._buffered == len(self._buffers["action"]):  # only after a failed flush
            self._grow_buffers()
        i = self._buffered
        buffers = self._buffers
        for name, array in row.items():
            buffers[name][i] = array  # casts to the field's dtype
        now = time.time()
        buffers["unix_time"][i] = now if unix_time is None else unix_time
        buffers["behavior_logits"][i] = behavior_logits
        self._buffered = i + 1
        step_index = self._steps_written + i
        if self.observations is not None and observation is not None:
            self._buffer_observations(step_index, np.asarray(env_id), observation, global_frame)
        if self.failed is None and (
                self._buffered >= self.flush_every or self._obs_bytes >= self.flush_bytes
                or (self.flush_seconds is not None and now - self._last_flush >= self.flush_seconds)
                or (self.min_flush_seconds is not None
                    and (self._steps_written + self._buffered) % self.chunk_steps == 0
                    and now - self._last_flush >= self.min_flush_seconds)):
            self.flush()

    def _buffer_observations(self, step_index, env_ids, observation, global_frame):
        """Each observed environment's first step in this block of `stride` rows."""
        cfg = self.observations
        block = step_index // cfg.stride
        if all(self._obs_last_block.get(e, -1) >= block for e in cfg.env_ids):
            return  # the usual case: a cheap test per row
        for k in np.flatnonzero(np.isin(env_ids, cfg.env_ids)):
            eid = int(env_ids[k])
            if block > self._obs_last_block.get(eid, -1):
                self._obs_last_block[eid] = block
                frame = np.array(observation[k], dtype=np.uint8, copy=True)
                self._pending_obs.append((frame, (step_index, eid, int(np.asarray(global_frame)[k]))))
                self._obs_bytes += frame.nbytes

    def _grow_buffers(self):
        old, n = self._buffers, self._buffered
        self._new_buffers(2 * len(old["action"]))
        for name, array in old.items():
            self._buffers[name][:n] = array[:n]
        self._buffered = n

    def append_episode(self, env_id, episode_id, episode_return, length, start_frame, end_frame):
        self._pending_episodes.append((env_id, episode_id, episode_return, length, start_frame,
                                       end_frame))

    @staticmethod
    def _write_rows(dataset, start: int, rows: np.ndarray):
        # at an offset the writer tracks, not at dataset.shape[0]: a retry after a failed
        # flush overwrites its own partial rows instead of appending after them
        dataset.resize(start + rows.shape[0], axis=0)
        dataset[start:] = rows

    def pending_bytes(self) -> int:
        """Bytes the next flush writes (before compression)."""
        n = self._buffered
        total = sum(b[:n].nbytes for b in self._buffers.values())
        total += len(self._pending_episodes) * 48
        total += sum(o[0].nbytes + 24 for o in self._pending_obs)
        return total

    def _check_free_space(self):
        if self.min_free_bytes is None:
            return
        need = self.pending_bytes() + self.min_free_bytes
        missing = storage.missing_room(self.path.parent, need)
        if missing is not None:
            code, why = missing
            raise TrajectoryWriteError(
                self.path, "trajectory rows", code,
                f"the next flush needs {need / 1e6:.2f} MB with headroom and {why}; stopped "
                f"before writing, so the file is whole up to step {self._steps_written}")

    def flush(self):
        """Append everything buffered and flush the file.

        Raises TrajectoryWriteError (which is a TrajectoryLogError and a
        storage.StorageError) if the file system refuses; the rows stay buffered.
        """
        n = self._buffered
        try:
            if n or self._pending_episodes or self._pending_obs:
                self._check_free_space()
            if n:
                for name, dataset in self._steps_ds.items():
                    self._write_rows(dataset, self._steps_written, self._buffers[name][:n])
            if self._pending_episodes:
                columns = list(zip(*self._pending_episodes))
                for (name, dtype), column in zip(EPISODE_FIELDS.items(), columns):
                    self._write_rows(self._episodes_ds[name], self._episodes_written,
                                     np.asarray(column, dtype=dtype))
            if self._pending_obs:
                self._write_rows(self._obs_ds["frames"], self._obs_written,
                                 np.stack([o[0] for o in self._pending_obs]))
                self._write_rows(self._obs_ds["index"], self._obs_written,
                                 np.asarray([o[1] for o in self._pending_obs], dtype=np.int64))
            self.file.flush()
        except TrajectoryWriteError as exc:
            self.failed = exc
            raise
        except (OSError, RuntimeError) as exc:  # h5py reports a failed write as RuntimeError
            uncut = self._roll_back()
            self.failed = TrajectoryWriteError.from_exception(
                self.path, "trajectory rows", exc,
                f"the file holds the rows up to step {self._steps_written}" + (
                    f"; {', '.join(uncut)} could not be cut back to the rows written: until a flush "
                    f"succeeds its datasets differ in length, which readers refuse as damage and "
                    f"--resume cuts to the checkpoint's rows" if uncut else ""))
            raise self.failed from exc
        self.failed = None
        self._steps_written += n
        self._episodes_written += len(self._pending_episodes)
        self._obs_written += len(self._pending_obs)
        if len(self._buffers["action"]) > self.flush_every:
            self._new_buffers(self.flush_every)
        self._buffered = 0
        self._pending_episodes.clear()
        self._pending_obs.clear()
        self._obs_bytes = 0
        self._last_flush = time.time()

    def _roll_back(self) -> list[str]:
        """Shrink the datasets a failed flush grew back to the rows known to be written, so
        readers and a later close see the state of the last good flush; the names of those
        HDF5 would not shrink (the error says so, not that the file is whole)."""
        groups = [("steps", self._steps_ds, self._steps_written),
                  ("episodes", self._episodes_ds, self._episodes_written)]
        if self._obs_ds is not None:
            groups.append(("observations", self._obs_ds, self._obs_written))
        uncut = []
        for group, datasets, rows in groups:
            for name, dataset in datasets.items():
                try:
                    if dataset.shape[0] != rows:
                        dataset.resize(rows, axis=0)
                except (OSError, RuntimeError):
                    uncut.append(f"{group}/{name}")
        return uncut

    @property
    def steps_written(self) -> int:
        return self._steps_written

    @property
    def steps_logged(self) -> int:
        """Rows appended so far, written or still buffered (after a failed flush)."""
        return self._steps_written + self._buffered

    def close(self):
        """Flush (retrying rows a failed flush left) and close; raises TrajectoryWriteError
        if the rows still cannot be written, after closing the file as far as HDF5 can."""
        if not self.file.id.valid:
            return
        try:
            self.flush()
        finally:
            try:  # also closes the held dataset handles
                self.file.close()
            except (OSError, RuntimeError):
                # HDF5 could not finish the file; freeing its handles later crashed the
                # process inside HDF5 (at exit: a segfault in place of the stop's status)
                if KEEP_UNFINISHED_WRITERS:
                    _UNFINISHED_WRITERS.append(self)
                if self.failed is None:
                    raise
            finally:
                if self._alive is not None:
                    self._alive.close()
                    self._alive = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# The command line (cli.run, for `train`) sets it: writers whose file HDF5 failed to close
# are then kept from the GC until end_process_if_unfinished ends the process. A library
# user's process goes on (and end_process_if_unfinished returns).
KEEP_UNFINISHED_WRITERS = False
_UNFINISHED_WRITERS: list = []


def end_process_if_unfinished(code: int) -> None:
    """After a writer's file failed to close (a write error HDF5 could not recover from),
    end the process with `code` without Python's teardown, whose freeing of that file's
    handles crashed inside HDF5 (exit status 139, or 11 under mpiexec, instead of `code`).
    Callers flush and finalize what they need first. Otherwise returns."""
    if not _UNFINISHED_WRITERS:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _unlogged_frames(row_frames, last_frame: int, breaks) -> list | None:
    """[last logged frame, last_frame] when the rows stop short of the resume frame by more
    than the largest step between consecutive rows (the rows of a rank end an iteration up
    to the other ranks' frames before the checkpoint's frame, and the next iteration's first
    row jumps over those frames plus one step of its own); None when nothing is missing.
    For a checkpoint that does not count the rows: its job did not log them. Steps across
    `breaks` (frames of earlier gaps, restarts and resumes) are not the run's own."""
    since = int(row_frames[-1]) if row_frames.size else 0
    recent = row_frames[-1024:]
    step = 0
    if recent.size > 1:
        before, after = recent[:-1], recent[1:]
        own = ~crosses_breaks(before, after, breaks)
        if own.any():
            step = int((after - before)[own].max())
    return [since, int(last_frame)] if last_frame - since > step else None


def crosses_breaks(before, after, breaks) -> np.ndarray:
    """For each pair of rows (frames `before`, `after`): whether a break frame b (a gap's
    end, a restart, a resume) lies between them, before <= b < after."""
    breaks = np.asarray(sorted(breaks), dtype=np.int64)
    return np.searchsorted(breaks, after, "left") > np.searchsorted(breaks, before, "left")


def _record_lost_rows(f, path, gaps: list, last_row_frames, kept: int, expected_rows: int, last_frame: int):
    """Rows the checkpoint counted never reached the file (the job was stopped first):
    record the frames they covered in the `gaps` attribute, and warn."""
    since = int(last_row_frames[kept - 1]) if kept else 0
    f.attrs["gaps"] = json.dumps(gaps + [[since, int(last_frame)]])
    print(f"warning: {path}: {expected_rows - kept} step rows after frame {since} (up to the "
          f"checkpoint's frame {last_frame}) were lost before they reached the file; recorded "
          f"in its `gaps` attribute (replay refuses episodes across a gap)", file=sys.stderr)


def check_frames_grow(path, frames, rows, env_ids, consequence: str) -> None:
    """TrajectoryLogError naming the first place where an environment's steps/global_frame
    does not grow down its rows (frames[i, k]: environment env_ids[k]'s frame in file row
    rows[i]): a run steps an environment at most once a row and its frame count only grows,
    so anything else is damage, which a reader must not replay or copy."""
    frames = np.asarray(frames)
    back = np.argwhere(np.diff(frames, axis=0) <= 0)
    if back.size:
        i, k = (int(v) for v in back[0])
        raise TrajectoryLogError(
            f"{path}: damaged trajectory file: env {int(env_ids[k])}'s steps/global_frame goes from "
            f"{frames[i, k]} (row {int(rows[i])}) to {frames[i + 1, k]} (row {int(rows[i + 1])}); {consequence}")


def synchronous_env_ids(path, env_id, rows: int, schedule: str) -> np.ndarray | None:
    """Row 0 of `env_id` (a dataset or an array) if its first `rows` rows all hold those
    environments in that order, else None: an impala log, whose rows hold whichever
    environments answered. An a2c log's rows must, so there a differing row, or a row 0
    of fill values, is named as damage."""
    first = env_id[0]
    if schedule != "impala" and (first < 0).any():
        raise TrajectoryLogError(f"{path}: damaged trajectory file: steps/env_id row 0 holds "
                                 f"{first.tolist()}, not environment ids")
    step = max(1, (16 << 20) // max(1, env_id.shape[1] * env_id.dtype.itemsize))  # 16 MB reads
    for start in range(0, rows, step):
        block = env_id[start:min(rows, start + step)]
        same = ((block >= 0) & (block == first)).all(axis=1)
        if same.all():
            continue
        if schedule == "impala":
            return None
        bad = start + int(np.argmin(same))
        raise TrajectoryLogError(
            f"{path}: damaged trajectory file: steps/env_id row {bad} ({env_id[bad].tolist()}) differs "
            f"from row 0 ({first.tolist()}), but the run's schedule ({schedule}) steps every "
            f"environment in every row")
    return first


def rank_file(run_dir, rank: int) -> pathlib.Path:
    return pathlib.Path(run_dir) / RANK_FILE_PATTERN.format(rank=rank)


# datasets every trajectory file has (rank file or master), with their dimensions
REQUIRED_DATASETS = {**{f"steps/{name}": 2 for name in STEP_FIELDS}, "steps/behavior_logits": 3,
                     **{f"episodes/{name}": 1 for name in EPISODE_FIELDS}}
DATASET_DTYPES = {**{f"steps/{name}": np.dtype(dtype) for name, (dtype, _) in STEP_FIELDS.items()},
                  "steps/behavior_logits": np.dtype(np.float32),
                  **{f"episodes/{name}": np.dtype(dtype) for name, dtype in EPISODE_FIELDS.items()},
                  "observations/frames": np.dtype(np.uint8), "observations/index": np.dtype(np.int64)}


def json_list_attr(f, name: str) -> list:
    """A root attribute holding a JSON list (gaps, restarts); [] when absent."""
    raw = f.attrs.get(name)
    if raw is None:
        return []
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        raise TrajectoryLogError(f"{f.filename}: its {name!r} attribute is not JSON") from None
    if not isinstance(value, list):
        raise TrajectoryLogError(f"{f.filename}: its {name!r} attribute is not a list")
    def is_frame(x) -> bool:  # frames are int64 in the step rows they are compared with
        return type(x) is int and 0 <= x < 2 ** 63
    if name == "gaps":  # [[after_frame, upto_frame], ...]
        ok = all(isinstance(g, list) and len(g) == 2 and all(map(is_frame, g)) for g in value)
    elif name in ("restarts", "resumes"):  # [frame, ...]
        ok = all(map(is_frame, value))
    elif name == "env_ranges":  # [[from_frame, first_env, stop_env], ...]
        ok = all(isinstance(r, list) and len(r) == 3 and all(map(is_frame, r)) and r[1] < r[2] <= 2 ** 31
                 for r in value)  # env_id is int32
    else:
        ok = True
    if not ok:
        what = {"gaps": "[from, to] frame pairs", "env_ranges": "[from_frame, first, stop] environment ranges"}
        raise TrajectoryLogError(f"{f.filename}: its {name!r} attribute is not a list of "
                                 f"{what.get(name, 'frames')}: {raw}")
    return value


def _damaged(path, exc) -> TrajectoryLogError:
    detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc  # no repr quotes
    return TrajectoryLogError(f"{path}: damaged trajectory file (HDF5 could not read it: {detail})")


class TrajectoryFile(h5py.File):
    """An h5py.File from open_trajectory_file: an HDF5 error inside its `with` block (a
    damaged chunk read lazily) is re-raised as TrajectoryLogError naming the file, which
    the CLI reports as a message instead of a traceback without the path."""

    def __exit__(self, exc_type, exc, tb):
        path = self.filename
        super().__exit__(exc_type, exc, tb)
        # not KeyError: after the layout check at open, that is a caller's wrong name
        if isinstance(exc, (OSError, RuntimeError)) and not isinstance(exc, TrajectoryLogError) \
                and _raised_in_h5py(tb):
            raise _damaged(path, exc) from exc


def _raised_in_h5py(tb) -> bool:
    # only HDF5's errors, not an OSError of the caller's own code inside the block
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith("h5py")


def open_trajectory_file(path) -> TrajectoryFile:
    """Open a trajectory file for reading (in SWMR mode if a writer has it open).

    A missing, truncated, damaged or foreign file, one that lacks a dataset of the layout,
    and a master file whose rank files are missing raise TrajectoryLogError naming it.
    """
    return _open(pathlib.Path(path), master_ok=True)


def _open(path: pathlib.Path, master_ok: bool) -> TrajectoryFile:
    if not path.exists():
        raise TrajectoryLogError(f"{path}: no such trajectory file")
    if path.is_dir():
        raise TrajectoryLogError(f"{path}: a directory; name one of its traj_rank*.h5 files or "
                                 f"its trajectories.h5")
    _check_superblock(path)
    f = _open_h5(path)
    try:
        if _check_contents(f, path, master_ok) and not f.swmr_mode:
            # a rank file is open for writing, and virtual datasets open their sources
            # in the master's mode
            f.close()
            f = _open_h5(path, swmr=True)
    except TrajectoryLogError:
        f.close()
        raise
    except (OSError, RuntimeError, KeyError) as exc:
        f.close()
        raise _damaged(path, exc) from exc
    except BaseException:
        f.close()
        raise
    return f


def _locking_differs(exc: OSError) -> bool:
    """HDF5's refusal to open a file without locking that this process has open with it."""
    return "file locking" in str(exc) and "don't match" in str(exc)


def open_unlocked(path) -> h5py.File:
    """A finished file opened for reading without an HDF5 file lock (see _open_h5), or with
    HDF5's default where this process holds it open that way (a notebook's h5py.File)."""
    try:
        return h5py.File(path, "r", locking=False)
    except OSError as exc:
        if _locking_differs(exc):
            return h5py.File(path, "r")
        raise


def _open_h5(path: pathlib.Path, swmr: bool = False, locking: bool | None = False) -> TrajectoryFile:
    """Open without SWMR unless the file is open for writing (a running job, or a killed one).

    An SWMR reader retries a metadata block whose checksum fails (a writer may be halfway
    through it); read without SWMR a damaged file fails in milliseconds, and in SWMR mode
    the retries are bounded (_swmr_file_access).

    Readers take no HDF5 file lock: it would make a resuming writer's open fail while
    anyone (a notebook, a monitor) reads the run, and they never need it (the writer is in
    SWMR mode, or gone). HDF5 refuses that only where this process already has the file
    open with its default locking (its own writer): then the open uses the default too.
    """
    try:
        if swmr:
            fapl = _swmr_file_access(locking)
            if fapl is not None:
                flags = h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ
                return TrajectoryFile(h5py.h5f.open(os.fsencode(path), flags, fapl=fapl))
        return TrajectoryFile(path, "r", libver="latest", swmr=swmr, locking=locking)
    except OSError as exc:
        if locking is False and _locking_differs(exc):
            return _open_h5(path, swmr=swmr, locking=None)
        # HDF5 says so only once the superblock's checksum passed: a damaged superblock
        # fails here and never reaches the slow SWMR open
        if not swmr and "already open for write" in str(exc):
            return _open_h5(path, swmr=True, locking=locking)
        raise TrajectoryLogError(f"{path}: not a readable HDF5 file (damaged or truncated): "
                                 f"{exc}") from exc


# Failed metadata reads an SWMR reader repeats. HDF5 doubles the wait after each, from
# 1 ns: with HDF5 2.0, a damaged object header failed after 25 attempts in 0.04 s, 30 in
# 1.1 s, 35 in 34 s, and its default of 100 had not failed after 10 minutes. A writer's
# half-written block is whole again within microseconds, so 30 leaves plenty.
SWMR_READ_ATTEMPTS = 30


def _swmr_file_access(locking: bool | None = False):
    """A file access property list for SWMR reading (libver latest, SWMR_READ_ATTEMPTS), or
    None where HDF5's H5Pset_metadata_read_attempts cannot be reached (h5py does not wrap
    it; it is called through ctypes in the HDF5 library h5py loaded, found in
    /proc/self/maps, so on Linux)."""
    setter = _find_read_attempts_setter()
    if setter is None:
        return None
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)  # libver="latest"
    if locking is not None:  # None: HDF5's default (see _open_h5)
        fapl.set_file_locking(locking, True)
    if setter(fapl.id, SWMR_READ_ATTEMPTS) < 0:
        return None
    return fapl


@functools.lru_cache(maxsize=1)
def _find_read_attempts_setter():
    import ctypes
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libhdf5" in line}
    except OSError:
        return None
    # libhdf5-<hash> in h5py's wheels, libhdf5_serial or libhdf5_openmpi from a distribution;
    # the symbol looked up through libhdf5_hl resolves in the libhdf5 it depends on
    for path in sorted(paths):
        if ".so" not in os.path.basename(path):
            continue
        try:
            function = ctypes.CDLL(path).H5Pset_metadata_read_attempts  # the loaded copy
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_int64, ctypes.c_uint]  # hid_t is 64-bit since HDF5 1.10
        function.restype = ctypes.c_int
        return function
    return None


def _check_contents(f: h5py.File, path: pathlib.Path, master_ok: bool, lengths: bool = True,
                    zeroed: bool = True) -> bool:
    """Check the layout; True if a master file's rank files need SWMR."""
    if "format_version" not in f.attrs or ("steps" not in f and "virtual" not in f.attrs):
        raise TrajectoryLogError(f"{path}: an HDF5 file, but not a hybridsim trajectory log")
    version = f.attrs["format_version"]
    # a scalar integer only: an array made `!=` ambiguous, a string '1' read as another version
    if not isinstance(version, (int, np.integer)) or isinstance(version, bool):
        raise TrajectoryLogError(f"{path}: damaged trajectory file: its format_version attribute "
                                 f"{version!r} is not an integer (this hybridsim reads version "
                                 f"{FORMAT_VERSION})")
    version = int(version)
    if version != FORMAT_VERSION:
        raise TrajectoryLogError(f"{path}: written in trajectory format_version {version!r}; this "
                                 f"hybridsim reads version {FORMAT_VERSION} (see docs/HDF5_LAYOUT.md)")
    swmr = False
    if "virtual" in f.attrs:
        if not master_ok:
            raise TrajectoryLogError(f"{path}: a master file where a rank file belongs")
        swmr = _check_ranks(f, path)
    # here, so that analyze and replay never meet a KeyError
    required = dict(REQUIRED_DATASETS)
    if "observations" in f:
        required.update({"observations/frames": None, "observations/index": 2})
    bad = []
    for name, ndim in required.items():
        group = name.split("/")[0]
        if group not in f:
            if f"{group} is missing" not in bad:
                bad.append(f"{group} is missing")
            continue
        if name not in f:
            bad.append(f"{name} is missing")
            continue
        ds = f[name]  # a KeyError here: the link is there, its object header unreadable
        if not isinstance(ds, h5py.Dataset):
            bad.append(f"{name} is not a dataset")
        elif ndim is not None and ds.ndim != ndim:
            bad.append(f"{name} is {ds.ndim}-D, not {ndim}-D")
        elif name in DATASET_DTYPES and ds.dtype != DATASET_DTYPES[name]:
            bad.append(f"{name} is {ds.dtype}, not {DATASET_DTYPES[name]}")
    if not bad and "observations/index" in required and f["observations/index"].shape[1] != 3:
        bad.append(f"observations/index has {f['observations/index'].shape[1]} columns, not 3 "
                   f"(step row, env_id, global_frame)")
    if not bad and f["steps/behavior_logits"].shape[2] < 1:
        bad.append("steps/behavior_logits has no action column")
    if not bad and lengths and not f.swmr_mode:  # (a live writer resizes one dataset after another)
        bad = _unequal_lengths(f)
    if not bad and zeroed and "virtual" not in f.attrs:  # a master's datasets are its rank files'
        bad = _zeroed_chunks(f, required)
    if bad:
        raise TrajectoryLogError(f"{path}: damaged trajectory file: {'; '.join(bad)}")
    return swmr


# bytes at a chunk's start that _zeroed_chunks reads first (the whole chunk only when all are 0)
CHUNK_HEAD_BYTES = 64


def _zeroed_chunks(f, names, rows_below: dict | None = None) -> list[str]:
    """Compressed chunks whose stored bytes are all zeros, such as blocks a node's crash
    lost. HDF5 passes them (the fletcher32 sum of zeros is zero) and h5py's lzf filter
    then returns whatever its buffer held: analyze printed a mean episode length of 3e17.
    A compressed chunk is never all zeros (an uncompressed one may be: no check there).
    rows_below: group -> rows; only chunks starting above that row are looked at."""
    bad = []
    with open(f.filename, "rb") as fh:
        fd = fh.fileno()
        for name in names:
            ds = f[name]
            if ds.compression is None or ds.chunks is None:
                continue
            chunks = []
            try:
                try:
                    ds.id.chunk_iter(chunks.append)
                except (AttributeError, NotImplementedError):  # h5py built on HDF5 < 1.12.3
                    # by coordinates: get_chunk_info(i) walks the index from its start each time
                    grid = itertools.product(*(range(0, n, c) for n, c in zip(ds.shape, ds.chunks)))
                    chunks = [ds.id.get_chunk_info_by_coord(coord) for coord in grid]
            except (OSError, RuntimeError):
                # HDF5 flushes the file's cached chunks first: a writer of this process whose
                # flush failed (a full disk) fails it too. The reads will say what they find.
                continue
            for chunk in chunks:
                offset, size = chunk.byte_offset, chunk.size
                # a filter that did not pay (lzf on a few bytes) is skipped and flagged in the
                # mask: that chunk is stored as it is, and zeros may be its data
                if offset is None or size == 0 or chunk.filter_mask:
                    continue
                if rows_below is not None and chunk.chunk_offset[0] >= rows_below.get(name.split("/")[0], 0):
                    continue
                if not any(os.pread(fd, min(size, CHUNK_HEAD_BYTES), offset)) \
                        and not any(os.pread(fd, size, offset)):
                    bad.append(f"{name}'s chunk at byte {offset:,} ({size:,} bytes) is all zeros, "
                               f"which no compressed chunk is (blocks lost by the disk or file system?)")
                    break
    return bad


GROUP_DATASETS = {"steps": (*STEP_FIELDS, "behavior_logits"), "episodes": tuple(EPISODE_FIELDS),
                  "observations": ("frames", "index")}


def _unequal_lengths(f) -> list[str]:
    """The groups whose datasets disagree on their row count (or steps on the batch)."""
    bad = []
    for group, names in GROUP_DATASETS.items():
        if group not in f:
            continue
        rows = {name: f[group][name].shape[0] for name in names}
        if len(set(rows.values())) > 1:
            listed = ", ".join(f"{name} {n}" for name, n in rows.items())
            bad.append(f"the {group} datasets differ in length ({listed} rows)")
    batches = {f["steps"][name].shape[1] for name in GROUP_DATASETS["steps"]} if "steps" in f else set()
    if len(batches) > 1:
        bad.append(f"the steps datasets differ in batch size ({sorted(batches)})")
    return bad


def common_rows(group, names=None) -> int:
    """Rows every dataset of `group` has: a file open for writing may show one dataset
    already grown and the next not yet; readers take the rows all of them hold."""
    names = names or GROUP_DATASETS[group.name.strip("/")]
    return min(group[name].shape[0] for name in names)


def _check_ranks(f: h5py.File, path: pathlib.Path) -> bool:
    """Check that the rank files a master file reads are beside it and readable (HDF5 reads
    a missing source as fill values, which look like data); True if one needs SWMR."""
    try:
        names = json.loads(f.attrs["ranks"])
    except (KeyError, TypeError, ValueError):
        names = None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise TrajectoryLogError(f"{path}: a master file without a list of rank files in its "
                                 f"'ranks' attribute; read its traj_rank*.h5 files instead")
    missing = [name for name in names if not (path.parent / name).is_file()]
    if missing:
        raise TrajectoryLogError(
            f"{path}: its rank file{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"{'are' if len(missing) > 1 else 'is'} missing from {path.parent}; a master file "
            f"holds no rows itself, its rank files must stay beside it")
    try:  # the rows each rank file had when the master was written (absent before 2026-12)
        recorded = json.loads(f.attrs.get("rank_rows", "{}"))
    except (TypeError, ValueError):
        recorded = {}
    try:
        file_ids = json.loads(f.attrs.get("rank_file_ids", "{}"))
    except (TypeError, ValueError):
        file_ids = {}
    swmr = False
    for name in names:
        try:
            with _open(path.parent / name, master_ok=False) as rank:
                swmr |= rank.swmr_mode
                now = [common_rows(rank["steps"]), common_rows(rank["episodes"])]
                file_id = rank.attrs.get("file_id")
        except TrajectoryLogError as exc:
            raise TrajectoryLogError(f"{path}: reads {exc}") from exc
        expected_id = file_ids.get(name) if isinstance(file_ids, dict) else None
        if expected_id and expected_id != file_id:
            raise TrajectoryLogError(
                f"{path}: {name} beside it is not the file it was written over (another run's, or "
                f"one copied in?); rewrite it with hybridsim.trajlog.write_master({str(path.parent)!r})")
        then = recorded.get(name) if isinstance(recorded, dict) else None
        if isinstance(then, list) and len(then) == 2 and (now[0] < then[0] or now[1] < then[1]):
            raise TrajectoryLogError(
                f"{path}: stale: {name} now holds {now[0]} step and {now[1]} episode rows, fewer than "
                f"the {then[0]} and {then[1]} it was written over (a resume cut them); rewrite it with "
                f"hybridsim.trajlog.write_master({str(path.parent)!r})")
        if isinstance(then, list) and len(then) == 2 and (now[0] > then[0] or now[1] > then[1]):
            import warnings
            warnings.warn(f"{path}: covers {then[0]} of the {now[0]} step rows and {then[1]} of the "
                          f"{now[1]} episode rows {name} holds now (written before the run went on); "
                          f"rewrite it with hybridsim.trajlog.write_master({str(path.parent)!r}) or "
                          f"read the rank files", HybridsimWarning, stacklevel=2)
    return swmr


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _check_superblock(path: pathlib.Path) -> None:
    """Reject a non-HDF5 or truncated file before h5py opens it.

    Needed because an SWMR open (of a file a writer left open) of a truncated file retries
    its metadata reads for a long time instead of failing. The superblock (HDF5 file format
    spec, section II.A) stores the end-of-file address; a file shorter than that lost its
    tail, and one too short to hold that address lost nearly everything.
    """
    size = _regular_file(path).st_size
    try:
        with open(path, "rb") as fh:
            head = fh.read(128)
    except PermissionError as exc:  # not damage: the file is there, this user may not read it
        raise TrajectoryLogError(f"{path}: cannot read it: {exc.strerror} (file permissions, "
                                 f"or the directory's)") from exc
    if len(head) <= len(HDF5_SIGNATURE) and HDF5_SIGNATURE.startswith(head):
        raise _too_short(path, size)
    if not head.startswith(HDF5_SIGNATURE):
        raise TrajectoryLogError(f"{path}: not a readable HDF5 file (no HDF5 signature at offset 0)")
    version = head[8]
    if version in (2, 3):  # sig, version, offset size, length size, flags, then the addresses
        offset_at, addresses_at = 9, 12
    elif version in (0, 1):  # 8 + 8 bytes of versions/sizes, 4 (+4 in v1) more, then addresses
        offset_at, addresses_at = 13, 24 + 4 * version
    else:
        return  # a future layout: let HDF5 judge
    if len(head) <= offset_at:
        raise _too_short(path, size)
    offset_size = head[offset_at]
    if offset_size not in (2, 4, 8):
        return  # a damaged superblock: HDF5 fails on it at once
    eof_at = addresses_at + 2 * offset_size  # the third address
    if len(head) < eof_at + offset_size:  # read as 0, this passed and SWMR retried for minutes
        raise _too_short(path, size)
    eof = int.from_bytes(head[eof_at:eof_at + offset_size], "little")
    if size < eof:
        raise TrajectoryLogError(f"{path}: truncated file ({size} bytes on disk, the HDF5 superblock "
                                 f"says {eof}); it holds no readable trajectory")


_MASK32 = 0xFFFFFFFF


def _rotate(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _MASK32


def hdf5_checksum(data: bytes) -> int:
    """HDF5's metadata checksum: Bob Jenkins' lookup3 hashlittle with initial value 0
    (HDF5 file format spec, "Appendix C: Jenkins' lookup3 Hash Function")."""
    a = b = c = (0xDEADBEEF + len(data)) & _MASK32
    if not data:
        return c
    words = data + bytes(-len(data) % 12)  # the tail, zero-padded: the same sums
    for k in range(0, len(words), 12):
        x, y, z = (int.from_bytes(words[k + i:k + i + 4], "little") for i in (0, 4, 8))
        a, b, c = (a + x) & _MASK32, (b + y) & _MASK32, (c + z) & _MASK32
        if k + 12 == len(words):
            break  # the last block goes to the final mix
        for r in (4, 6, 8, 16, 19, 4):  # mix(): each step is "a -= c; a ^= rot(c); c += b"
            a = ((a - c) & _MASK32) ^ _rotate(c, r)  # on the next rotation of (a, b, c)
            c = (c + b) & _MASK32
            a, b, c = b, c, a
    for r in (14, 11, 25, 16, 4, 14, 24):  # final(): "c ^= b; c -= rot(b)", rotating (c, b, a)
        c = ((c ^ b) - _rotate(b, r)) & _MASK32
        a, b, c = b, c, a
    return b  # seven rotations of three names: final()'s c is in b


SUPER_WRITE_ACCESS, SUPER_SWMR_WRITE_ACCESS = 0x01, 0x04  # superblock v3 consistency flags


def check_resumable(path, batch_size: int, num_actions: int, observations: ObservationLogging | None = None,
                    expected_rows: int | None = None, file_id: str | None = None, run_id: str | None = None,
                    flush_seconds: float | None = None, wait: bool = True, last_frame: int | None = None,
                    logged_until: int | None = None) -> tuple | None:
    """Every check that can refuse resuming TrajectoryWriter logging into `path`, with
    nothing written: a multi-rank trainer runs them on all ranks and ends the job before
    any rank changes its file when one would refuse. A missing file passes (a new one is
    started). wait: also wait, as clear_stale_write_flags does, for a killed writer's file
    to go quiet (a live writer's is refused). With `last_frame`: also the blocks a resume
    to it rewrites, and the rows it keeps are returned (_rows_kept), for the resume."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    _check_superblock(path)
    if not os.access(path, os.R_OK | os.W_OK):
        raise TrajectoryLogError(f"{path}: cannot resume logging into it: not readable and writable by "
                                 f"this user (permissions, or an immutable or read-only file)")
    if wait:
        clear_stale_write_flags(path, idle_seconds=quiet_seconds(flush_seconds), dry_run=True)
    with open(path, "rb") as fh:  # also a cleanly closed file: a reader's HDF5 lock stops the writer's open
        _lock_alone(fh, path)
    try:
        with _open_h5(path) as f:
            _resume_checks(f, path, batch_size, num_actions, observations, expected_rows, file_id, run_id)
            if last_frame is None:
                return None
            _check_kept_chunks(f, path, _RESUME_READS, None)
            kept = _rows_kept(f, _resume_cut(last_frame, logged_until))
            # (the datasets read whole were checked whole just above)
            _check_kept_chunks(f, path, [n for n in _layout_names(f) if n not in _RESUME_READS], kept)
            _check_blocks_rewritten(f, path, kept)
            return kept
    except TrajectoryLogError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        raise TrajectoryLogError(f"{path}: cannot resume logging into it: {exc}") from exc


def _resume_checks(f, path, batch_size, num_actions, observations, expected_rows, file_id, run_id) -> None:
    # the layout first: damage is named as damage, not as another run's file (lost
    # blocks only where the resume reads or keeps rows: _check_kept_chunks)
    _check_contents(f, path, master_ok=False, lengths=False, zeroed=False)
    for name in ("gaps", "restarts", "resumes", "env_ranges"):  # the resume reads them: refused before any rank cuts
        json_list_attr(f, name)
    held, held_run = str(f.attrs.get("file_id", "")), str(f.attrs.get("run_id", ""))
    # another file than the checkpoint's is this run's only when a resume started it
    # anew (the checkpoint's file was missing) and a kill came before the next checkpoint
    if file_id and held != file_id and not (run_id and held_run == run_id):
        raise TrajectoryLogError(
            f"{path}: not the trajectory file this run's checkpoint wrote into (its "
            f"file_id is {held or 'missing'}, the checkpoint's {file_id}): another run's "
            f"file{'' if held else ', or a damaged one (hybridsim analyze on it tells)'}? Move it "
            f"away and resume: a new file then starts at the checkpoint")
    # lengths may differ after a kill inside a flush: the resume cuts them to the
    # shortest, unless that loses rows the checkpoint counted (it flushed them
    # before it was written, so they were all there: damage)
    steps = f["steps"]
    rows = {ds.shape[0] for ds in steps.values()}
    if expected_rows and len(rows) > 1 and min(rows) < expected_rows:
        raise TrajectoryLogError(f"{path}: damaged trajectory file: {'; '.join(_unequal_lengths(f))}")
    shape = steps["behavior_logits"].shape
    if shape[1:] != (batch_size, num_actions):
        raise TrajectoryLogError(f"{path}: holds batches of {shape[1:]}, this run logs "
                                 f"{(batch_size, num_actions)}; use a new log_dir")
    obs = f["observations"] if "observations" in f else None
    if obs is not None and observations is not None:
        stride = int(obs.attrs.get("stride", -1))
        if stride != observations.stride:
            raise TrajectoryLogError(
                f"{path}: logs observations every {stride} steps, this run every "
                f"{observations.stride}; resume with that stride or use a new log_dir")
        if obs["frames"].shape[1:] != tuple(observations.shape):
            raise TrajectoryLogError(
                f"{path}: logs observations of shape {obs['frames'].shape[1:]}, this run "
                f"{tuple(observations.shape)}; use a new log_dir")
    for group in (steps, f["episodes"], obs):
        for name, ds in ({} if group is None else group).items():
            if ds.chunks is None or ds.maxshape[0] is not None:
                raise TrajectoryLogError(f"{path}: dataset {ds.name} cannot grow (not "
                                         f"written by hybridsim's TrajectoryWriter); use a new log_dir")


# what _rows_kept reads whole to find the rows a resume keeps
_RESUME_READS = ("steps/global_frame", "episodes/end_frame", "observations/index")


def _layout_names(f) -> list[str]:
    return list(REQUIRED_DATASETS) + (["observations/frames", "observations/index"] if "observations" in f else [])


def _check_kept_chunks(f, path, names, kept) -> None:
    """Refuse a resume into a file with a lost (zeroed) chunk among the rows it reads or
    keeps (kept: _rows_kept's; None: all rows). Lost blocks past the cut, the usual ones
    after a node's crash (the file is not synced at checkpoints), are dropped unread."""
    names = [name for name in names if name in f]
    rows_below = None if kept is None else {"steps": kept[1], "episodes": kept[2], "observations": kept[3]}
    bad = _zeroed_chunks(f, names, rows_below)
    if bad:
        raise TrajectoryLogError(f"{path}: damaged trajectory file: {'; '.join(bad)}; cannot resume into "
                                 f"it: move it away and resume (a new file then starts at the checkpoint, "
                                 f"and the steps before it are recorded as a gap)")


def _resume_cut(last_frame: int, logged_until: int | None) -> int:
    """The frame a resume cuts a file back to: the rows are the run's up to the last
    checkpoint a logging job wrote."""
    return int(last_frame) if logged_until is None else min(int(logged_until), int(last_frame))


def _rows_kept(f, cut: int) -> tuple:
    """(each step row's frame, and the step, episode and observation rows a resume to frame
    `cut` keeps)."""
    steps, episodes = f["steps"], f["episodes"]
    frames = steps["global_frame"][:common_rows(steps)]
    last_row_frames = frames.max(axis=1) if frames.shape[0] else np.empty(0, np.int64)
    keep = int(np.searchsorted(last_row_frames, cut, "right"))
    keep_eps = int((episodes["end_frame"][:common_rows(episodes)] <= cut).sum())
    keep_obs = 0
    if "observations" in f:
        index = f["observations"]["index"][:common_rows(f["observations"])]
        keep_obs = int((index[:, 2] <= cut).sum()) if index.shape[0] else 0
    return last_row_frames, keep, keep_eps, keep_obs


def _check_blocks_rewritten(f, path, kept: tuple) -> None:
    """The block (chunk) each dataset is cut inside must read back: HDF5 rewrites a partly
    filled block whole, when the resume cuts the dataset and when it appends, so a damaged
    one (a checksum that fails, as a kill during a write or disk damage leaves) failed the
    resume halfway, or the first flush mid-run. Blocks wholly past the cut are dropped
    unread; blocks before it are not rewritten. kept: _rows_kept's."""
    _, keep, keep_eps, keep_obs = kept
    groups = [(f["steps"], keep), (f["episodes"], keep_eps)]
    if "observations" in f:
        groups.append((f["observations"], keep_obs))
    for group, rows in groups:
        for ds in group.values():
            if rows == 0 or rows % ds.chunks[0] == 0 or rows > ds.shape[0]:
                continue  # nothing kept, or a cut on a block's edge (no block is rewritten)
            try:
                ds[rows - 1]  # reads and checks the whole block holding that row
            except (OSError, RuntimeError) as exc:
                first = (rows - 1) // ds.chunks[0] * ds.chunks[0]
                last = min(first + ds.chunks[0], ds.shape[0]) - 1
                raise TrajectoryLogError(
                    f"{path}: damaged trajectory file: {ds.name} rows {first}-{last} do not read "
                    f"back ({exc}), and the resume would rewrite that block. Move the file away "
                    f"and resume: a new file then starts at the checkpoint") from None


def _lock_alone(fh, path) -> bool:
    """Take an exclusive flock on open file `fh` (released with it, or by the caller):
    True; False where the file system has none. Another holder (a running writer, or a
    program that opened the file with HDF5's own locking) is refused by name."""
    import fcntl
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise TrajectoryLogError(f"{path}: another process holds a lock on this file: a "
                                     f"running job's trajectory writer, or a program that "
                                     f"opened it with HDF5 file locking (a plain h5py.File; "
                                     f"hybridsim's readers, analyze and replay, open it "
                                     f"without locking); close it before resuming") from None
        return False


RETIRED_AT = "retired_at"  # root attribute: the frame a resume with fewer ranks closed this file at


def retired_rows(path) -> int | None:
    """For a rank joining a resumed run: the rows its file holds, to go on after (0 where
    there is no file), or None where the file was not closed by a resume that lacked its
    rank (then it is resumed as any rank file is)."""
    path = pathlib.Path(path)
    if not path.exists():
        return 0
    try:
        with _open_h5(path) as f:
            return common_rows(f["steps"]) if RETIRED_AT in f.attrs else None
    except (OSError, KeyError, RuntimeError):
        return None  # damaged: the resume's own checks name it


def quiet_seconds(flush_seconds: float | None) -> float:
    """How long a trajectory file left open must be unchanged before a resume takes its
    writer for gone: a live writer flushes at least every flush_seconds (twice that, and
    a margin)."""
    return 2 * (flush_seconds or 30.0) + 5.0


def clear_stale_write_flags(path: pathlib.Path, idle_seconds: float = 65.0, dry_run: bool = False) -> bool:
    """What `h5clear -s` does, for a file whose SWMR writer is gone: zero the superblock's
    file-consistency flags (HDF5 sets them while a writer has the file open; a killed
    writer never clears them, so the file cannot be opened for writing again) and rewrite
    the superblock checksum. Returns whether there were flags to clear.

    The writer must be gone, and two signs must agree: no process holds the shared flock a
    TrajectoryWriter keeps on its file (the kernel drops a dead process's locks), and the
    file has not changed for `idle_seconds` (a live writer flushes at least every
    log_flush_seconds; this also covers a writer on another node, where flock is local).
    A file last modified more recently is watched until it has been idle that long.
    dry_run: check and wait, but leave the flags (check_resumable)."""
    import fcntl
    _regular_file(path)
    with open(path, "rb" if dry_run else "r+b") as fh:
        head = fh.read(64)
        if not head.startswith(HDF5_SIGNATURE) or head[8] not in (2, 3) or head[11] == 0:
            return False  # older superblocks keep no flags; 0: nothing to clear
        if head[11] & ~(SUPER_WRITE_ACCESS | SUPER_SWMR_WRITE_ACCESS) or not head[11] & SUPER_SWMR_WRITE_ACCESS:
            raise TrajectoryLogError(f"{path}: left open by a writer that was not in SWMR mode "
                                     f"(flags {head[11]:#x}); its last writes may be incomplete")
        size = 12 + 4 * head[9]  # signature, versions, sizes, flags, four addresses
        if len(head) < size + 4 or hdf5_checksum(head[:size]) != int.from_bytes(head[size:size + 4], "little"):
            raise TrajectoryLogError(f"{path}: damaged HDF5 superblock (its checksum does not match)")
        if not _lock_alone(fh, path):
            raise TrajectoryLogError(f"{path}: left open by a writer, and this file system has no "
                                     f"flock to tell whether it is gone; once it is, "
                                     f"run `h5clear -s {path}` and resume")
        try:
            deadline = time.monotonic() + idle_seconds
            idle = time.time() - os.fstat(fh.fileno()).st_mtime
            if idle < idle_seconds:
                print(f"{path}: left open by a writer (a killed job's, or one still running on "
                      f"another node); waiting until it has been unchanged for {idle_seconds:.0f} s "
                      f"({idle_seconds - idle:.0f} s more)", file=sys.stderr, flush=True)
            while (idle := time.time() - os.fstat(fh.fileno()).st_mtime) < idle_seconds:
                if time.monotonic() > deadline:  # still being written
                    raise TrajectoryLogError(f"{path}: modified {idle:.0f} s ago; a writer (maybe "
                                             f"on another node) still has it open: stop that job first")
                time.sleep(min(1.0, idle_seconds - idle))
            if dry_run:
                return True
            fixed = head[:11] + b"\0" + head[12:size]
            fh.seek(0)
            fh.write(fixed + hdf5_checksum(fixed).to_bytes(4, "little"))
            fh.flush()
            os.fsync(fh.fileno())
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return True


def _regular_file(path) -> os.stat_result:
    """stat() of `path`, refused unless a regular file: reading a FIFO or a device waits
    for a writer that may never come (analyze and replay hung on a FIFO)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise TrajectoryLogError(f"{path}: not a regular file (a FIFO, socket or device); a "
                                 f"trajectory file is a plain HDF5 file")
    return st


def _too_short(path, size: int) -> TrajectoryLogError:
    return TrajectoryLogError(f"{path}: truncated file ({size} bytes on disk, too short for the "
                              f"HDF5 superblock); it holds no readable trajectory")


def is_trajectory_log(path) -> bool:
    """Whether `path` is a hybridsim trajectory log, a rank file or a master file: outputs
    (replay's, export's) must never replace one, --overwrite or not. An HDF5 file that does
    not open (damaged, or locked by its writer) counts as one if it has a log's name."""
    path = pathlib.Path(path)
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as fh:
            if fh.read(len(HDF5_SIGNATURE)) != HDF5_SIGNATURE:
                return False
        with open_unlocked(path) as f:
            return "format_version" in f.attrs
    except (OSError, RuntimeError, ValueError):
        return has_log_name(path)


def has_log_name(path) -> bool:
    """A name that `rank_files` or a master file's readers take for a run's log."""
    name = pathlib.Path(path).name
    return name == MASTER_FILE or fnmatch.fnmatchcase(name, "traj_rank*.h5")


def rank_files(run_dir) -> list[pathlib.Path]:
    files = sorted(pathlib.Path(run_dir).glob("traj_rank*.h5"))
    if not files:
        raise TrajectoryLogError(f"{run_dir}: no traj_rank*.h5 files")
    return files


def check_one_run(files_attrs: dict, all_ranks: bool = False,
                  advice: str = "analyze a rank file by naming it for that rank alone") -> None:
    """Rank files read together (a run directory's) must be one run's: each file's `rank`
    attribute matches its name, no two files hold one rank, and `game` and `run_id` (files
    since 2026-12) agree. With `all_ranks`, every rank of the run's `world_size` (the
    largest a file records: a resume may change it) must have its file, or
    MissingRankFilesError names the missing ones and ends with `advice`.
    files_attrs: path -> the file's root attributes."""
    seen = {}  # key -> (the first file holding it, its value)
    by_rank = {}  # rank -> the file holding its rows
    for path, attrs in files_attrs.items():
        path = pathlib.Path(path)
        named = re.fullmatch(r"traj_rank(\d+)\.h5", path.name)
        rank = _int_attr(path, attrs, "rank")
        if named and rank is not None and rank != int(named.group(1)):
            raise TrajectoryLogError(f"{path}: holds rank {rank}'s rows, not rank "
                                     f"{int(named.group(1))}'s: a file copied or renamed from elsewhere?")
        if rank is not None:
            if rank in by_rank:  # a stray copy was counted twice: every total doubled
                raise TrajectoryLogError(
                    f"{path} and {by_rank[rank]} both hold rank {rank}'s rows (a copy?); a run "
                    f"directory's rank files are read together, so move one away (analyze a "
                    f"single file by naming it)")
            by_rank[rank] = path
        for key in ("game", "run_id"):
            if attrs.get(key) is None:
                continue
            first, value = seen.setdefault(key, (path, str(attrs[key])))
            if str(attrs[key]) != value:
                raise TrajectoryLogError(f"{path} and {first} are from different runs ({key} "
                                         f"{attrs[key]} vs {value}): a run directory's rank files "
                                         f"are read together")
    sizes = [size for path, attrs in files_attrs.items()
             if (size := _int_attr(path, attrs, "world_size")) is not None]
    if all_ranks and sizes and by_rank:
        world = max(sizes)
        present = sum(1 for r in by_rank if r < world)
        if present < world:  # a partial summary looked like the whole run's
            where = pathlib.Path(next(iter(files_attrs))).parent
            # counted, and only the first few named: a damaged world_size of 2**40 listed
            # every rank (and ran out of memory doing it)
            first = list(itertools.islice((r for r in range(world) if r not in by_rank), MISSING_NAMED))
            count = world - present
            names = ", ".join(RANK_FILE_PATTERN.format(rank=r) for r in first)
            more = f" and {count - len(first):,} more" if count > len(first) else ""
            raise MissingRankFilesError(
                f"{where}: the run had {world:,} ranks but the file{'s' if count > 1 else ''} "
                f"of rank{'s' if count > 1 else ''} {', '.join(map(str, first))}{more} ({names}"
                f"{', ...' if more else ''}) {'are' if count > 1 else 'is'} missing; {advice}")


# rank files a missing-ranks message names before it says how many more
MISSING_NAMED = 10
# no MPI job has this many ranks: a world_size or rank above it is damage
MAX_WORLD_SIZE = 2 ** 24


def _int_attr(path, attrs: dict, key: str) -> int | None:
    """An integer root attribute (rank, world_size), None when absent."""
    value = attrs.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value <= MAX_WORLD_SIZE:
        raise TrajectoryLogError(f"{path}: damaged trajectory file: its {key} attribute {value!r} "
                                 f"is not an integer in 0..{MAX_WORLD_SIZE:,}")
    return int(value)


def write_master(run_dir) -> pathlib.Path:
    """(Re)write the master file whose virtual datasets stitch the rank files together.

    Steps: [S_max, B_total], rank r's batch at columns [offset_r, offset_r + B_r) and rows
    [0, S_r); rows a rank has not written read as the field's fill value (env_id -1).
    Episodes: the ranks' rows concatenated. Sizes are those on disk when this runs.
    Every rank of the run must have its file here (MissingRankFilesError otherwise).
    """
    run_dir = pathlib.Path(run_dir)
    infos = []
    for path in rank_files(run_dir):
        with open_trajectory_file(path) as f:
            steps = f["steps"]
            infos.append({
                "name": path.name,
                "steps": common_rows(steps),
                "batch": steps["action"].shape[1],
                "actions": steps["behavior_logits"].shape[2],
                "episodes": common_rows(f["episodes"]),
                "attrs": dict(f.attrs),
                "gaps": json_list_attr(f, "gaps"),
            })
    # a master over some ranks would pass for the whole batch (the rows of the others
    # would just be missing), so refuse it as analyze does
    check_one_run({run_dir / i["name"]: i["attrs"] for i in infos}, all_ranks=True, advice=(
        "no master file written. Likely the log directory is not shared by all ranks' nodes "
        "(a node-local --log-dir: each node holds only its own ranks' files); gather every "
        "rank's traj_rank*.h5 into one directory, then call "
        "hybridsim.trajlog.write_master(that directory) again"))
    num_actions = {i["actions"] for i in infos}
    if len(num_actions) != 1:
        raise TrajectoryLogError(f"{run_dir}: rank files disagree on the number of actions {num_actions}")
    (num_actions,) = num_actions
    master_path = run_dir / MASTER_FILE
    tmp_path = run_dir / (MASTER_FILE + ".tmp")
    missing = storage.missing_room(run_dir, MASTER_ROOM_BYTES)
    if missing is not None:  # HDF5 must not meet a full disk (storage.missing_room)
        raise StorageError(master_path, "the virtual master file", missing[0],
                           f"it needs up to {MASTER_ROOM_BYTES / 1e6:.1f} MB and {missing[1]}; not written")
    try:
        _write_master_file(tmp_path, infos, num_actions)
    except BaseException:
        tmp_path.unlink(missing_ok=True)  # a full disk: leave no half-written file behind
        raise
    os.replace(tmp_path, master_path)
    return master_path


def _write_master_file(tmp_path, infos, num_actions):
    s_max = max(i["steps"] for i in infos)
    b_total = sum(i["batch"] for i in infos)
    e_total = sum(i["episodes"] for i in infos)
    with h5py.File(tmp_path, "w", libver="latest") as m:
        for key, value in infos[0]["attrs"].items():
            if key not in ("rank", "file_id", "env_ranges"):  # rank 0's own
                m.attrs[key] = value
        m.attrs["virtual"] = True
        m.attrs["ranks"] = json.dumps([i["name"] for i in infos])
        m.attrs["rank_rows"] = json.dumps({i["name"]: [i["steps"], i["episodes"]] for i in infos})
        m.attrs["rank_file_ids"] = json.dumps({i["name"]: str(i["attrs"].get("file_id", ""))
                                               for i in infos})
        gaps = sorted({tuple(g) for i in infos for g in i["gaps"]})
        if gaps:  # any rank's lost rows (rank 0's attributes were copied above)
            m.attrs["gaps"] = json.dumps([list(g) for g in gaps])
        steps = m.create_group("steps")
        fields = {**{k: v for k, v in STEP_FIELDS.items()},
                  "behavior_logits": (np.float32, np.nan)}
        for name, (dtype, fill) in fields.items():
            extra = (num_actions,) if name == "behavior_logits" else ()
            layout = h5py.VirtualLayout(shape=(s_max, b_total, *extra), dtype=dtype)
            col = 0
            for info in infos:
                if info["steps"]:
                    src = h5py.VirtualSource(info["name"], f"steps/{name}",
                                             shape=(info["steps"], info["batch"], *extra))
                    layout[:info["steps"], col:col + info["batch"]] = src
                col += info["batch"]
            steps.create_virtual_dataset(name, layout, fillvalue=fill)
        episodes = m.create_group("episodes")
        for name, dtype in EPISODE_FIELDS.items():
            layout = h5py.VirtualLayout(shape=(e_total,), dtype=dtype)
            row = 0
            for info in infos:
                if info["episodes"]:
                    layout[row:row + info["episodes"]] = h5py.VirtualSource(
                        info["name"], f"episodes/{name}", shape=(info["episodes"],))
                row += info["episodes"]
            episodes.create_virtual_dataset(name, layout, fillvalue=EPISODE_FILL[name])


def complete_master(run_dir, last_frame: int, expected_rows: dict | None = None,
                    idle_seconds: float = 65.0) -> str | None:
    """For a run that will not train again (resumed at its budget, `last_frame` frames): if
    its last job stopped between the final checkpoint and the master file (a full disk, a
    kill), finish what closing would have done: clear the rank files' stale write flags,
    record in a rank file's `gaps` the rows the checkpoint counted (`expected_rows`, by
    file name) that never reached it, and write the master (not where rank files are
    missing: what it returns says so). Returns what it did, or None when the master is
    there and newer than every rank file, which are complete."""
    run_dir = pathlib.Path(run_dir)
    files = sorted(run_dir.glob("traj_rank*.h5"))
    if not files:
        return None
    expected_rows = expected_rows or {}
    master = run_dir / MASTER_FILE
    newest = max(p.stat().st_mtime for p in files)  # before clearing flags touches them
    # a file without flags is left untouched (clear_stale_write_flags returns False)
    flagged = [p for p in files if clear_stale_write_flags(p, idle_seconds=idle_seconds)]
    short = {}
    for path in files:
        want = expected_rows.get(path.name)
        if want is not None:
            with open_trajectory_file(path) as f:
                if common_rows(f["steps"]) < want:
                    short[path] = want
    if master.exists() and master.stat().st_mtime >= newest and not flagged and not short:
        return None
    why = "was missing" if not master.exists() else "was older than the rank files"
    for path, want in short.items():
        with h5py.File(path, "a", libver="latest") as f:
            steps = f["steps"]
            kept = common_rows(steps)
            frames = steps["global_frame"][:kept]
            last_row_frames = frames.max(axis=1) if kept else np.empty(0, np.int64)
            _record_lost_rows(f, path, json_list_attr(f, "gaps"), last_row_frames, kept, want, last_frame)
    lost = [p.name for p in short]
    try:
        write_master(run_dir)
        done = [f"{master} {why} (the last job stopped before writing it): written now from "
                f"{len(files)} rank file(s)"]
    except MissingRankFilesError as exc:
        # the run's own end could not write it either (the trainer notes that and goes on):
        # say why instead of failing a resume that has nothing to train
        kept = " (the earlier one stays; opening it warns what it does not cover)" if master.exists() else ""
        done = [f"{master} {why}, and is not written now{kept}: {exc}"]
    if flagged:
        done.append(f"write flags left by a stopped writer cleared on {', '.join(p.name for p in flagged)}")
    if lost:
        done.append(f"lost rows recorded in the `gaps` of {', '.join(lost)}")
    return "; ".join(done)


def read_episodes(path) -> dict[str, np.ndarray]:
    """The episodes table of a rank file or master file, as numpy columns."""
    with open_trajectory_file(path) as f:
        return {name: f["episodes"][name][()] for name in EPISODE_FIELDS}


def read_steps(path, fields=None) -> dict[str, np.ndarray]:
    """Per-step fields of a rank or master file (all rows on disk), as numpy arrays."""
    every = [*STEP_FIELDS, "behavior_logits"]
    names = every if fields is None else [fields] if isinstance(fields, str) else list(fields)
    unknown = [name for name in names if name not in every]
    if unknown:
        raise ValueError(f"read_steps({str(path)!r}): no step field {', '.join(map(repr, unknown))}; "
                         f"the fields are {', '.join(every)}")
    with open_trajectory_file(path) as f:
        n = common_rows(f["steps"])
        return {name: f["steps"][name][:n] for name in names}
