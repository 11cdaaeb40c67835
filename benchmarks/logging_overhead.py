"""Cost of HDF5 trajectory logging in training, and lzf vs gzip for the step data.

    python benchmarks/logging_overhead.py [--backend ale-py] [--frames 40000] [--repeats 3]

Runs the same short training alternately with logging off, on (no observations) and on
with observations (every step of one environment), and reports frames/s and file size
per million frames; then writes the step rows of the logged run with each compression.
"""
import argparse
import pathlib
import shutil
import tempfile
import time

import h5py
import numpy as np

from hybridsim import trajlog
from hybridsim.train import TrainConfig, Trainer

VARIANTS = {
    "no logging": dict(log_trajectories=False),
    "steps": dict(log_trajectories=True),
    "steps + observations (env 0, every step)": dict(log_trajectories=True, log_observations=True, obs_stride=1),
}


def run_once(base: dict, variant: dict, log_dir: pathlib.Path) -> tuple[float, int, int]:
    shutil.rmtree(log_dir, ignore_errors=True)
    cfg = TrainConfig(**base, **variant, log_dir=str(log_dir))
    start = time.perf_counter()
    summary = Trainer(cfg).train()
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in log_dir.glob("traj_rank*.h5"))
    return summary["frames"] / seconds, summary["frames"], size


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
                        f.create_dataset(name, data=data, chunks=True, **trajlog._dataset_kwargs(codec))
                best = min(best, time.perf_counter() - start)
            size = path.stat().st_size
            print(f"{codec:8s} {best:8.3f} {size / 1e6:8.2f} {raw / size:6.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="ale-py")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--frames", type=int, default=40_000)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = dict(game=args.game, backend=args.backend, num_envs=args.num_envs, num_minibatches=4,
                total_frames=args.frames, log_every=1e9, checkpoint_every=10**12)
    results = {name: [] for name in VARIANTS}
    work = pathlib.Path(tempfile.mkdtemp(prefix="hs_logbench_"))
    for _ in range(args.repeats):  # alternate, so drift on a shared machine hits all alike
        for name, variant in VARIANTS.items():
            results[name].append(run_once(base, variant, work / "run"))
            if name == "steps":
                shutil.copy(work / "run" / "traj_rank00000.h5", work / "steps.h5")
    reference = np.median([r[0] for r in results["no logging"]])
    print(f"training {args.game}, backend {args.backend}, {args.num_envs} envs, "
          f"{args.frames:,} frames per run, median of {args.repeats} alternating runs")
    print(f"{'variant':42s} {'frames/s':>9s} {'vs off':>7s} {'MB per 1M frames':>17s}")
    for name, runs in results.items():
        fps = np.median([r[0] for r in runs])
        mb = np.median([r[2] / r[1] * 1e6 / 1e6 for r in runs])
        print(f"{name:42s} {fps:9.0f} {fps / reference - 1:+7.1%} {mb:17.1f}")
    compression_table(work / "steps.h5")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
