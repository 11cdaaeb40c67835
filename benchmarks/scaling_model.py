"""The scaling model of docs/SCALING.md: weak-scaling efficiency from a per-update compute
time and a ring-allreduce cost model.

    python benchmarks/scaling_model.py [--grad-mb 6.78] [--alpha-us 5]
                                       [--link-gbs 40] [--gpus-per-node 1]

Ring allreduce of n bytes over P ranks (Thakur, Rabenseifner, Gropp 2005; the bus
bandwidth of nccl-tests' PERFORMANCE.md is the same 2(P-1)/P factor):
    T_ring(P) = 2 (P-1) alpha + 2 (P-1)/P * n / B
Double binary tree (NCCL's other algorithm, for many ranks): latency 2 log2(P) alpha, same
bandwidth term to first order. Training averages gradients once per update and does not
overlap it with compute, so an update that computes for t takes t + T(P), and the
weak-scaling efficiency is t / (t + T(P)) (the same for an iteration of U updates).
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
    parser.add_argument("--t-update-ms", default="36.4,10,3,1", help="compute per update (ms), list")
    args = parser.parse_args()
    n = args.grad_mb * 1e6
    alpha, bw = args.alpha_us * 1e-6, args.link_gbs * 1e9
    staging = 2 * n / (args.stage_gbs * 1e9) if args.stage_gbs else 0.0
    nodes = [1, 2, 4, 8, 16, 32, 64]
    t_updates = [float(t) * 1e-3 for t in args.t_update_ms.split(",")]
    print(f"n = {args.grad_mb} MB, alpha = {args.alpha_us} us, B = {args.link_gbs} GB/s, "
          f"{args.gpus_per_node} rank(s) per node, staging {staging * 1e3:.2f} ms")
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
