"""Cost of HDF5 trajectory logging in training, and lzf vs gzip for the step data.

    python benchmarks/logging_overhead.py [--backend ale-py] [--frames 40000] [--repeats 5]

Runs the same short training with logging off, on (no observations) and on with
observations (every step of one environment), alternating the variants (and rotating
which goes first) so that drift on a shared machine hits all of them alike. Two measures:
- end to end: frames/s of `Trainer.train()` (construction excluded), median and range per
  variant, and the median over repetitions of each run's ratio to the unlogged run of
  the same repetition;
- direct: seconds spent inside the logging code (Trainer._log_step with the writer's
  buffering and flushes, episode rows, opening and closing the files, the master file)
  as a share of the run's time. Far less noisy than a difference of two throughputs.
Both measure the training loop; the end of a run (final checkpoint, plot, closing and
stitching the logs) is a one-off cost, shown as "close s" for the logs' part.
Then file size per million frames, and the step rows written with each codec.
"""
import argparse
import functools
import os
import pathlib
import platform
import shutil
import tempfile
import time

import h5py
import numpy as np

from hybridsim import trajlog
from hybridsim.train import TrainConfig, Trainer

VARIANTS = {
    "no logging": dict(log_trajectories=False),
    "steps (default)": dict(log_trajectories=True),
    "steps + observations (env 0, every step)": dict(log_trajectories=True, log_observations=True,
                                                     obs_stride=1),
}

LOGGING_TIME = [0.0]
FINISH = {"seconds": 0.0, "logging": 0.0}


def timed(function):
    """Add the wall time of `function` to LOGGING_TIME (not re-entrant: the wrapped
    functions do not call each other)."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            LOGGING_TIME[0] += time.perf_counter() - start
    return wrapper


def instrument():
    Trainer._log_step = timed(Trainer._log_step)
    Trainer._flush_episodes = timed(Trainer._flush_episodes)
    trajlog.TrajectoryWriter.__init__ = timed(trajlog.TrajectoryWriter.__init__)
    trajlog.TrajectoryWriter.close = timed(trajlog.TrajectoryWriter.close)
    trajlog.write_master = timed(trajlog.write_master)
    finish = Trainer._finish

    @functools.wraps(finish)
    def timed_finish(self, *args, **kwargs):
        start, logged = time.perf_counter(), LOGGING_TIME[0]
        try:
            return finish(self, *args, **kwargs)
        finally:
            FINISH["seconds"] = time.perf_counter() - start
            FINISH["logging"] = LOGGING_TIME[0] - logged
    Trainer._finish = timed_finish


def run_once(base: dict, variant: dict, log_dir: pathlib.Path) -> dict:
    shutil.rmtree(log_dir, ignore_errors=True)
    cfg = TrainConfig(**base, **variant, log_dir=str(log_dir))
    trainer = Trainer(cfg)
    LOGGING_TIME[0] = 0.0
    start = time.perf_counter()
    summary = trainer.train()
    # the loop alone: the end of a run (final checkpoint, learning-curve plot, closing and
    # stitching the logs) is a one-off cost, reported on its own
    seconds = time.perf_counter() - start - FINISH["seconds"]
    size = sum(p.stat().st_size for p in log_dir.glob("traj_rank*.h5"))
    return {"fps": summary["frames"] / seconds, "frames": summary["frames"], "bytes": size,
            "seconds": seconds, "logging_share": (LOGGING_TIME[0] - FINISH["logging"]) / seconds,
            "close_seconds": FINISH["logging"]}


def compression_table(source: pathlib.Path, repeats: int = 3):
    steps = trajlog.read_steps(source)
    rows = next(iter(steps.values())).shape[0]
    print(f"\ncompression of {rows} step rows x {steps['action'].shape[1]} envs "
          f"(from the logged run), {repeats} writes each")
    print(f"{'codec':8s} {'write s':>8s} {'MB':>8s} {'ratio':>6s}")
    raw = sum(v.nbytes for v in steps.values())
    with tempfile.TemporaryDirectory() as tmp:
        for codec in ("none", "lzf", "gzip"):
            best = float("inf")
            for _ in range(repeats):
                path = pathlib.Path(tmp) / f"{codec}.h5"
                start = time.perf_counter()
                with h5py.File(path, "w") as f:
                    for name, data in steps.items():
                        f.create_dataset(name, data=data, chunks=True, **trajlog.dataset_kwargs(codec))
                best = min(best, time.perf_counter() - start)
            size = path.stat().st_size
            print(f"{codec:8s} {best:8.3f} {size / 1e6:8.2f} {raw / size:6.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="ale-py")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--frames", type=int, default=40_000)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="environment and torch threads per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default="", help="comma-separated indices into the variant list")
    parser.add_argument("--no-codecs", action="store_true", help="skip the compression table")
    args = parser.parse_args()
    instrument()
    base = dict(game=args.game, backend=args.backend, num_envs=args.num_envs, num_minibatches=4,
                total_frames=args.frames, log_every=1e9, checkpoint_every=10**12,
                num_threads=args.threads, torch_threads=args.threads)
    names = list(VARIANTS)
    if args.variants:
        names = [names[int(i)] for i in args.variants.split(",")]
    results = {name: [] for name in names}
    work = pathlib.Path(tempfile.mkdtemp(prefix="hs_logbench_"))
    load_before = os.getloadavg()
    started = time.time()
    for rep in range(args.repeats):  # alternate, rotating the order each repetition
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            r = run_once(base, VARIANTS[name], work / "run")
            results[name].append(r)
            print(f"  rep {rep} {name:42s} {r['fps']:7.0f} frames/s  logging {r['logging_share']:6.2%}",
                  flush=True)
            if name == "steps (default)":
                shutil.copy(work / "run" / "traj_rank00000.h5", work / "steps.h5")
    load_after = os.getloadavg()
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, load average {load_before[0]:.1f} at the start, "
          f"{load_after[0]:.1f} at the end, {time.time() - started:.0f} s")
    print(f"training {args.game}, backend {args.backend}, {args.num_envs} envs, {args.threads} env + "
          f"{args.threads} torch thread(s), {args.frames:,} frames per run, {args.repeats} alternating "
          f"repetitions")
    off = results.get("no logging")
    print(f"{'variant':42s} {'median f/s':>10s} {'range':>13s} {'vs off':>7s} {'paired':>7s} "
          f"{'logging':>8s} {'close s':>7s} {'MB/1M frames':>12s}")
    for name, runs in results.items():
        fps = np.array([r["fps"] for r in runs])
        share = np.median([r["logging_share"] for r in runs])
        close = np.median([r["close_seconds"] for r in runs])
        mb = np.median([r["bytes"] / r["frames"] for r in runs])  # bytes per frame = MB per 1M
        if off:
            ref = np.median([r["fps"] for r in off])
            paired = np.median([r["fps"] / o["fps"] - 1 for r, o in zip(runs, off)])
            vs, pair = f"{np.median(fps) / ref - 1:+7.1%}", f"{paired:+7.1%}"
        else:
            vs = pair = "       "
        print(f"{name:42s} {np.median(fps):10.0f} {fps.min():6.0f}-{fps.max():<6.0f} {vs} {pair} "
              f"{share:8.2%} {close:7.2f} {mb:12.1f}")
    if off:
        spread = np.array([r["fps"] for r in off])
        print(f"run-to-run spread of the unlogged runs: {(spread.max() - spread.min()) / np.median(spread):.0%} "
              f"of the median")
    if not args.no_codecs and (work / "steps.h5").exists():
        compression_table(work / "steps.h5")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
