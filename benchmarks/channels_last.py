"""Training frames/s with the networks' CPU convolutions channels-last (models.to_device) or NCHW.

    python benchmarks/channels_last.py [--models impala,nature] [--frames 24000] [--repeats 3]

Each measurement is a fresh process running `hybridsim train --config quickstart --model M
--total-frames F --log-trajectories false` (construction included), the two layouts
alternating so that drift on a shared machine hits them alike. `nchw` forces every
network's weights to stay NCHW; `default` is what hybridsim does (channels-last where
`channels_last_on_cpu` says so).
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(layout: str, model: str, frames: int) -> None:
    sys.path.insert(0, REPO)
    from hybridsim import cli, train
    if layout == "nchw":
        train.to_device = lambda net, device: net.to(device)
    with tempfile.TemporaryDirectory(prefix="hs_cl_") as scratch:
        start = time.perf_counter()
        code = cli.main(["train", "--config", "quickstart", "--model", model, "--total-frames", str(frames),
                         "--log-trajectories", "false", "--log-dir", os.path.join(scratch, "run")])
        seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"train exited {code}")
    print(f"FRAMES_PER_SECOND {frames / seconds:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="impala,nature")
    parser.add_argument("--frames", type=int, default=24_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", nargs=2, metavar=("LAYOUT", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(*args.measure, args.frames)
        return
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for model in args.models.split(","):
        runs = {"nchw": [], "default": []}
        for _ in range(args.repeats):
            for layout in runs:
                out = subprocess.run([sys.executable, __file__, "--measure", layout, model,
                                      "--frames", str(args.frames)], capture_output=True, text=True)
                line = [x for x in out.stdout.splitlines() if x.startswith("FRAMES_PER_SECOND")]
                if out.returncode != 0 or not line:
                    raise SystemExit(f"{model} {layout}: exit {out.returncode}\n{out.stderr[-2000:]}")
                runs[layout].append(float(line[0].split()[1]))
        a, b = (statistics.median(runs[k]) for k in ("nchw", "default"))
        print(f"{model}: nchw {', '.join(f'{x:,.0f}' for x in runs['nchw'])}; default "
              f"{', '.join(f'{x:,.0f}' for x in runs['default'])} frames/s; medians {a:,.0f} / {b:,.0f} "
              f"= {b / a:.2f}")


if __name__ == "__main__":
    main()
