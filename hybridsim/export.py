"""`hybridsim export FILE OUTPUT.h5`: a rank's whole trajectory log as an offline dataset
(`hybridsim export RUN_DIR OUT_DIR [--jobs N]`: every rank's, one dataset per rank file, N
at a time in worker processes), and `iter_transitions(OUTPUT.h5)` to read its
transitions back.

Training logs actions, rewards and flags for every step but observations for few (they
are most of the bytes). Every environment's history follows from its seed and its
actions, so export re-emulates the rank's environments as one batch, row by row, and
writes each step's observation beside the logged columns, checking every reward and
episode end (and every logged observation) against the file on the way, as replay does
for one episode. Synchronous logs only: in an asynchronous (IMPALA) log a row holds
whichever environments answered, so `replay --episode K --npz` takes those an episode at
a time.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import sys
import threading
import time
import warnings

import h5py
import numpy as np

from hybridsim import HybridsimWarning, replay, storage, trajlog

COPIED = ("action", "reward_raw", "terminated", "truncated", "episode_id", "global_frame", "lives")
BLOCK_ROWS = 256  # rows written at once at most (and the chunk's rows of the step columns)
BLOCK_BYTES = 64 << 20  # observations held before they are written: fewer rows for wide ranks
OBS_CHUNK_ROWS = 32  # an observation chunk: 32 steps of one environment (~0.9 MB at 4x84x84)
HEADROOM_BYTES = 8 << 20  # room a block's writes leave for HDF5's metadata


class ExportMismatch(trajlog.TrajectoryLogError):
    """The re-emulation disagrees with the log: it is not this run's (or is damaged)."""


class ExportStopped(RuntimeError):
    """A SIGTERM or SIGHUP ended the export; nothing was written."""

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.signum = int(signum)


def check_output(out: str, overwrite: bool = False) -> None:
    replay.check_new_file(out, "output", "HDF5", overwrite)
    if not str(out).lower().endswith((".h5", ".hdf5")):
        raise ValueError(f"output {out}: name a file ending in .h5 or .hdf5")
    if trajlog.has_log_name(out):  # analyze and resume would read it as one of a run's logs
        raise ValueError(f"output {out}: a trajectory log's name; name the dataset otherwise, "
                         f"e.g. dataset_{pathlib.Path(out).name}")


def dataset_name(rank_file) -> str:
    """A run directory's export names each rank's dataset after its file:
    traj_rank00003.h5 -> dataset_rank00003.h5."""
    return "dataset_" + pathlib.Path(rank_file).name.removeprefix("traj_")


def run_exports(run_dir, out_dir, overwrite: bool = False) -> list[tuple[pathlib.Path, pathlib.Path]]:
    """(rank file, dataset) for each rank file of `run_dir`, the datasets in `out_dir` (made
    if missing). Every dataset is checked before any rank is re-emulated: one that exists
    (without `overwrite`) or cannot be written refuses the whole export, naming them."""
    files = trajlog.rank_files(run_dir)
    out_dir = pathlib.Path(out_dir)
    if not out_dir.exists() and out_dir.suffix.lower() in (".h5", ".hdf5"):
        raise ValueError(f"output {out_dir}: a run directory exports into a folder, one dataset per rank "
                         f"file; name a folder (or one rank file, traj_rankNNNNN.h5, for one dataset)")
    storage.check_output_directory(out_dir, "output")  # (a folder it makes holds no dataset yet)
    pairs = [(path, out_dir / dataset_name(path)) for path in files]
    problems = []
    for _, out in pairs:
        try:
            check_output(str(out), overwrite)
        except (ValueError, OSError) as exc:
            problems.append(str(exc))
    if problems:
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise FileExistsError(f"{len(problems)} of the {len(pairs)} datasets cannot be written, so none "
                              f"was: {'; '.join(problems[:3])}{more}")
    return pairs


def export_rank(path, out, **options) -> tuple[str, object]:
    """One rank file of a run directory's export (export_dataset with `options`), its outcome
    as values a worker process can send back: ("written", summary), ("mismatch", text),
    ("failed", text: this file cannot be exported; the others go on), ("ended", text: a
    full disk or another write error, which the other ranks would meet too), ("stopped",
    signal number: also for a stop taken before it began, under record_stops)."""
    if _pending_stops:
        return "stopped", _pending_stops[0]
    name = pathlib.Path(path).name
    _export_idle.clear()
    try:
        summary = export_dataset(path, out, **options, report=lambda text: print(
            f"export {name}: {text}", file=sys.stderr, flush=True))
    except ExportMismatch as exc:
        return "mismatch", str(exc)
    except storage.StorageError as exc:
        return "ended", str(exc)
    except (ValueError, trajlog.TrajectoryLogError) as exc:
        return "failed", str(exc)
    except ExportStopped as exc:
        return "stopped", exc.signum
    except KeyboardInterrupt:
        return "stopped", int(signal.SIGINT)
    finally:
        _export_idle.set()
    return "written", summary


def stop_exception(signum: int, detail: str) -> BaseException:
    """What a stop signal ends an export with: KeyboardInterrupt for SIGINT (Ctrl-C), else
    ExportStopped saying which signal and `detail`."""
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return ExportStopped(f"stopped by {signal.Signals(signum).name}; {detail}", signum)


def _record_stop(signum, frame) -> None:
    _pending_stops.append(signum)


@contextlib.contextmanager
def record_stops():
    """SIGTERM and SIGHUP taken while no export is under way (between ranks, while one is
    set up) are kept: the export that starts next stops at once. Ctrl-C stays Python's
    KeyboardInterrupt there, at once (a GPU run's kernel build takes minutes), which is
    safe before an export writes. The main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = (signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in kept}
    for sig in kept:
        signal.signal(sig, _record_stop)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        _pending_stops.clear()  # (they were this export's)


def _worker_takes_stops() -> None:
    """A --jobs worker keeps the stop signals (as record_stops) for as long as it lives,
    rather than dying of one while it waits for a rank or sets one up. It starts with them
    blocked (export_in_parallel), so one sent while it was still starting Python waits
    until now. If its parent dies (killed, out of memory), the rank under way stops and
    leaves nothing, and the worker exits: it would wait for the next rank for ever."""
    import multiprocessing.connection
    for sig in STOP_SIGNALS:
        signal.signal(sig, _record_stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    parent = multiprocessing.parent_process()

    def watch():
        multiprocessing.connection.wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)  # the export under way, if any, stops and cleans up
        _export_idle.wait(60)
        os._exit(1)
    if parent is not None:
        threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _signal_workers(signum: int) -> None:
    import multiprocessing
    for child in multiprocessing.active_children():
        try:
            os.kill(child.pid, signum)
        except OSError:
            pass


def export_in_parallel(pairs, jobs: int, take, **options) -> None:
    """Exports the (rank file, dataset) `pairs` in `jobs` worker processes, each export
    asking for room for all `jobs` of them and taking at most its share of this process's
    CPUs (max_threads), and calls take(rank file, dataset, outcome) with
    export_rank's outcome as each ends; when `take` returns True (a full disk ended the
    export) no further rank starts, and those running finish and are taken too. A stop
    signal this process takes goes to the workers, whose exports stop and leave nothing;
    once they have ended, KeyboardInterrupt (SIGINT) or ExportStopped is raised. A worker
    that dies is a RuntimeError naming its rank, after the others were stopped."""
    import concurrent.futures as futures
    import multiprocessing
    stops: list[int] = list(_pending_stops)  # (one record_stops took before: no rank starts)

    def forward(signum, frame):
        stops.append(signum)
        _signal_workers(signum)

    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if main else {}
    for sig in before:
        signal.signal(sig, forward)
    # spawn, not fork: a fork of a process with threads (OpenMP, HDF5) can start locked
    pool = futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_takes_stops)
    # the workers share the CPUs: each re-emulates with at most its share of them
    threads = max(1, len(os.sched_getaffinity(0)) // jobs) if hasattr(os, "sched_getaffinity") else 1
    waiting, running, ended, under_way, workers = list(pairs), {}, False, [], set()
    try:
        while waiting or running:
            # one rank per worker at a time: a rank queued in the pool would start after a stop
            while waiting and len(running) < jobs and not stops and not ended:
                path, out = waiting.pop(0)
                # a worker starts here (submit spawns it) and inherits the stop signals
                # blocked: it would die of one that comes before _worker_takes_stops
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
                try:
                    job = pool.submit(export_rank, path, out, **options, writers=jobs, max_threads=threads)
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                running[job] = (path, out)
                workers.update(child.pid for child in multiprocessing.active_children())
            if not running:
                break
            done, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
            for job in done:
                path, out = running.pop(job)
                try:
                    outcome = job.result()
                except futures.process.BrokenProcessPool:  # (killed, out of memory, a crash)
                    under_way = [(path, out), *running.values()]
                    raise RuntimeError(f"a worker process died while exporting "
                                       f"{', '.join(sorted(p.name for p, _ in under_way))}; the ranks "
                                       f"under way were stopped and left nothing") from None
                except (ValueError, RuntimeError, OSError, TypeError) as exc:
                    raise RuntimeError(f"{path.name}: {exc}") from exc
                if outcome[0] == "stopped":
                    if not stops:  # a stop sent to that worker alone stops the whole export too
                        forward(outcome[1], None)
                else:
                    ended = bool(take(path, out, outcome)) or ended
    finally:
        if running and not stops:  # an error here: the exports under way stop, leaving nothing
            _signal_workers(signal.SIGTERM)
        pool.shutdown(wait=True, cancel_futures=True)
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for _, out in under_way:  # the temporary file of a worker that was killed
            for pid in workers:
                pathlib.Path(f"{out}.{pid}.tmp").unlink(missing_ok=True)
    if stops:
        raise stop_exception(stops[0], "no rank started after it, and those it stopped left nothing")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_pending_stops: list[int] = []  # stop signals record_stops took
_export_idle = threading.Event()  # no export_rank under way (a --jobs worker's watchdog waits for it)
_export_idle.set()


@contextlib.contextmanager
def _stop_signals():
    """SIGINT, SIGTERM and SIGHUP as a flag the row loop reads: raised from anywhere, a
    KeyboardInterrupt could land in one of h5py's callbacks, where Python drops it and the
    export went on to write its file."""
    stop = threading.Event()
    if _pending_stops:
        stop.signum = _pending_stops[0]
        stop.set()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: setattr(stop, "signum", signum) or stop.set())
    try:
        yield stop
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _check_stop(stop) -> None:
    if not stop.is_set():
        return
    raise stop_exception(stop.signum, "nothing was written")


def _synchronous_columns(path, env_id, rows: int, schedule: str) -> np.ndarray:
    """The rank's environment ids, one per column, if each of the rows of dataset `env_id`
    holds all of them in that order (the synchronous schedule)."""
    first = trajlog.synchronous_env_ids(path, env_id, rows, schedule)
    if first is None:
        raise ValueError(f"{path}: an asynchronous (IMPALA) log: its rows hold whichever "
                         f"environments answered, so it cannot be re-emulated as one batch; "
                         f"export its episodes one at a time with `hybridsim replay FILE "
                         f"--episode K --npz OUT.npz`")
    if not np.array_equal(first, first[0] + np.arange(first.size)):
        raise trajlog.TrajectoryLogError(f"{path}: damaged trajectory file: steps/env_id's "
                                         f"columns are not consecutive environments ({first.tolist()})")
    return first


def export_dataset(path, out, *, env: str = "run", compression: str = "lzf", overwrite: bool = False,
                   report=None, writers: int = 1, max_threads: int | None = None) -> dict:
    """Write `out` (through a temporary file: nothing is left behind on an error, and an
    existing file is replaced only with overwrite) and return a summary. `report(text)` is
    called every few seconds with the progress. `writers`: exports writing into the same
    file system at once (`--jobs`); each asks for room for all of them before a block.
    `max_threads`: the most threads the re-emulation takes (the run's --num-threads
    otherwise, 0 meaning every core); the results do not depend on it."""
    if env not in replay.REPLAY_ENVS:
        raise ValueError(f"env {env!r}: expected one of {', '.join(replay.REPLAY_ENVS)}")
    path, out = pathlib.Path(path), str(out)
    check_output(out, overwrite)  # the trajectory file itself, or a master reading it, too
    dataset_kw = trajlog.dataset_kwargs(compression)
    with trajlog.open_trajectory_file(path) as f:
        if f.attrs.get("virtual"):
            raise ValueError(f"{path}: a master file; export a rank file (traj_rankNNNNN.h5) "
                             f"beside it, one per rank")
        cfg = replay.run_config(f)
        gaps = trajlog.json_list_attr(f, "gaps")
        if gaps:
            raise ValueError(f"{path}: the file lacks the step rows of frames {gaps} (its `gaps` "
                             f"attribute), which a re-emulation of the whole file needs; `hybridsim "
                             f"replay FILE --episode K --npz OUT.npz` takes the episodes outside them")
        restarts = sorted(int(r) for r in trajlog.json_list_attr(f, "restarts"))
        steps = f["steps"]
        rows = trajlog.common_rows(steps)
        if rows == 0:
            raise ValueError(f"{path}: no step rows to export")
        columns = _synchronous_columns(path, steps["env_id"], rows, str(cfg.get("schedule", "a2c")))
        logged_obs = _logged_observations(f, path, columns)
        run_cfg = cfg
        if env != "run":
            cfg = {**cfg, "backend": replay.REPLAY_ENVS[env]}
        if max_threads is not None and not 0 < int(cfg.get("num_threads", 0)) <= max_threads:
            cfg = {**cfg, "num_threads": max_threads}
        replay.check_env_config(path, cfg, int(columns[-1]))
        seed = int(cfg["seed"]) + int(columns[0])
        # a resume that could not restore the environments restarted them all from their
        # seeds at a recorded frame: reset before the first row past it
        frame = steps["global_frame"][:rows, 0]
        _check_frames_grow(path, columns, 0, frame[:, None], None)  # before it places the restarts
        restart_rows = {int(np.searchsorted(frame, r, "right")) for r in restarts} - {0, rows}
        vec, obs = replay.make_replay_env(path, cfg, seed, columns.size)
        tmp = f"{out}.{os.getpid()}.tmp"
        try:
            if logged_obs:  # (nothing is written yet)
                replay.check_logged_frames_shape(path, f["observations/frames"].shape[1:], np.shape(obs)[1:],
                                                 "nothing was written")
            with _stop_signals() as stop:
                summary = _write(f, path, out, tmp, vec, obs, seed, rows, columns, logged_obs, restart_rows,
                                 dataset_kw, cfg, run_cfg, report, stop, writers)
                with open(tmp, "rb+") as fh:  # on disk before it takes the name
                    os.fsync(fh.fileno())
                _check_stop(stop)
                os.replace(tmp, out)
        except BaseException:
            pathlib.Path(tmp).unlink(missing_ok=True)
            raise
        finally:
            vec.close()
    return summary


def _logged_observations(f, path, columns) -> dict:
    """row -> [(column, index in /observations)] for the logged observations."""
    logged = {}
    if "observations" not in f:
        return logged
    for k, (row, env_id, _) in enumerate(f["observations/index"][()]):
        col = int(env_id) - int(columns[0])
        if not 0 <= col < columns.size:
            raise trajlog.TrajectoryLogError(f"{path}: damaged trajectory file: observations/index "
                                             f"entry {k} names env {int(env_id)}, not one of the "
                                             f"file's {columns[0]}-{columns[-1]}")
        logged.setdefault(int(row), []).append((col, k))
    return logged


def _write(f, path, out, tmp, vec, obs, seed, rows, columns, logged_obs, restart_rows, dataset_kw, cfg,
           run_cfg, report, stop, writers):
    width = columns.size
    steps = f["steps"]
    frames = f["observations/frames"] if logged_obs else None
    num_actions = steps["behavior_logits"].shape[2]
    obs_shape = tuple(np.shape(obs))[1:]
    block_rows = int(max(1, min(BLOCK_ROWS, BLOCK_BYTES // (width * int(np.prod(obs_shape))))))
    episode_ends = 0
    started = last_report = time.monotonic()
    _check_room(out, 0, writers)
    with h5py.File(tmp, "w") as g:
        observations = g.create_dataset(
            "observations", (rows, width) + obs_shape, np.uint8,
            chunks=(min(OBS_CHUNK_ROWS, rows), 1) + obs_shape, **dataset_kw)
        copies = {name: g.create_dataset(name, (rows,) + steps[name].shape[1:], steps[name].dtype,
                                         chunks=(min(BLOCK_ROWS, rows),) + steps[name].shape[1:],
                                         **dataset_kw) for name in COPIED + ("behavior_logits",)}
        cut_short = g.create_dataset("cut_short", (rows, width), bool,
                                     chunks=(min(BLOCK_ROWS, rows), width), **dataset_kw)
        finals = g.create_dataset("final_observations", (0,) + obs_shape, np.uint8,
                                  maxshape=(None,) + obs_shape, chunks=(1,) + obs_shape, **dataset_kw)
        final_index = g.create_dataset("final_index", (0, 2), np.int64, maxshape=(None, 2),
                                       chunks=(BLOCK_ROWS, 2))
        ended = np.zeros(width, bool)  # which environments the previous row's step ended
        last_frames = None  # the previous block's last global_frame row
        last_ids = None  # the previous row's episode_id
        warned_logits = False
        growth = _FileGrowth(tmp)
        start = 0
        while start < rows:
            # a short first block: what it takes on disk tells the room the next ones ask for
            stop_row = min(rows, start + (block_rows if start else min(block_rows, OBS_CHUNK_ROWS)))
            log = {name: steps[name][start:stop_row] for name in copies}
            _check_frames_grow(path, columns, start, log["global_frame"], last_frames)
            last_frames = log["global_frame"][-1]  # the next block's `before`, not read again
            actions = log["action"]
            if ((actions < 0) | (actions >= num_actions)).any():
                raise trajlog.TrajectoryLogError(f"{path}: damaged trajectory file: steps/action rows "
                                                 f"{start}-{stop_row - 1} hold values outside the action "
                                                 f"set 0..{num_actions - 1}")
            if not warned_logits:
                warned_logits = _warn_of_nonfinite_logits(path, columns, start, log["behavior_logits"])
            block = np.empty((stop_row - start, width) + obs_shape, np.uint8)
            ends, ended_at = [], []
            for r in range(start, stop_row):
                _check_stop(stop)
                ids = log["episode_id"][r - start]
                _check_episode_ids(path, columns, r, ids, last_ids, ended, r in restart_rows)
                last_ids = ids
                if r in restart_rows:  # the episodes in progress end here without a last step
                    cut = ~ended
                    cut_short[r - 1] = cut
                    ends.append(np.asarray(obs)[cut])
                    ended_at.extend((r - 1, int(c)) for c in np.nonzero(cut)[0])
                    obs, _ = vec.reset(seed=seed)
                block[r - start] = np.asarray(obs)
                obs, reward, terminated, truncated, info = vec.step(actions[r - start].astype(np.int64))
                _check_row(path, r, log, r - start, reward, terminated, truncated, info["lives"])
                ended = np.asarray(terminated, bool) | np.asarray(truncated, bool)
                if ended.any():
                    ends.append(np.asarray(info["final_obs"])[ended])
                    ended_at.extend((r, int(c)) for c in np.nonzero(ended)[0])
                after = np.asarray(obs)
                for col, k in logged_obs.get(r, ()):
                    if not np.array_equal(after[col], frames[k]):
                        raise ExportMismatch(f"{path}: step row {r}, env {int(columns[col])}: the "
                                             f"re-emulated observation differs from the logged one; "
                                             f"nothing was written")
            raw = sum(a.nbytes for a in (block, *log.values(), *ends))
            _check_room(out, growth.expected(raw), writers)
            for name, dataset in copies.items():
                dataset[start:stop_row] = log[name]
            observations[start:stop_row] = block
            if ended_at:
                finals.resize(episode_ends + len(ended_at), axis=0)
                finals[episode_ends:] = np.concatenate(ends)
                final_index.resize(episode_ends + len(ended_at), axis=0)
                final_index[episode_ends:] = np.asarray(ended_at, np.int64)
                episode_ends += len(ended_at)
            g.flush()  # (chunks HDF5 still caches would not show in the file's size)
            growth.wrote(raw)
            start = stop_row
            if report is not None and time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                report(f"{stop_row:,} of {rows:,} rows ({stop_row / (last_report - started):,.0f} rows/s)")
        # (an HDF5 string is UTF-8: a path's other bytes are written as \xNN escapes)
        source = os.fsencode(path).decode("utf-8", "backslashreplace")
        g.attrs.update({"source": source, "game": str(run_cfg["game"]), "backend": str(cfg["backend"]),
                        "env_ids": columns.astype(np.int64), "seed": int(run_cfg["seed"]),
                        "restart_rows": json.dumps(sorted(restart_rows)),
                        "config": json.dumps(run_cfg), "compression": dataset_kw.get("compression") or "none"})
    return {"rows": rows, "environments": width, "episodes_ended": episode_ends,
            "observation_shape": obs_shape, "seconds": time.monotonic() - started}


class _FileGrowth:
    """How much a file grows for the bytes written into it (compressed chunks take a
    fraction: Pong's observations about 1/47 with lzf), so that a block asks the file
    system for the room it will take rather than its uncompressed size: a 3 MB dataset
    asked for 46 MB and was refused under a 40 MB quota."""

    SAFETY = 2.0  # blocks compress unevenly (a new screen, an episode's first frames)
    LEAST = 1 / 16  # of the raw bytes asked for at least, however well the blocks so far compressed

    def __init__(self, path):
        self.path, self.raw, self.size, self.ratio = path, 0, 0, 1.0

    def expected(self, raw: int) -> int:
        """The bytes the next `raw` bytes may take: all of them until a block was written,
        then twice the larger of the file's growth per byte overall and in the last block."""
        return int(min(raw, raw * max(self.ratio, self.LEAST) * self.SAFETY)) if self.raw else raw

    def wrote(self, raw: int) -> None:
        size = os.stat(self.path).st_size  # (its own structures included)
        self.ratio = max(size / (self.raw + raw), (size - self.size) / raw if raw else 0.0)
        self.raw, self.size = self.raw + raw, size


def _check_room(out, nbytes: int, writers: int = 1) -> None:
    """Stops before writes the file system, or a quota, has no room for (`nbytes` as they
    will take on disk, _FileGrowth, for each of `writers` exports side by side): HDF5 must
    never meet a full disk (storage.missing_room)."""
    need = nbytes + HEADROOM_BYTES
    missing = storage.missing_room(os.path.dirname(os.path.abspath(out)), need, writers)
    if missing is not None:
        code, why = missing
        side_by_side = (f" ({need * writers / 1e6:.1f} MB for the {writers} exports running side by side)"
                        if writers > 1 else "")
        raise storage.StorageError(out, "the exported dataset", code,
                                   f"the next rows need up to {need / 1e6:.1f} MB{side_by_side} and {why}; "
                                   f"stopped before writing them; nothing was written")


def _check_frames_grow(path, columns, start, frames, before) -> None:
    """Rows start.. of `frames` (each column's global_frame), after the row `before`: the
    dataset copies the column, so damage there is named, not copied."""
    stacked = frames if before is None else np.concatenate([before[None], frames])
    first = start if before is None else start - 1
    trajlog.check_frames_grow(path, stacked, np.arange(first, first + len(stacked)), columns, "nothing was written")


def _warn_of_nonfinite_logits(path, columns, start, logits) -> bool:
    """Warn (once: True) of a NaN or infinite logit in rows start..: damage, or the last
    rollout of a run whose network diverged (it stops at the update after them, and those
    rows are the run's log too); copied either way."""
    bad = np.argwhere(~np.isfinite(logits).all(axis=2))
    if not bad.size:
        return False
    i, c = (int(v) for v in bad[0])
    warnings.warn(f"{path}: steps/behavior_logits row {start + i}, column {c} (env {int(columns[c])}) "
                  f"holds {logits[i, c][~np.isfinite(logits[i, c])][0]}, not a finite logit (a run that "
                  f"diverged there, or damage); copied as logged", HybridsimWarning, stacklevel=2)
    return True


def _check_episode_ids(path, columns, r, ids, before, ended, restart) -> None:
    """Row r's episode_id against the row before's: an environment's id grows by one after
    the step that ends an episode and stays otherwise. A restart (a resume that could not
    restore the environments) gives each environment a new id, the next one or later (a
    checkpoint without its episode tracker skips one): only a larger id is asked there."""
    if before is None:
        bad = ids < 0
        expected = "an id >= 0"
    else:
        least = before + ended
        bad = ids <= before if restart else ids != least
        expected = None
    if not bad.any():
        return
    c = int(np.argmax(bad))
    if expected is None:
        why = "ended its episode" if ended[c] else "did not end its episode"
        expected = (f"an id above {int(before[c])} (the environments restarted there)" if restart else
                    f"{int(least[c])}: row {r - 1} holds {int(before[c])} and its step {why}")
    raise trajlog.TrajectoryLogError(
        f"{path}: damaged trajectory file: steps/episode_id row {r}, column {c} (env {int(columns[c])}) "
        f"holds {int(ids[c])}, not {expected}; nothing was written")


def _check_row(path, r, log, i, reward, terminated, truncated, lives) -> None:
    """Row r (row i of the block `log`) as re-emulated against the file's."""
    problems = []
    if not np.array_equal(np.asarray(reward, np.float64), log["reward_raw"][i].astype(np.float64)):
        problems.append("rewards")
    if not (np.array_equal(np.asarray(terminated, bool), log["terminated"][i].astype(bool))
            and np.array_equal(np.asarray(truncated, bool), log["truncated"][i].astype(bool))):
        problems.append("episode ends")
    if not np.array_equal(np.asarray(lives, np.int64), log["lives"][i].astype(np.int64)):
        problems.append("lives")
    if problems:
        raise ExportMismatch(f"{path}: step row {r}: the re-emulated {' and '.join(problems)} differ "
                             f"from the logged ones (not this run's log, or a damaged one); nothing "
                             f"was written")


# a dataset's per-step arrays; `lives` came later (2026-12-07): a dataset without it reads as before
DATASET_COLUMNS = tuple(n for n in COPIED if n != "lives") + ("behavior_logits", "cut_short")


def _columns(g) -> tuple:
    """The per-step arrays of dataset `g`."""
    return DATASET_COLUMNS + (("lives",) if "lives" in g else ())


def iter_transitions(path, block_rows: int = BLOCK_ROWS):
    """The transitions of a dataset `export` wrote, a block of rows at a time: each yield is
    a dict of arrays with one entry per (row, column) step, in row-major order:
    `observations` (what the policy saw), `actions`, `rewards` (unclipped), `terminated`,
    `truncated`, `cut_short` (a resume restarted the environment after this step),
    `next_observations`, `behavior_logits`, `episode_id`, `global_frame`, `env_id`, `row`
    and `lives` (after the step; absent from datasets written before 2026-12-07). A step's
    next observation is the next row's, unless the step ended its episode (terminated,
    truncated or cut short): then the one in `final_observations`. The last
    row's steps that end no episode have no next observation in the file and are left out.
    A file that is not such a dataset, or is damaged, raises TrajectoryLogError naming it."""
    path = pathlib.Path(path)
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    if path.is_dir():
        raise IsADirectoryError(f"{path}: a directory; name one of the datasets in it "
                                f"(`export RUN_DIR OUT_DIR` writes OUT_DIR/dataset_rankNNNNN.h5)")
    trajlog._check_superblock(path)  # a missing, foreign or truncated file, by name
    try:
        with trajlog.open_unlocked(path) as g:
            yield from _dataset_blocks(g, path, block_rows)
    except trajlog.TrajectoryLogError:
        raise
    except (OSError, RuntimeError, KeyError) as exc:
        raise trajlog.TrajectoryLogError(f"{path}: damaged dataset (HDF5 could not read it: {exc})") from exc


def _check_dataset_layout(g, path, env_ids, final_index) -> None:
    """What the blocks index, checked before the first: a dataset cut short, or a final_index
    past the final observations, was an IndexError naming neither the file nor the dataset."""
    observations, finals = g["observations"], g["final_observations"]
    bad = []
    if observations.ndim < 3:
        bad.append(f"observations is {observations.ndim}-D, not (rows, environments, observation)")
    else:
        rows, width = observations.shape[:2]
        for name in _columns(g):
            if g[name].shape[:2] != (rows, width):
                bad.append(f"{name} has shape {g[name].shape}, not {rows} rows of {width} environments "
                           f"as observations")
        if env_ids.shape != (width,):
            bad.append(f"its env_ids attribute holds {env_ids.size} ids for {width} environments")
        if finals.shape[1:] != observations.shape[2:]:
            bad.append(f"final_observations holds observations of shape {finals.shape[1:]}, not "
                       f"{observations.shape[2:]}")
        if final_index.ndim != 2 or final_index.shape[1] != 2:
            bad.append(f"final_index has shape {final_index.shape}, not (episode ends, 2)")
        elif final_index.shape[0] != finals.shape[0]:
            bad.append(f"final_index has {final_index.shape[0]} entries for {finals.shape[0]} "
                       f"final_observations")
        else:
            outside = ~((final_index >= 0) & (final_index < (rows, width))).all(axis=1)
            if outside.any():
                k = int(np.argmax(outside))
                bad.append(f"final_index entry {k} names row {final_index[k, 0]}, column "
                           f"{final_index[k, 1]}, outside its {rows} rows of {width} environments")
    if bad:
        raise trajlog.TrajectoryLogError(f"{path}: damaged dataset: {'; '.join(bad)}")


def _dataset_blocks(g, path, block_rows):
    missing = [n for n in ("observations", "final_observations", "final_index", *DATASET_COLUMNS) if n not in g]
    if missing or "env_ids" not in g.attrs:
        what = "a trajectory log; export it first (hybridsim export)" if trajlog.is_trajectory_log(path) \
            else "not a dataset hybridsim export wrote"
        raise trajlog.TrajectoryLogError(f"{path}: {what} (it lacks {', '.join(missing) or 'env_ids'})")
    env_ids = np.asarray(g.attrs["env_ids"], np.int64)
    final_index = g["final_index"][()]
    _check_dataset_layout(g, path, env_ids, final_index)
    observations = g["observations"]
    rows, width = observations.shape[:2]
    final_at = {(int(r), int(c)): k for k, (r, c) in enumerate(final_index)}
    columns = _columns(g)
    # a block holds its rows' observations three times: as read, as yielded and as the
    # steps' next observations
    step_bytes = 3 * width * int(np.prod(observations.shape[2:]))
    block_rows = int(max(1, min(block_rows, BLOCK_BYTES // max(1, step_bytes))))
    for start in range(0, rows, block_rows):
        stop = min(rows, start + block_rows)
        seen = observations[start:min(rows, stop + 1)]  # and the next row's, for next_observations
        block = {name: g[name][start:stop] for name in columns}
        ends = block["terminated"].astype(bool) | block["truncated"].astype(bool) | block["cut_short"]
        has_next = np.ones(ends.shape, bool)
        if stop == rows:
            has_next[-1] = ends[-1]
        r, c = np.nonzero(has_next)
        ended = ends[r, c]
        following = np.empty((r.size,) + seen.shape[2:], np.uint8)
        following[~ended] = seen[r[~ended] + 1, c[~ended]]
        if ended.any():
            try:
                which = np.array([final_at[(start + int(i), int(j))] for i, j in zip(r[ended], c[ended])])
            except KeyError as exc:
                raise trajlog.TrajectoryLogError(
                    f"{path}: damaged dataset: the step of row {exc.args[0][0]}, column {exc.args[0][1]} "
                    f"ends an episode but final_index has no final observation for it") from None
            unique, back = np.unique(which, return_inverse=True)
            following[ended] = g["final_observations"][unique][back]
        yield {"observations": seen[r, c], "actions": block["action"][r, c],
               "rewards": block["reward_raw"][r, c], "terminated": block["terminated"][r, c],
               "truncated": block["truncated"][r, c], "cut_short": block["cut_short"][r, c],
               "next_observations": following, "behavior_logits": block["behavior_logits"][r, c],
               "episode_id": block["episode_id"][r, c], "global_frame": block["global_frame"][r, c],
               "env_id": env_ids[c], "row": start + r,
               **({"lives": block["lives"][r, c]} if "lives" in block else {})}
