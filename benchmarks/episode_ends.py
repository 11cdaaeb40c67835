"""A learner setting off against on: training returns and ale-py eval, seed by seed.

    python benchmarks/episode_ends.py --compare bootstrap_truncation [--config quickstart]
        [--set max_episode_frames=2000 ...] [--frames 400000] [--seeds 1,2]
        [--eval-episodes 8] [--out DIR]

For each seed, and for the setting false then true, `hybridsim train --config C --seed S
--total-frames F --log-trajectories false --<setting> false|true` (plus each --set NAME=VALUE
as --NAME VALUE) runs in this process, one run after another (runs side by side would share
the cores and the timings). `hybridsim eval` then scores the final checkpoint on ale-py
(the reference protocol: sampled actions, seed 12345) with the run's own episode limit and,
where the run had a shorter one, on whole games (108,000 frames). Prints one JSON object.

BENCHMARKS.md's "A time-limit cut bootstrapped from the final observation" came from this
script. "A lost life as the learner's terminal" ran the training commands this script runs
with `--compare life_loss_terminal --set game=breakout --frames 1000000 --seeds 1000,2000`.
"""
import argparse
import contextlib
import json
import math
import os
import pathlib
import platform
import sys
import tempfile
import time

WHOLE_GAME_FRAMES = 108_000  # ALE's v5 limit: 30 minutes at 60 frames/s


def _number(x):
    """JSON has no NaN: a mean of no episodes is null."""
    return None if isinstance(x, float) and math.isnan(x) else x


def run_one(args, seed: int, value: bool, log_dir: pathlib.Path) -> dict:
    from hybridsim.cli import build_parser
    from hybridsim.config import build_config
    from hybridsim.evaluate import evaluate
    from hybridsim.train import TrainConfig, Trainer

    argv = ["train", "--config", args.config, "--seed", str(seed), "--total-frames", str(args.frames),
            "--log-trajectories", "false", "--log-dir", str(log_dir),
            "--" + args.compare.replace("_", "-"), str(value).lower()]
    for item in args.set:
        name, _, text = item.partition("=")
        argv += ["--" + name.replace("_", "-"), text]
    cfg = build_config(TrainConfig, build_parser().parse_args(argv))
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # the progress lines; stdout is the report's
        summary = Trainer(cfg).train()
    seconds = time.perf_counter() - start
    checkpoint = summary["final_checkpoint"] or summary["checkpoint"]
    row = {"seed": seed, args.compare: value, "command": "hybridsim " + " ".join(argv),
           "episodes": summary["episodes"], "window": summary["window"],
           "mean_return_first": _number(summary["mean_return_first"]),
           "mean_return_last": _number(summary["mean_return_last"]),
           "train_seconds": round(seconds, 1)}
    limits = {"eval_own_limit": cfg.max_episode_frames}
    if 0 < cfg.max_episode_frames < WHOLE_GAME_FRAMES:
        limits["eval_whole_games"] = WHOLE_GAME_FRAMES
    for key, limit in limits.items():
        result = evaluate(checkpoint, episodes=args.eval_episodes, env="ale-py", max_episode_frames=limit)
        row[key] = {"mean": _number(result["mean"]), "std": _number(result["std"]), "max_episode_frames": limit}
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", required=True, choices=["bootstrap_truncation", "life_loss_terminal"],
                   help="the boolean training setting run false and true")
    p.add_argument("--config", default="quickstart", help="a shipped recipe or a TOML file")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="another training setting for every run (repeatable)")
    p.add_argument("--frames", type=int, default=400_000)
    p.add_argument("--seeds", default="1,2", help="comma-separated training seeds")
    p.add_argument("--eval-episodes", type=int, default=8)
    p.add_argument("--out", default=None, help="where the runs go (default: a temporary folder, removed)")
    args = p.parse_args()
    for item in args.set:
        if "=" not in item or not item.partition("=")[0]:
            p.error(f"--set takes NAME=VALUE, got {item!r}")
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(args.out or scratch)
        for seed in seeds:
            for value in (False, True):
                rows.append(run_one(args, seed, value, root / f"seed{seed}_{args.compare}_{str(value).lower()}"))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress
    print(json.dumps({"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                      "compare": args.compare, "config": args.config, "set": args.set,
                      "frames": args.frames, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
