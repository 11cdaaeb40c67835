"""`hybridsim analyze RUN_DIR|FILE`: episode statistics, returns over frames, action
histograms and throughput from the HDF5 trajectory logs (h5py and numpy only, plus
matplotlib for the plots)."""
from __future__ import annotations

import bisect
import json
import pathlib
import warnings

import numpy as np

from hybridsim import HybridsimWarning, storage, trajlog
from hybridsim.train_config import NO_EPISODE_LIMIT

BLOCK_ROWS = 1 << 15  # rows read at a time: of a long run only each row's time and frame are held


def _episode_stats(episodes: dict) -> dict:
    returns = episodes["return"]
    if returns.size == 0:
        return {"episodes": 0}
    return {"episodes": int(returns.size), "return_mean": float(returns.mean()),
            "return_median": float(np.median(returns)), "return_max": float(returns.max()),
            "return_min": float(returns.min()), "length_mean": float(episodes["length"].mean())}


# no Atari game's score comes near this: a return beyond it is a damaged row (a float's
# 1.7e308 stopped the plots deep in matplotlib)
MAX_ABS_RETURN = 2.0 ** 40


def _run_config(f) -> dict:
    """The run's config attribute as a dict ({} when absent: files written outside training)."""
    raw = f.attrs.get("config")
    if raw is None:
        return {}
    try:
        cfg = json.loads(raw)
    except (TypeError, ValueError):
        cfg = None
    if not isinstance(cfg, dict):
        raise trajlog.TrajectoryLogError(f"{f.filename}: damaged trajectory file: its config "
                                         f"attribute is not a JSON object")
    return cfg


class EnvRanges:
    """The environment ids a rank file's rows may hold, stretch by stretch: from each
    [from_frame, first, stop] on (rows logged after from_frame, as a resume there keeps the
    rows up to it), ids first..stop-1."""

    def __init__(self, stretches):
        stretches = sorted(stretches)
        self.starts = np.array([s[0] for s in stretches], np.int64)
        self.firsts = np.array([s[1] for s in stretches], np.int64)
        self.stops = np.array([s[2] for s in stretches], np.int64)

    def _stretch(self, frames: np.ndarray) -> np.ndarray:
        return np.maximum(np.searchsorted(self.starts, frames, side="left") - 1, 0)

    def outside(self, ids: np.ndarray, frames: np.ndarray) -> np.ndarray:
        """Where an id (logged at that frame) is not one of its stretch's."""
        k = self._stretch(frames)
        return (ids < self.firsts[k]) | (ids >= self.stops[k])

    def text(self, frame) -> str:
        k = int(self._stretch(np.asarray(frame)))
        return f"{self.firsts[k]}..{self.stops[k] - 1}" + (
            f" (from frame {self.starts[k]:,} on: env_ranges)" if len(self.starts) > 1 else "")


def _env_range(f, cfg: dict) -> EnvRanges | None:
    """The environment ids a rank file's rows may hold: by its `env_ranges` attribute, else
    its rank's block (dist.env_block) by the config; None for a master file or a file that
    does not say. An impala file from before `env_ranges`, resumed with another rank
    count, may have gone on with other --num-envs (its batch is --env-batch-size), which its
    config, written at its start, does not show."""
    if f.attrs.get("virtual"):
        return None
    ranges = trajlog.json_list_attr(f, "env_ranges")
    if ranges:
        return EnvRanges(ranges)
    rank, num_envs = f.attrs.get("rank"), cfg.get("num_envs")
    if rank is None or type(num_envs) is not int or num_envs < 1:
        return None
    if cfg.get("schedule") == "impala" and "resumes" in f.attrs:
        return None
    return EnvRanges([(0, int(rank) * num_envs, (int(rank) + 1) * num_envs)])


def _check_episodes(path, episodes: dict, envs: EnvRanges | None, max_length: int) -> None:
    """Refuse an episodes table no run writes: summaries of it were silently wrong."""
    def refuse(what, rows):
        row = int(np.flatnonzero(rows)[0])
        values = {k: episodes[k][row].item() for k in trajlog.EPISODE_FIELDS}
        raise trajlog.TrajectoryLogError(f"{path}: damaged trajectory file: episodes{what} "
                                         f"({int(rows.sum())} row(s); row {row}: {values})")
    ret, length = episodes["return"], episodes["length"]
    if (bad := ~np.isfinite(ret) | (np.abs(ret) > MAX_ABS_RETURN)).any():
        refuse(f"/return is not a number or beyond any game's score (|return| > {MAX_ABS_RETURN:.0f})", bad)
    if (bad := (length < 1) | (length > max_length)).any():
        refuse(f"/length is outside 1..{max_length} (the run's episode limit, in frames)", bad)
    if (bad := episodes["start_frame"] > episodes["end_frame"]).any():
        refuse("/start_frame is after end_frame", bad)
    if envs is not None and (bad := envs.outside(episodes["env_id"], episodes["end_frame"])).any():
        refuse(f"/env_id is outside this rank's environments "
               f"{envs.text(episodes['end_frame'][np.flatnonzero(bad)[0]])}", bad)
    pairs = np.stack([episodes["env_id"].astype(np.int64), episodes["episode_id"]], axis=1)
    unique, first = np.unique(pairs, axis=0, return_index=True)
    if len(unique) < len(pairs):
        repeated = np.ones(len(pairs), bool)
        repeated[first] = False
        refuse(" hold an (env_id, episode_id) twice", repeated)


STOPPED_SECONDS = 600.0  # a pause between two rows this long is a stopped job, not a slow step
PLOT_POINTS = 2000  # about this many points per file in the throughput plot


def _first_columns(frame) -> list[int]:
    """The step columns whose rows give each rank's time and frame: a rank file's first;
    a master file's first column of each rank file it maps (the row index is each rank's
    own step count: after a resume that changed the ranks, row k of two ranks are
    different steps, and a rank file started anew at a resume holds only the later ones)."""
    if not frame.is_virtual:
        return [0]
    starts = {m.vspace.get_select_bounds()[0][1] for m in frame.virtual_sources()}
    return sorted(starts) or [0]


def _scan_steps(f, num_actions: int, breaks=(), envs: EnvRanges | None = None) -> dict:
    """Action counts, the frames and seconds of running and the throughput plot's series.
    Steps are read block by block; each row's time and frame (16 bytes a row, per rank in
    a master file) are kept. Rows whose frame is damage (_frame_outliers) are left out,
    and the rows around them paired across the gap. Two consecutive rows count toward the
    throughput unless a resume, restart or gap lies between them (`breaks`, frames), their
    time goes back or is not a number (damage), or STOPPED_SECONDS pass between them (a
    resume in a file written before resumes were recorded): the time a job was stopped is
    no running time. global_frame counts every rank's frames, so each rank's rows give the
    run's rate over the time they cover: a master file's is that of the rank covering most.
    envs: the ids a rank file's env_id may hold (-1 too: the rows of an impala log hold
    whichever environments answered)."""
    steps = f["steps"]
    action, frame, when, env = steps["action"], steps["global_frame"], steps["unix_time"], steps["env_id"]
    counts = np.zeros(num_actions, dtype=np.int64)
    columns = _first_columns(frame)
    times, frames = {c: [] for c in columns}, {c: [] for c in columns}
    rows = trajlog.common_rows(steps)
    for start in range(0, rows, BLOCK_ROWS):
        stop = min(rows, start + BLOCK_ROWS)
        ids = env[start:stop]
        block_frames = {c: frame[start:stop, c] for c in columns}  # a row's slots hold one frame
        if envs is not None:  # a rank file: one column
            at = block_frames[0]
            if (bad := (ids != -1) & envs.outside(ids, at[:, None])).any():
                r = int(np.flatnonzero(bad.any(axis=1))[0])
                raise trajlog.TrajectoryLogError(
                    f"{f.filename}: damaged trajectory file: steps/env_id row {start + r} "
                    f"({env[start + r].tolist()}) holds ids outside this rank's environments {envs.text(at[r])}")
        a = action[start:stop][ids >= 0].astype(np.int64)
        outside = (a < 0) | (a >= num_actions)
        if outside.any():  # bincount would fail on them, or count them past the histogram
            raise trajlog.TrajectoryLogError(
                f"{f.filename}: damaged trajectory file: steps/action holds {int(outside.sum())} "
                f"value(s) outside 0..{num_actions - 1} (e.g. {int(a[outside][0])}) in rows "
                f"{start}..{stop - 1}")
        counts += np.bincount(a, minlength=num_actions)
        for c in columns:
            present = ids[:, c] >= 0  # a master's rows of that rank
            times[c].append(when[start:stop, c][present].astype(np.float64))
            frames[c].append(block_frames[c][present].astype(np.int64))
    scans = [_running(np.concatenate(times[c]) if times[c] else np.zeros(0),
                      np.concatenate(frames[c]) if frames[c] else np.zeros(0, np.int64), breaks)
             for c in columns]
    scan = max(scans, key=lambda one: one["frames_run"])
    scan.update(action_counts=counts, rows=rows, left_out=sum(one["left_out"] for one in scans))
    return scan


def _running(t: np.ndarray, fr: np.ndarray, breaks) -> dict:
    """The frames and seconds of running of one series of rows (time, frame)."""
    left_out = _frame_outliers(fr)
    t, fr = t[~left_out], fr[~left_out]
    dt = np.diff(t)
    running = (np.isfinite(dt) & (dt >= 0) & (dt < STOPPED_SECONDS)
               & ~trajlog.crosses_breaks(fr[:-1], fr[1:], breaks))
    return {"left_out": int(left_out.sum()), "frames_run": int(np.diff(fr)[running].sum()),
            "seconds_run": float(dt[running].sum()), "segments": len(_stretches(running)),
            "series": throughput_series(t, fr, running)}


def _frame_outliers(fr: np.ndarray) -> np.ndarray:
    """True for the rows whose frame cannot be the run's (damage), left out of the rate:
    a frame below 0, and the fewest rows whose removal leaves frames that never go back
    (all but a longest non-decreasing run of them). One damaged row going up (a flipped
    high bit: 2**40) counted its jump as frames run and made the rate absurd. Frames that
    never go back (an undamaged file) cost one pass. Order alone cannot tell a damaged
    last row going up (or first row going down) from a fast step: those stay."""
    left_out = fr < 0
    kept = np.flatnonzero(~left_out)
    frames = fr[kept]
    if not (np.diff(frames) < 0).any():
        return left_out
    # patience sorting: ends[k] is the least last frame of a non-decreasing run of k + 1
    # rows so far, at row ends_at[k]; before[i] the row preceding row i in its run
    ends, ends_at, before = [], [], [-1] * frames.size
    for i, value in enumerate(frames.tolist()):
        k = bisect.bisect_right(ends, value)
        if k:
            before[i] = ends_at[k - 1]
        if k == len(ends):
            ends.append(value)
            ends_at.append(i)
        else:
            ends[k], ends_at[k] = value, i
    ordered = np.zeros(frames.size, bool)
    i = ends_at[-1]
    while i >= 0:
        ordered[i] = True
        i = before[i]
    left_out[kept[~ordered]] = True
    return left_out


def _stretches(running: np.ndarray) -> list[tuple[int, int]]:
    """(first, last + 1) of each run of True pairs: rows first .. last + 1 ran as one."""
    edges = np.diff(np.concatenate([[0], running.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def throughput_series(t, fr, running, points: int = PLOT_POINTS) -> list[np.ndarray]:
    """The throughput plot's lines: one [k, 3] array of (first frame, last frame,
    frames/s) per stretch of running rows (`running`: their consecutive pairs), each point
    over rows of that stretch only. A point across a resume or stop drew a dip there: the
    pause counted as running time, which the summary's rate leaves out too."""
    step = max(1, int(np.count_nonzero(running)) // points)
    lines = []
    for first, last in _stretches(running):
        at = np.unique(np.append(np.arange(first, last + 1, step), last))  # rows, both ends
        dt, dframe = np.diff(t[at]), np.diff(fr[at])
        ok = dt > 0  # rows written in the same instant give no rate
        rate = dframe[ok] / dt[ok]
        lines.append(np.stack([fr[at][:-1][ok], fr[at][1:][ok], rate], axis=1).astype(np.float64))
    return [line for line in lines if len(line)]


def _throughput(scan: dict) -> float | None:
    """Frames over seconds of running, summed over the stretches between stops; None
    where there is none (a rate from damaged times or frames would be nonsense)."""
    if scan["seconds_run"] <= 0 or scan["frames_run"] <= 0:
        return None
    rate = scan["frames_run"] / scan["seconds_run"]
    return float(rate) if np.isfinite(rate) else None


def default_out_dir(target: pathlib.Path) -> pathlib.Path:
    """The run directory for the whole run (the directory or its master file); for one
    other file, a folder of its own beside it, so the run's summary is not replaced by it."""
    if target.is_dir():
        return target
    if target.name == trajlog.MASTER_FILE:
        return target.parent
    return target.parent / f"analysis-{target.stem}"


def analyze(target, out_dir=None, plots: bool = True) -> dict:
    """Summarise a run directory (all rank files) or one trajectory file."""
    target = pathlib.Path(target)
    files = trajlog.rank_files(target) if target.is_dir() else [target]
    option = "--out" if out_dir else "--out (default: beside the logs)"
    out_dir = pathlib.Path(out_dir) if out_dir else default_out_dir(target)
    with storage.new_directories_undone_on_error(out_dir):  # a refusal leaves no new folder
        return _analyze(target, files, out_dir, option, plots)


def _analyze(target, files, out_dir, option, plots) -> dict:
    storage.check_output_directory(out_dir, option)  # before a scan that can take minutes
    per_rank, all_episodes, actions_total, curves, coverage = {}, [], None, [], []
    attrs = {}
    for path in files:
        with trajlog.open_trajectory_file(path) as f:
            attrs[path] = dict(f.attrs)
    trajlog.check_one_run(attrs, all_ranks=target.is_dir())  # a directory: the whole run
    for path in files:
        with trajlog.open_trajectory_file(path) as f:
            cfg = _run_config(f)
            envs = _env_range(f, cfg)
            n = trajlog.common_rows(f["episodes"])
            episodes = {k: f["episodes"][k][:n] for k in trajlog.EPISODE_FIELDS}
            limit = cfg.get("max_episode_frames")
            _check_episodes(path, episodes, envs, limit if type(limit) is int and limit > 0 else NO_EPISODE_LIMIT)
            num_actions = f["steps"]["behavior_logits"].shape[2]
            gaps = [[int(a), int(b)] for a, b in trajlog.json_list_attr(f, "gaps")]
            breaks = [b for _, b in gaps] + trajlog.json_list_attr(f, "restarts") \
                + trajlog.json_list_attr(f, "resumes")
            rows = trajlog.common_rows(f["steps"])
            if envs is not None and rows:  # an a2c log's rows each hold the rank's environments
                trajlog.synchronous_env_ids(path, f["steps"]["env_id"], rows, str(cfg.get("schedule", "a2c")))
            scan = _scan_steps(f, num_actions, breaks, envs)
        stats = _episode_stats(episodes)
        stats.update(steps=int(scan["rows"]), action_counts=scan["action_counts"].tolist(),
                     frames_per_second=_throughput(scan), running_seconds=scan["seconds_run"],
                     running_segments=scan["segments"], gaps=gaps, rows_left_out=scan["left_out"])
        if scan["left_out"]:
            warnings.warn(f"{path}: {scan['left_out']} of {scan['rows']} step rows left out of the "
                          f"frame rate: their steps/global_frame is below 0 or out of order with the "
                          f"rows around them (damaged rows)", HybridsimWarning, stacklevel=2)
        per_rank[path.name] = stats
        coverage.append((scan["frames_run"], stats["frames_per_second"] or 0.0))
        all_episodes.append(episodes)
        actions_total = scan["action_counts"] if actions_total is None else actions_total + scan["action_counts"]
        curves.append(scan["series"])
    merged = {k: np.concatenate([e[k] for e in all_episodes]) for k in trajlog.EPISODE_FIELDS}
    overall = _episode_stats(merged)
    overall["action_counts"] = actions_total.tolist()
    # global_frame counts all ranks, so each file's rate is the run's over the time it
    # covers: the run's is that of the file covering most of it (rank 0's; a rank the run
    # dropped on a resume covers only the time before, a rank it added the time after)
    _, rate = max(coverage, default=(0, 0.0))
    overall["frames_per_second"] = rate or None
    summary = {"files": [str(p) for p in files], "overall": overall, "per_rank": per_rank}
    text = to_json(summary).encode()
    # the plots are drawn before anything is written: one that fails leaves the last
    # analysis whole, not a new summary beside older plots
    images = _plots(merged, actions_total, curves, target) if plots else {}
    storage.write_output(out_dir / "summary.json", "the summary", lambda fh: fh.write(text))
    summary["summary_file"] = str(out_dir / "summary.json")
    if plots:
        for name, png in images.items():
            storage.write_output(out_dir / name, "a plot", lambda fh, png=png: fh.write(png))
        summary["plots"] = [str(out_dir / name) for name in images]
    return summary


def to_json(summary: dict) -> str:
    """Strict JSON (jq, JavaScript): a non-finite number (a NaN return) becomes null."""
    def clean(value):
        if isinstance(value, float) and not np.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return json.dumps(clean(summary), indent=1, allow_nan=False)


def trailing_mean(values, window: int) -> np.ndarray:
    """At each point the mean of the last `window` values (fewer at the start), as training's
    mean_return_100 is. A centred convolution divided by the full window bent both ends
    toward 0: a run that stayed at -20 seemed to climb to -10 at its end."""
    values = np.asarray(values, dtype=np.float64)
    total = np.cumsum(values)
    total[window:] = total[window:] - total[:-window]
    return total / np.minimum(np.arange(1, values.size + 1), window)


def _plots(episodes, action_counts, curves, target) -> dict[str, bytes]:
    """The plots' PNG bytes by file name. A plot matplotlib cannot draw is an error naming
    `target` (the logs), not matplotlib's message alone."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    images = {}

    def save(fig, name):
        buf = io.BytesIO()
        try:
            fig.tight_layout()
            fig.savefig(buf, format="png", dpi=100)
        except (ValueError, OverflowError, RuntimeError) as exc:
            raise trajlog.TrajectoryLogError(f"{target}: cannot draw {name} from these logs ({exc}); "
                                             f"nothing was written") from exc
        finally:
            plt.close(fig)
        images[name] = buf.getvalue()

    order = np.argsort(episodes["end_frame"])
    fig, ax = plt.subplots(figsize=(6, 4))
    if order.size:
        ends, rets = episodes["end_frame"][order], episodes["return"][order]
        ax.scatter(ends, rets, s=4, alpha=0.4, label="episodes")
        window = max(1, min(100, rets.size // 5))
        ax.plot(ends, trailing_mean(rets, window), label=f"mean of the last {window}")
        ax.legend()
    ax.set_xlabel("frame")
    ax.set_ylabel("episode return")
    save(fig, "returns.png")
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(np.arange(len(action_counts)), action_counts)
    ax.set_xlabel("action")
    ax.set_ylabel("count")
    save(fig, "actions.png")
    fig, ax = plt.subplots(figsize=(6, 3))
    for k, lines in enumerate(curves):  # a line per stretch of running, in one colour a file
        for j, line in enumerate(lines):
            ax.plot(line[:, 1], line[:, 2], color=f"C{k % 10}", label=None if j else f"rank {k}")
    ax.set_xlabel("frame")
    ax.set_ylabel("frames/s")
    save(fig, "throughput.png")
    return images


def format_summary(summary: dict) -> str:
    lines = []
    for name, stats in [("overall", summary["overall"]), *summary["per_rank"].items()]:
        if stats.get("episodes"):
            lines.append(f"{name:22s} episodes {stats['episodes']:6d}  return mean {stats['return_mean']:8.2f}"
                         f"  median {stats['return_median']:8.2f}  max {stats['return_max']:8.2f}"
                         f"  length {stats['length_mean']:8.1f}")
        else:
            lines.append(f"{name:22s} no finished episodes")
    fps = summary["overall"].get("frames_per_second")
    if fps:
        segments = max((r.get("running_segments", 1) for r in summary["per_rank"].values()), default=1)
        lines.append(f"throughput: {fps:,.0f} frames/s" + (
            f" (while running: {segments} stretches between stops and resumes)" if segments > 1 else ""))
    for name, stats in summary["per_rank"].items():
        for since, until in stats.get("gaps", []):  # an unrecorded stretch of the run
            lines.append(f"warning: {name}: no steps logged after frame {since} up to frame {until} "
                         f"(lost, or not logged); the episodes there are missing from these numbers")
    counts = np.asarray(summary["overall"]["action_counts"])
    if counts.sum():
        share = ", ".join(f"{a}:{c / counts.sum():.0%}" for a, c in enumerate(counts))
        lines.append(f"actions: {share}")
    return "\n".join(lines)
