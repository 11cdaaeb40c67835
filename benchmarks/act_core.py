"""The core's act() loop without Python: frames/s, or instructions per frame (callgrind).

    python benchmarks/act_core.py [--games pong,seaquest] [--frames 4000] [--instructions] [--core DIR]

Dumps each game's loaded environment, ROM and bench's action stream (minimal actions,
seed 0) to a temporary folder, compiles benchmarks/act_core.cpp against cuda/ with the
extension's flags, and runs it. --instructions runs 1,000 frames under valgrind's
callgrind and prints instructions per frame (a noise-free measure of the core's work;
needs valgrind). Frames are emulated as ALEInterface.act does without screen reads.
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from hybridsim import ALEInterface, roms  # noqa: E402

FLAGS = ["-O3", "-std=c++17", "-fno-strict-aliasing"]  # as setup.py builds the extensions


def dump(game: str, folder: pathlib.Path) -> None:
    env = ALEInterface()
    env.setInt("random_seed", 0)
    env.loadROM(str(roms.rom_path(game)))
    env_bytes, _, _ = env._require_rom().raw_state()  # the AleEnv struct, as the core holds it
    (folder / f"{game}.state").write_bytes(env_bytes)
    (folder / f"{game}.rom").write_bytes(roms.rom_path(game).read_bytes())
    minimal = [int(getattr(a, "value", a)) for a in env.getMinimalActionSet()]
    rng = np.random.default_rng(0)
    np.array([minimal[i] for i in rng.integers(len(minimal), size=4096)], dtype=np.int32).tofile(
        folder / f"{game}.acts")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default="pong,breakout,space_invaders,ms_pacman,seaquest")
    parser.add_argument("--frames", type=int, default=4000)
    parser.add_argument("--instructions", action="store_true", help="instructions per frame (callgrind)")
    parser.add_argument("--core", default=str(REPO / "cuda"),
                        help="core headers to build against (e.g. another checkout's cuda/, to compare)")
    args = parser.parse_args(argv)
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        sys.exit("act_core: no C++ compiler found (g++ or c++)")
    if args.instructions and shutil.which("valgrind") is None:
        sys.exit("act_core: --instructions needs valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        binary = folder / "act_core"
        subprocess.run([compiler, *FLAGS, "-I", args.core, "-o", str(binary),
                        str(HERE / "act_core.cpp")], check=True)
        for game in args.games.split(","):
            dump(game, folder)
            if args.instructions:
                frames = 1000
                out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.out",
                                      str(binary), str(folder), game, str(frames), "1"],
                                     capture_output=True, text=True, check=True)
                total = int(re.search(r"Collected : (\d+)", out.stderr).group(1))
                print(f"{game:16s} {total / frames:12,.0f} instructions/frame", flush=True)
            else:
                out = subprocess.run([str(binary), str(folder), game, str(args.frames)],
                                     capture_output=True, text=True, check=True)
                print(out.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
