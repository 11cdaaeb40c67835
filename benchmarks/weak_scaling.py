"""Weak scaling of `hybridsim train` over MPI ranks: the same environments per rank.

    python benchmarks/weak_scaling.py --ranks 1,2 [--backend ale-py] [--num-envs 8]
        [--frames-per-rank 40000] [--repeats 2] [--device cpu] [--allreduce mpi] [--mpiexec PATH]
        [--json OUT]

For each rank count K it runs `mpiexec -n K python -m mpi4py -m hybridsim train` with
K x frames-per-rank frames and reads the training frames/s from metrics.csv (measured
from the start of the training loop, so start-up is excluded). Efficiency(K) =
fps(K) / (K fps(1)). Runs alternate between rank counts.
"""
import argparse
import csv
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np


def run(ranks: int, args, log_dir: pathlib.Path) -> float:
    shutil.rmtree(log_dir, ignore_errors=True)
    cmd = [args.mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train",
           "--backend", args.backend, "--game", args.game, "--num-envs", str(args.num_envs),
           "--num-minibatches", "2", "--total-frames", str(ranks * args.frames_per_rank),
           "--log-dir", str(log_dir), "--device", args.device, "--num-threads", "1",
           "--torch-threads", str(args.torch_threads), "--allreduce", args.allreduce,
           "--log-every", "1e9", "--log-trajectories", "false", "--checkpoint-every", "1000000000"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{ranks} ranks: exit status {result.returncode}\n{result.stderr[-3000:]}")
    rows = list(csv.DictReader(open(log_dir / "metrics.csv")))
    return float(rows[-1]["fps"])


def table(results: dict) -> list[dict]:
    """Median frames/s per rank count, and the efficiency fps(K) / (K fps(first K))."""
    counts = [k for k, runs in results.items() if runs]
    base = np.median(results[counts[0]]) / counts[0]
    rows = []
    for k in counts:
        fps = float(np.median(results[k]))
        rows.append({"ranks": k, "fps": fps, "fps_per_rank": fps / k, "efficiency": fps / (k * base),
                     "runs": results[k]})
    return rows


def write_json(args, results: dict) -> None:
    settings = {key: getattr(args, key) for key in ("game", "backend", "num_envs", "frames_per_rank",
                                                    "torch_threads", "repeats", "device", "allreduce")}
    pathlib.Path(args.json).write_text(json.dumps({"settings": settings, "cpus": os.cpu_count(),
                                                   "rows": table(results)}, indent=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--backend", default="ale-py")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--frames-per-rank", type=int, default=40_000)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="each rank's learner device")
    parser.add_argument("--allreduce", default="mpi", help="train's gradient path: mpi, gloo, nccl or auto")
    parser.add_argument("--mpiexec", default=os.environ.get("MPIEXEC") or shutil.which(
        "mpiexec", path=str(pathlib.Path(sys.executable).parent)) or "mpiexec",
        help="the MPI launcher (default: $MPIEXEC, else the one beside this Python, else PATH's)")
    parser.add_argument("--json", help="also write the table and every run's frames/s here")
    args = parser.parse_args()
    # A time limit's SIGTERM becomes SystemExit, on which subprocess.run kills mpiexec too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    counts = [int(k) for k in args.ranks.split(",")]
    work = pathlib.Path(tempfile.mkdtemp(prefix="hs_scaling_"))
    results = {k: [] for k in counts}
    for _ in range(args.repeats):
        for k in counts:
            results[k].append(run(k, args, work / f"r{k}"))
            if args.json:  # after every run, so a run cut short by a time limit keeps the others
                write_json(args, results)
    print(f"weak scaling, {args.game}, backend {args.backend}, {args.num_envs} envs and "
          f"{args.torch_threads} learner thread(s) per rank, gradients over {args.allreduce}, "
          f"median of {args.repeats}")
    print(f"{'ranks':>5s} {'frames/s':>10s} {'per rank':>10s} {'efficiency':>10s}")
    for row in table(results):
        print(f"{row['ranks']:5d} {row['fps']:10.0f} {row['fps_per_rank']:10.0f} {row['efficiency']:10.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
