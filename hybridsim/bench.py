"""`hybridsim bench`: speed measurements (see BENCHMARKS.md for recorded results)."""
from __future__ import annotations

import os
import pathlib
import platform

import numpy as np

from hybridsim import cpu
from hybridsim.asm6502 import Assembler

NTSC_CPU_HZ = 1_193_182  # 6507 clock on an NTSC 2600: 3.579545 MHz colour clock / 3


def checksum_program() -> bytes:
    """A 6502 loop adding every byte of pages $10-$EF into a 16-bit sum at $02/$03."""
    asm = Assembler(0x0400)
    asm.op("LDA", "imm", 0)
    asm.op("STA", "zp", 0x00)
    asm.op("STA", "zp", 0x02)
    asm.op("STA", "zp", 0x03)
    asm.op("LDA", "imm", 0x10)
    asm.op("STA", "zp", 0x01)
    asm.op("LDY", "imm", 0)
    asm.label("loop")
    asm.op("CLC")
    asm.op("LDA", "indy", 0x00)
    asm.op("ADC", "zp", 0x02)
    asm.op("STA", "zp", 0x02)
    asm.op("BCC", "rel", "no_carry")
    asm.op("INC", "zp", 0x03)
    asm.label("no_carry")
    asm.op("INY")
    asm.op("BNE", "rel", "loop")
    asm.op("INC", "zp", 0x01)
    asm.op("LDA", "zp", 0x01)
    asm.op("CMP", "imm", 0xF0)
    asm.op("BNE", "rel", "loop")
    asm.label("done")
    asm.op("JMP", "abs", "done")
    return asm.assemble()


def run_checksum_workload(repeats: int = 20, seed: int = 0) -> dict:
    """Run the checksum program `repeats` times on random data; verify each sum."""
    rng = np.random.default_rng(seed)
    program = np.frombuffer(checksum_program(), dtype=np.uint8)
    instructions = cycles = 0
    seconds = 0.0
    for _ in range(repeats):
        memory = rng.integers(0, 256, size=65536, dtype=np.uint8)
        memory[0x0400:0x0400 + program.size] = program
        expected = int(memory[0x1000:0xF000].astype(np.int64).sum()) & 0xFFFF
        run = cpu.run_flat(memory, 0x0400, max_instructions=10_000_000, stop_on_trap=True)
        got = int(memory[2]) | (int(memory[3]) << 8)
        if got != expected:
            raise RuntimeError(f"checksum workload computed ${got:04X}, expected ${expected:04X}")
        instructions += run.instructions
        cycles += run.cycles
        seconds += run.seconds
    return {"workload": "checksum (built in)", "instructions": instructions, "cycles": cycles,
            "seconds": seconds}


def find_functional_test() -> pathlib.Path | None:
    """Klaus Dormann's test image: $HYBRIDSIM_6502_TEST, or ../shared/testdata beside the repo."""
    env = os.environ.get("HYBRIDSIM_6502_TEST")
    candidates = [pathlib.Path(env)] if env else []
    for base in (pathlib.Path.cwd(), pathlib.Path(__file__).resolve().parent.parent):
        for up in (base, *base.parents[:2]):
            candidates.append(up / "shared" / "testdata" / "6502" / "6502_functional_test.bin")
    return next((c for c in candidates if c.is_file()), None)


def run_functional_workload(path: pathlib.Path) -> dict:
    run = cpu.run_functional_test(path)
    if run.pc != cpu.FUNCTIONAL_TEST_SUCCESS:
        raise RuntimeError(f"functional test trapped at ${run.pc:04X}, not at the success "
                           f"trap ${cpu.FUNCTIONAL_TEST_SUCCESS:04X}")
    return {"workload": "Klaus Dormann functional test", "instructions": run.instructions,
            "cycles": run.cycles, "seconds": run.seconds}


def bench_cpu(print_fn=print) -> list[dict]:
    results = []
    path = find_functional_test()
    if path is not None:
        results.append(run_functional_workload(path))
    else:
        print_fn("(Klaus Dormann's functional test not found: set HYBRIDSIM_6502_TEST to use it)")
    results.append(run_checksum_workload())
    print_fn(f"6507 core, one thread, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} logical CPUs")
    print_fn(f"{'workload':32s} {'instructions':>14s} {'seconds':>8s} {'M instr/s':>10s} "
             f"{'emulated MHz':>13s} {'x real 2600':>12s}")
    for r in results:
        mips = r["instructions"] / r["seconds"] / 1e6
        mhz = r["cycles"] / r["seconds"] / 1e6
        r.update(mips=mips, emulated_mhz=mhz, realtime_factor=mhz * 1e6 / NTSC_CPU_HZ)
        print_fn(f"{r['workload']:32s} {r['instructions']:14,d} {r['seconds']:8.3f} {mips:10.1f} "
                 f"{mhz:13.1f} {r['realtime_factor']:12.0f}")
    return results


SINGLE_GAMES = ("pong", "breakout", "space_invaders", "ms_pacman", "seaquest")


def _time_block(env, actions, start: int, count: int) -> float:
    import time
    t0 = time.perf_counter()
    act, game_over, reset = env.act, env.game_over, env.reset_game
    for k in range(start, start + count):
        act(actions[k % len(actions)])
        if game_over():
            reset()
    return time.perf_counter() - t0


def bench_single(make_reference, make_candidate, games=SINGLE_GAMES, frames: int = 20_000,
                 blocks: int = 10, seed: int = 0, print_fn=print,
                 names=("ale-py", "hybridsim")) -> list[dict]:
    """Frames/s of `act` for two ALEInterface implementations, timed alternately in blocks.

    Alternating blocks in one process share the machine's state (caches, clock, load), so
    the ratio is fair even on a noisy machine. Each side plays the same random stream of
    minimal actions with ALE's default settings (frame_skip 1, sticky actions 0.25).
    """
    from hybridsim import roms
    rows = []
    print_fn(f"single environment act(), {frames:,} frames per side, {blocks} alternating blocks")
    print_fn(f"{'game':16s} {names[0] + ' fps':>14s} {names[1] + ' fps':>16s} {'ratio':>7s}")
    for game in games:
        envs = []
        for make in (make_reference, make_candidate):
            env = make()
            env.setInt("random_seed", seed)
            env.loadROM(str(roms.rom_path(game)))
            envs.append(env)
        minimal = [int(getattr(a, "value", a)) for a in envs[0].getMinimalActionSet()]
        rng = np.random.default_rng(seed)
        actions = [minimal[i] for i in rng.integers(len(minimal), size=4096)]
        per_block = max(1, frames // blocks)
        seconds = [0.0, 0.0]
        for b in range(blocks):
            for side in ((0, 1) if b % 2 == 0 else (1, 0)):
                seconds[side] += _time_block(envs[side], actions, b * per_block, per_block)
        fps = [per_block * blocks / s for s in seconds]
        row = {"game": game, "reference_fps": fps[0], "candidate_fps": fps[1],
               "ratio": fps[1] / fps[0]}
        rows.append(row)
        print_fn(f"{game:16s} {fps[0]:14,.0f} {fps[1]:16,.0f} {row['ratio']:7.2f}")
    return rows
