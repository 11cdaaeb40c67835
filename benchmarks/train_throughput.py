"""Training frames/s next to environment-only frames/s, and where a training step's time goes.

    python benchmarks/train_throughput.py [--game pong] [--num-envs 16] [--frames 48000]
                                          [--repeats 3] [--wait-policies passive,default]

Each measurement runs in a fresh process (OpenMP reads OMP_WAIT_POLICY once, at start-up),
alternating the variants so that drift on a shared machine hits them alike:
- env only: `hybridsim.AtariVectorEnv` stepped with random actions (default preprocessing,
  the trainer's settings), frames/s;
- training: `Trainer.train()` on the same environment settings (construction excluded),
  frames/s, and the share of its time spent acting (policy forward), stepping the
  environments and learning (forward, backward, optimiser), the rest being bookkeeping
  and logging.
`default` is libgomp's own spin-then-sleep, which hybridsim keeps (it no longer sets
OMP_WAIT_POLICY on import); `passive` sleeps at once. Training is timed without the one-off
end of the run (final checkpoint, plot, closing the logs; before 2026-12-07 it was in).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from _training_time import train_loop_seconds  # benchmarks/, this script's folder


def measure(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="hs_tp_") as log_dir:
        return _measure(args, log_dir)


def _measure(args, log_dir: str) -> dict:
    import numpy as np
    import torch

    from hybridsim.train import TrainConfig, Trainer, make_vector_env

    cfg = TrainConfig(game=args.game, num_envs=args.num_envs, total_frames=args.frames,
                      log_dir=log_dir, log_every=1e9, checkpoint_every=10**12, log_trajectories=True)
    env = make_vector_env(cfg, seed=1)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    n_actions = env.single_action_space.n
    steps = max(1, args.frames // (cfg.num_envs * cfg.frame_skip))
    actions = rng.integers(0, n_actions, size=(steps, cfg.num_envs))
    start = time.perf_counter()
    for t in range(steps):
        env.step(actions[t])
    env_fps = steps * cfg.num_envs * cfg.frame_skip / (time.perf_counter() - start)
    env.close()

    trainer = Trainer(cfg)
    spent = {"act": 0.0, "env": 0.0, "learn": 0.0}

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0
        return wrapper

    trainer.act = timed("act", trainer.act)
    trainer.learn = timed("learn", trainer.learn)
    trainer.env.step = timed("env", trainer.env.step)
    summary, elapsed = train_loop_seconds(trainer)
    return {"env_fps": env_fps, "train_fps": summary["frames"] / elapsed,
            "share": {k: v / elapsed for k, v in spent.items()},
            "torch_threads": torch.get_num_threads()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--frames", type=int, default=48_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wait-policies", default="passive,default",
                        help="OMP_WAIT_POLICY values to compare (default = libgomp's own)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    policies = args.wait_policies.split(",")
    results = {p: [] for p in policies}
    for r in range(args.repeats):
        for policy in policies[r % len(policies):] + policies[:r % len(policies)]:
            env = dict(os.environ)
            env.pop("OMP_WAIT_POLICY", None)
            if policy != "default":
                env["OMP_WAIT_POLICY"] = policy.upper()
            cmd = [sys.executable, __file__, "--child", "--game", args.game,
                   "--num-envs", str(args.num_envs), "--frames", str(args.frames)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            results[policy].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"# {args.game}, {args.num_envs} envs, {args.frames:,} frames per run, {args.repeats} "
          f"repeats; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"{'OMP_WAIT_POLICY':16s} {'env-only fps':>13s} {'training fps':>13s} {'ratio':>6s} "
          f"{'act':>5s} {'env':>5s} {'learn':>6s} {'other':>6s}")
    for policy, rows in results.items():
        env_fps = statistics.median(r["env_fps"] for r in rows)
        train_fps = statistics.median(r["train_fps"] for r in rows)
        share = {k: statistics.median(r["share"][k] for r in rows) for k in ("act", "env", "learn")}
        other = 1.0 - sum(share.values())
        print(f"{policy:16s} {env_fps:13,.0f} {train_fps:13,.0f} {train_fps / env_fps:6.2f} "
              f"{share['act']:5.0%} {share['env']:5.0%} {share['learn']:6.0%} {other:6.0%}")


if __name__ == "__main__":
    main()
