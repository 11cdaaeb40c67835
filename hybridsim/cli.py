"""The `hybridsim` command line."""
from __future__ import annotations

import argparse
import signal
import sys

PREEMPTED_EXIT_CODE = 3  # training stopped by SIGUSR1/SIGTERM after writing a checkpoint


def _cmd_bench(args) -> int:
    from hybridsim import bench
    if args.cpu or not any([args.cpu]):
        bench.bench_cpu()
    return 0


def _cmd_info(args) -> int:
    import hybridsim
    from hybridsim import _core
    print(f"hybridsim {hybridsim.__version__}")
    print(f"core headers: {hybridsim.core_include_dir()}")
    print(f"OpenMP: {'on' if _core.openmp_enabled() else 'OFF'} "
          f"(max threads {_core.openmp_max_threads()})")
    return 0


def _cmd_train(args) -> int:
    from hybridsim.config import build_config
    from hybridsim.train import TrainConfig, Trainer
    cfg = build_config(TrainConfig, args)
    trainer = Trainer(cfg)
    # Slurm sends SIGUSR1 (--signal) before the time limit and SIGTERM on preemption:
    # finish the iteration, write a checkpoint, exit with PREEMPTED_EXIT_CODE.
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, trainer.request_stop)
    summary = trainer.train()
    if summary["preempted"]:
        print(f"stopped by a signal at {summary['frames']:,} frames; checkpoint written to "
              f"{summary['checkpoint']}; run again with --resume to continue")
        return PREEMPTED_EXIT_CODE
    print(f"trained {summary['frames']:,} frames in {summary['updates']:,} updates; "
          f"{summary['episodes']} episodes, mean return of the last 100: "
          f"{summary['mean_return_100']:.2f}")
    print(f"checkpoint: {summary['checkpoint']}")
    print(f"metrics:    {summary['metrics']} (TensorBoard: {cfg.log_dir}/tensorboard)")
    print(f"curve:      {summary['curve']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybridsim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("bench", help="measure speed (results go in BENCHMARKS.md)")
    p.add_argument("--cpu", action="store_true", help="the 6507 core alone (default)")
    p.set_defaults(func=_cmd_bench)
    from hybridsim.config import add_dataclass_arguments
    from hybridsim.train import TrainConfig
    p = sub.add_parser("train", help="train an agent with V-trace (A2C+V-trace or IMPALA-style)")
    add_dataclass_arguments(p, TrainConfig)
    p.set_defaults(func=_cmd_train)
    p = sub.add_parser("info", help="build and install information")
    p.set_defaults(func=_cmd_info)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(f"hybridsim {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
