"""Weak scaling of `hybridsim train` over MPI ranks: the same environments per rank.

    python benchmarks/weak_scaling.py --ranks 1,2 [--backend ale-py] [--num-envs 8]
        [--frames-per-rank 40000] [--repeats 2]

For each rank count K it runs `mpiexec -n K python -m mpi4py -m hybridsim train` with
K x frames-per-rank frames and reads the training frames/s from metrics.csv (measured
from the start of the training loop, so start-up is excluded). Efficiency(K) =
fps(K) / (K fps(1)). Runs alternate between rank counts.
"""
import argparse
import csv
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np


def run(ranks: int, args, log_dir: pathlib.Path) -> float:
    shutil.rmtree(log_dir, ignore_errors=True)
    mpiexec = shutil.which("mpiexec", path=str(pathlib.Path(sys.executable).parent)) or "mpiexec"
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "hybridsim", "train",
           "--backend", args.backend, "--game", args.game, "--num-envs", str(args.num_envs),
           "--num-minibatches", "2", "--total-frames", str(ranks * args.frames_per_rank),
           "--log-dir", str(log_dir), "--num-threads", "1", "--torch-threads", str(args.torch_threads),
           "--log-every", "1e9", "--log-trajectories", "false", "--checkpoint-every", "1000000000"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = list(csv.DictReader(open(log_dir / "metrics.csv")))
    return float(rows[-1]["fps"])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--backend", default="ale-py")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--frames-per-rank", type=int, default=40_000)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    counts = [int(k) for k in args.ranks.split(",")]
    work = pathlib.Path(tempfile.mkdtemp(prefix="hs_scaling_"))
    results = {k: [] for k in counts}
    for _ in range(args.repeats):
        for k in counts:
            results[k].append(run(k, args, work / f"r{k}"))
    base = np.median(results[counts[0]]) / counts[0]
    print(f"weak scaling, {args.game}, backend {args.backend}, {args.num_envs} envs and "
          f"{args.torch_threads} learner thread(s) per rank, median of {args.repeats}")
    print(f"{'ranks':>5s} {'frames/s':>10s} {'per rank':>10s} {'efficiency':>10s}")
    for k in counts:
        fps = float(np.median(results[k]))
        print(f"{k:5d} {fps:10.0f} {fps / k:10.0f} {fps / (k * base):10.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
