"""Time one gradient Allreduce of the model's size across MPI ranks.

    mpiexec -n 2 python benchmarks/allreduce.py [--model nature] [--repeats 50] [--allreduce mpi|gloo|nccl]
        [--torch-threads 1] [--json OUT]

Uses the same path as training (hybridsim.dist.MPIComm.allreduce_gradients: flatten,
stage through host memory, one MPI Allreduce, average) and prints the median time and
the effective bus bandwidth 2 (P-1)/P * bytes / time (the ring-allreduce volume).
"""
import argparse
import json
import time

import numpy as np
import torch

from hybridsim import dist
from hybridsim.models import build_model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="nature")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--allreduce", default="mpi", choices=["mpi", "gloo", "nccl"])
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch's threads per rank (training's default on CPU: 1)")
    parser.add_argument("--json", help="rank 0 also writes the result here")
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda", dist.local_rank() % max(1, torch.cuda.device_count())) \
        if args.allreduce == "nccl" else torch.device("cpu")
    comm = dist.with_gradient_backend(dist.init_comm(), args.allreduce, device)
    if comm.size < 2:
        parser.error("one rank has nothing to reduce: run it under mpiexec -n 2 (or more)")
    model = build_model(args.model, (4, 84, 84), 18).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in model.parameters())
    times = []
    for _ in range(args.repeats + 5):
        comm.barrier()
        start = time.perf_counter()
        comm.allreduce_gradients(model)
        if device.type == "cuda":
            torch.cuda.synchronize()  # NCCL returns before the reduction is done
        times.append(time.perf_counter() - start)
    median = float(np.median(times[5:]))
    if comm.rank == 0:
        volume = 2 * (comm.size - 1) / comm.size * n * 4
        print(f"{args.model}: {n:,} parameters ({n * 4 / 1e6:.1f} MB), {comm.size} ranks, "
              f"{comm.gradient_path}: "
              f"allreduce median {median * 1e3:.2f} ms, bus bandwidth {volume / median / 1e9:.2f} GB/s")
        if args.json:  # gradient_path says what ran: a failed NCCL or gloo set-up falls back to MPI
            result = dict(model=args.model, parameters=n, ranks=comm.size, requested=args.allreduce,
                          gradient_path=comm.gradient_path, device=str(device), median_ms=median * 1e3,
                          bus_bandwidth_GBps=volume / median / 1e9, repeats=args.repeats,
                          torch_threads=args.torch_threads)
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
