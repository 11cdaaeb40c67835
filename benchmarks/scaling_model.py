"""The scaling model of docs/SCALING.md: weak-scaling efficiency from a per-update compute
time and a ring-allreduce cost model.

    python benchmarks/scaling_model.py [--grad-mb 6.78] [--alpha-us 5]
                                       [--link-gbs 40] [--gpus-per-node 1]
                                       [--local-ms 0] [--t-update-ms 41.9,10,3,1]

Ring allreduce of n bytes over P ranks (Thakur, Rabenseifner, Gropp 2005; the bus
bandwidth of nccl-tests' PERFORMANCE.md is the same 2(P-1)/P factor):
    T_ring(P) = 2 (P-1) alpha + 2 (P-1)/P * n / B
Double binary tree (NCCL's other algorithm, for many ranks): latency 2 log2(P) alpha, same
bandwidth term to first order. Training averages gradients once per update and does not
overlap it with compute, so an update that computes for t takes t + T(P), and the
weak-scaling efficiency is t / (t + T(P)) (the same for an iteration of U updates).

Measured defaults (benchmarks/results/2026-12-04-h200-scaling.json, the 16-core H200
machine): t = 41.9 ms is half of one rank's 83.8 ms iteration (8 envs x 5 steps x frame
skip 4 = 160 frames at 1,909 frames/s, then U = 2 updates), CPU learner on one thread.
--local-ms takes a measured per-update cost of the host path instead of a modelled one:
the whole 2-rank allreduce on that machine, 8.38 ms (MPI, CPU tensors) or 3.20 ms (MPI
from CUDA tensors, staging included). It holds that run's one-node reduction too, which
the network term then counts again: pessimistic on the host side. alpha and B stay
assumptions (docs/SCALING.md).
"""
import argparse
import math


def ring(p: int, n_bytes: float, alpha: float, bandwidth: float) -> float:
    return 0.0 if p == 1 else 2 * (p - 1) * alpha + 2 * (p - 1) / p * n_bytes / bandwidth


def tree(p: int, n_bytes: float, alpha: float, bandwidth: float) -> float:
    return 0.0 if p == 1 else 2 * math.ceil(math.log2(p)) * alpha + 2 * (p - 1) / p * n_bytes / bandwidth


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grad-mb", type=float, default=6.775, help="gradient bytes per allreduce (MB)")
    parser.add_argument("--alpha-us", type=float, default=5.0, help="latency per ring step (us)")
    parser.add_argument("--link-gbs", type=float, default=40.0, help="bandwidth per rank (GB/s)")
    parser.add_argument("--gpus-per-node", type=int, default=1, help="ranks per node")
    parser.add_argument("--stage-gbs", type=float, default=0.0,
                        help="host staging bandwidth (GB/s) for the MPI path: adds 2 n / B (0: none)")
    parser.add_argument("--local-ms", type=float, default=0.0,
                        help="measured host-path cost per update (ms) when P > 1, added to the network "
                             "model (8.38: MPI from CPU tensors, 3.20: MPI from CUDA tensors, both "
                             "2-rank allreduces on the H200 machine, 2026-12-04; 0: none)")
    parser.add_argument("--t-update-ms", default="41.9,10,3,1",
                        help="compute per update (ms), list (41.9: measured, CPU learner on the H200 "
                             "machine; the others are scenarios)")
    args = parser.parse_args()
    n = args.grad_mb * 1e6
    alpha, bw = args.alpha_us * 1e-6, args.link_gbs * 1e9
    staging = 2 * n / (args.stage_gbs * 1e9) if args.stage_gbs else 0.0
    staging += args.local_ms * 1e-3
    nodes = [1, 2, 4, 8, 16, 32, 64]
    t_updates = [float(t) * 1e-3 for t in args.t_update_ms.split(",")]
    print(f"n = {args.grad_mb} MB, alpha = {args.alpha_us} us, B = {args.link_gbs} GB/s, "
          f"{args.gpus_per_node} rank(s) per node, staging and local cost {staging * 1e3:.2f} ms")
    print("| nodes | ranks | ring ms | tree ms | " + " | ".join(f"E at {t * 1e3:g} ms/update" for t in t_updates) + " |")
    print("| ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in t_updates) + " |")
    for k in nodes:
        p = k * args.gpus_per_node
        t_ring = ring(p, n, alpha, bw) + (staging if p > 1 else 0.0)
        t_tree = tree(p, n, alpha, bw) + (staging if p > 1 else 0.0)
        t_best = min(t_ring, t_tree)
        effs = [t / (t + t_best) for t in t_updates]  # per update: compute t, then one allreduce
        print(f"| {k} | {p} | {t_ring * 1e3:.2f} | {t_tree * 1e3:.2f} | "
              + " | ".join(f"{e:.3f}" for e in effs) + " |")


if __name__ == "__main__":
    main()
