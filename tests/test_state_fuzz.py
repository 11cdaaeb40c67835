"""Corrupted and crafted states: restoreState / AtariVectorEnv.set_state either refuse them
with a ValueError or the emulator plays on without crashing (cuda/ale_env.h
env_state_check). Each game runs in a subprocess, so a segfault fails the test instead of
killing pytest. The default run samples the corruptions (about a minute on 2 cores);
HS_STATE_FUZZ=full corrupts every byte of the state with 0xFF, 0x00 and a random value,
each case played 100 frames with a reset_game in between (minutes per game). The samples
depend on the game and HS_STATE_FUZZ_SEED (default 0) only; a failure prints its seed."""
import concurrent.futures
import json
import os
import pathlib
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

FULL = os.environ.get("HS_STATE_FUZZ") == "full"
# One game per mapper (and then some): 2K, 4K, F8, F6, F6SC, F8SC, E0, FE, DPC.
GAMES = ["pong", "seaquest", "ms_pacman", "asterix", "road_runner", "darkchambers",
         "elevator_action", "montezuma_revenge", "robotank", "pitfall2"]
VECTOR_GAMES = ["pong", "ms_pacman"] + (["pitfall2", "montezuma_revenge"] if FULL else [])
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _fuzz_rng(game: str, kind: str) -> np.random.Generator:
    """The same samples in every process (str hash() is salted per process)."""
    seed = zlib.crc32(f"{kind}/{game}".encode()) ^ int(os.environ.get("HS_STATE_FUZZ_SEED", "0"))
    print(f"{kind} {game}: seed {seed} (HS_STATE_FUZZ_SEED={os.environ.get('HS_STATE_FUZZ_SEED', '0')})",
          file=sys.stderr, flush=True)
    return np.random.default_rng(seed)


def _spawn(args, timeout):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-X", "faulthandler", __file__, *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


_POOL = None
_RUNS = {}


def _run_worker(*args, timeout):
    """The worker's report; all workers start with the first test, two at a time (the
    test's time stays about a minute on 2 cores)."""
    global _POOL
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1)))
        for game in GAMES:
            _RUNS[("ale", game)] = _POOL.submit(_spawn, ("ale", game), timeout)
        for game in VECTOR_GAMES:
            _RUNS[("vector", game)] = _POOL.submit(_spawn, ("vector", game), timeout)
    future = _RUNS.get(args) or _POOL.submit(_spawn, args, timeout)
    proc = future.result()
    tail = (proc.stdout + proc.stderr)[-3000:]
    seed = next((line for line in proc.stderr.splitlines() if ": seed " in line), "")
    assert proc.returncode == 0, f"worker {args} died (rc {proc.returncode}; {seed}):\n{tail}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----- the worker (a subprocess: python test_state_fuzz.py ale|vector GAME) ---------------

def _patterns(size, rng):
    """Whole-body corruptions: (name, bytes)."""
    out = [("all 0xFF", b"\xff" * size), ("all 0x00", b"\x00" * size),
           ("all random", rng.integers(0, 256, size, dtype=np.uint8).tobytes())]
    return out


def _byte_cases(size, rng, sample):
    """(offset, value) pairs: every byte set to 0xFF, 0x00 and a random value (or a sample)."""
    cases = [(k, v) for k in range(size) for v in (0xFF, 0x00, int(rng.integers(1, 255)))]
    if sample is not None and sample < len(cases):
        idx = rng.choice(len(cases), sample, replace=False)
        cases = [cases[i] for i in sorted(idx)]
    return cases


def _play_ale(a, rng, frames):
    for i in range(frames):
        a.act(int(rng.integers(0, 18)))
        if i % 7 == 0:
            a.getScreenRGB()  # draws lazily emulated frames from their saved start state
    a.reset_game()
    for i in range(frames):
        a.act(int(rng.integers(0, 18)))
        if a.game_over():
            a.reset_game()
    a.getScreenRGB()
    a.getRAM()
    # Whatever the emulator reaches is a state it accepts back.
    a.restoreState(a.cloneState(include_rng=True))


def worker_ale(game):
    from hybridsim.ale import ALEInterface, ALEState
    from hybridsim.roms import rom_path
    rng = _fuzz_rng(game, "ale")
    a = ALEInterface()
    a.setInt("random_seed", 0)
    a.setFloat("repeat_action_probability", 0.25)
    a.loadROM(str(rom_path(game)))
    for _ in range(30):
        a.act(int(rng.integers(0, 18)))
    good = [a.cloneState(include_rng=True).serialize(), a.cloneState().serialize()]
    size = len(_body_probe(a))
    head = len(good[0]) - CRC_BYTES - size
    frames = 50 if FULL else 12
    cases = [("pattern", name, body) for name, body in _patterns(size, rng)]
    for lo in range(0, size, 64):  # 0xFF over one 64-byte window at a time
        cases.append(("window", lo, b"\xff" * min(64, size - lo)))
    for off, val in _byte_cases(size, rng, None if FULL else 400):
        cases.append(("byte", off, bytes([val])))
    tried = refused = played = 0
    for n, (kind, where, patch) in enumerate(cases):
        base = bytearray(good[n % 2])
        if kind == "pattern":
            base[head:head + size] = patch
        else:
            base[head + where:head + where + len(patch)] = patch
        tried += 1
        try:
            a.restoreState(ALEState(_sealed(base), a._md5))
        except ValueError as exc:
            assert "state field" in str(exc), str(exc)
            refused += 1
            continue
        played += 1
        print(f"playing {kind} {where} {patch[:4].hex()}", file=sys.stderr, flush=True)
        _play_ale(a, rng, frames)
    print(json.dumps(dict(game=game, tried=tried, refused=refused, played=played)))


CRC_BYTES = 4  # clone_state's bytes end with a CRC-32 of the rest


def _sealed(state) -> bytes:
    """A crafted state with its CRC-32 made to match: what a forger would send, which the
    field checks must still catch (a damaged one fails the CRC first)."""
    body = bytes(state[:-CRC_BYTES])
    return body + zlib.crc32(body).to_bytes(CRC_BYTES, "little")


def _body_probe(a):
    """The AleEnv body (what follows the header: magic, fingerprint, RNG flag)."""
    return a._require_rom().raw_state()[0]


def worker_vector(game):
    import io
    from hybridsim.vector import STATE_MAGIC, AtariVectorEnv, _digest
    rng = _fuzz_rng(game, "vector")
    e = AtariVectorEnv(game, 2, num_threads=1)
    e.reset(seed=0)
    for _ in range(5):
        e.step(rng.integers(0, e.single_action_space.n, 2))
    good = e.get_state()
    head = len(STATE_MAGIC) + 32
    with np.load(io.BytesIO(good[head + 32:])) as z:
        arrays = {k: z[k] for k in z.files}

    def forged(name, row, patch_at, patch):
        d = {k: v.copy() for k, v in arrays.items()}
        flat = d[name][row].reshape(-1)
        if patch_at is None:
            flat[:] = np.frombuffer(patch, np.uint8)
        else:
            flat[patch_at:patch_at + len(patch)] = np.frombuffer(patch, np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **d)
        p = buf.getvalue()
        return good[:head] + _digest(p) + p

    cases = []
    for name in ("env", "state"):
        size = arrays[name].shape[1]
        for pname, body in _patterns(size, rng):
            cases.append((name, None, body))
        sample = None if FULL else 150
        for off, val in _byte_cases(size, rng, sample):
            cases.append((name, off, bytes([val])))
    steps = 12 if FULL else 6
    tried = refused = played = 0
    for name, off, patch in cases:
        tried += 1
        try:
            e.set_state(forged(name, 0, off, patch))
        except ValueError as exc:
            assert "state field" in str(exc), str(exc)
            refused += 1
            continue
        played += 1
        print(f"playing {name} {off} {patch[:4].hex()}", file=sys.stderr, flush=True)
        for _ in range(steps):
            e.step(rng.integers(0, e.single_action_space.n, 2))
        e.reset()
        for _ in range(steps):
            e.step(rng.integers(0, e.single_action_space.n, 2))
        e.set_state(e.get_state())  # reachable states are accepted back
    e.close()
    print(json.dumps(dict(game=game, tried=tried, refused=refused, played=played)))


# ----- the tests ------------------------------------------------------------------------

@pytest.mark.parametrize("game", GAMES)
def test_corrupted_ale_states_are_refused_or_played(game):
    report = _run_worker("ale", game, timeout=3600 if FULL else 300)
    assert report["tried"] > 0 and report["refused"] > 0


@pytest.mark.parametrize("game", VECTOR_GAMES)
def test_forged_vector_rows_are_refused_or_played(game):
    report = _run_worker("vector", game, timeout=3600 if FULL else 300)
    assert report["tried"] > 0 and report["refused"] > 0


def test_refusal_names_the_field_and_changes_nothing():
    from hybridsim.ale import ALEInterface, ALEState
    from hybridsim.roms import rom_path
    a = ALEInterface()
    a.loadROM(str(rom_path("ms_pacman")))
    for _ in range(10):
        a.act(0)
    before = a.cloneState(include_rng=True).serialize()
    s = bytearray(before)
    head = len(before) - CRC_BYTES - len(_body_probe(a))
    bank = head + 312 + 4  # Console.cart at 312, Cart.bank at +4 (the reviewer's repro)
    s[bank:bank + 2] = b"\xff\xff"
    with pytest.raises(ValueError, match=r"cart\.bank = 65535 out of range 0\.\.1 for an F8 cartridge"):
        a.restoreState(ALEState(_sealed(s), a._md5))
    assert a.cloneState(include_rng=True).serialize() == before
    for _ in range(100):
        a.act(0)


def test_a_damaged_state_is_refused_and_format_2_still_restores():
    """One flipped bit anywhere in a cloned state (header, body or CRC) is refused as damaged,
    leaving the emulator as it was; a value in range (a RAM byte) restored silently before the
    CRC. A format-2 state (no CRC) from an earlier build restores to the same emulator."""
    from hybridsim.ale import ALEInterface, ALEState
    from hybridsim.roms import rom_path
    a = ALEInterface()
    a.loadROM(str(rom_path("ms_pacman")))
    for _ in range(50):
        a.act(3)
    state = a.cloneState(include_rng=True).serialize()
    for _ in range(20):
        a.act(4)
    after = a.cloneState(include_rng=True).serialize()
    rng = np.random.default_rng(1)
    positions = [0, 6, 22, 23, len(state) - CRC_BYTES, len(state) - 1,
                 *rng.integers(0, len(state), 40).tolist()]
    for at in positions:
        damaged = bytearray(state)
        damaged[at] ^= 1 << int(rng.integers(0, 8))
        with pytest.raises(ValueError, match="(damaged|not a state of this emulator build)"):
            a.restoreState(ALEState(bytes(damaged), a._md5))
        assert a.cloneState(include_rng=True).serialize() == after
    ram_byte = len(state) - CRC_BYTES - len(_body_probe(a))  # the body starts with RAM
    damaged = bytearray(state)
    damaged[ram_byte] ^= 0x10
    with pytest.raises(ValueError, match="state is damaged: its CRC-32 does not match"):
        a.restoreState(ALEState(bytes(damaged), a._md5))
    format_2 = b"HSENV2" + state[6:-CRC_BYTES]
    a.restoreState(ALEState(format_2, a._md5))
    assert a.cloneState(include_rng=True).serialize() == state
    assert ALEState(format_2).getFrameNumber() == ALEState(state).getFrameNumber() == 50


@pytest.mark.parametrize("game, offset, value, message", [
    # Console.riot.interval_shift at 152: one of four shifts
    ("pong", 152, struct.pack("<I", 5), r"console\.riot\.interval_shift = 5 is not one of 0, 3, 6 or 10"),
    # Console.cart (312) .dpc_fraction (+192), a double
    ("pitfall2", 312 + 192, struct.pack("<d", float("nan")),
     r"console\.cart\.dpc_fraction = nan out of range \[0, 2\) for a DPC cartridge"),
    ("pitfall2", 312 + 192, struct.pack("<d", -0.5), r"dpc_fraction = -0\.5 out of range \[0, 2\)"),
])
def test_refusals_of_sets_and_reals_say_what_was_wanted(game, offset, value, message):
    """The value printed is the field's, and the wanted set or interval contains no
    value like it (were: 'interval_shift (0, 3, 6 or 10) = 5 out of range 0..10',
    'dpc_fraction = 0 out of range -1..1' for NaN)."""
    from hybridsim.ale import ALEInterface, ALEState
    from hybridsim.roms import rom_path
    a = ALEInterface()
    a.loadROM(str(rom_path(game)))
    for _ in range(100):
        a.act(0)
    s = bytearray(a.cloneState().serialize())
    head = len(s) - CRC_BYTES - len(_body_probe(a))
    s[head + offset:head + offset + len(value)] = value
    with pytest.raises(ValueError, match=message):
        a.restoreState(ALEState(_sealed(s), a._md5))


def test_dpc_fraction_survives_clone_restore_cycles():
    """ALE saves the DPC music clock's fraction as the count (uInt32)(x * 1e8) and restores
    count / 1e8. A clone must restore to exactly that, also where count / 1e8 x 1e8 rounds
    below the count (a plain count / 1e8 in the bytes would lose one there). Equal bytes
    for equal saves: test_api_parity.py (pitfall2)."""
    from hybridsim.ale import ALEInterface, ALEState
    from hybridsim.roms import rom_path
    a = ALEInterface()
    a.loadROM(str(rom_path("pitfall2")))
    for _ in range(100):
        a.act(0)
    s = bytearray(a.cloneState().serialize())
    head = len(s) - CRC_BYTES - len(_body_probe(a))
    at = 312 + 192  # Console.cart (312) .dpc_fraction (+192)

    def ale_restore(x):
        return float(np.uint32(x * 1e8)) / 1e8

    def live():
        return struct.unpack("<d", _body_probe(a)[at:at + 8])[0]

    rng = np.random.default_rng(5)
    values = [k / 1e8 for k in rng.integers(1, 10**8, 2000)] + [0.0, 1e-9, 0.99999999, 1 - 1e-12, 1.0]
    unstable = 0
    for x in values:
        s[head + at:head + at + 8] = struct.pack("<d", x)
        a.restoreState(ALEState(_sealed(s), a._md5))
        assert live() == ale_restore(x), x
        restored = live()
        clone = a.cloneState().serialize()
        a.restoreState(ALEState(clone, a._md5))
        assert live() == ale_restore(restored), x  # what ALE's save and load of it give
        unstable += ale_restore(restored) != restored
    assert unstable > 0  # the values include counts that ALE's own round trip loses


def test_huge_continuous_strengths_snapshot_and_forged_nan_is_refused():
    """step takes any finite radius, and its snapshot must restore (the check refused
    strengths past 1e6); a NaN strength, which step refuses, is refused in a snapshot.
    Paddle deltas saturate, so a huge strength plays the same on every backend."""
    import io
    from hybridsim.vector import STATE_MAGIC, AtariVectorEnv, _digest
    e = AtariVectorEnv("pong", 2, continuous=True, noop_max=0, num_threads=1)
    e.reset(seed=1)
    e.step(np.array([[2e6, 0, 0], [1234.5, 0, 0]], np.float32))
    good = e.get_state()
    e.set_state(good)
    after = e.step(np.array([[3e9, 0, 0], [0.5, 0, 0]], np.float32))[0]
    head = len(STATE_MAGIC) + 32
    with np.load(io.BytesIO(good[head + 32:])) as z:
        arrays = {k: z[k].copy() for k in z.files}
    row = arrays["env"][1]
    at = bytes(row).find(np.float32(1234.5).tobytes())
    assert at >= 0
    row[at:at + 4] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with pytest.raises(ValueError, match="environment 1: state field paddle_a_strength = nan must be finite"):
        e.set_state(good[:head] + _digest(buf.getvalue()) + buf.getvalue())
    e.set_state(good)
    np.testing.assert_array_equal(e.step(np.array([[3e9, 0, 0], [0.5, 0, 0]], np.float32))[0], after)
    e.close()


if __name__ == "__main__":
    kind, game = sys.argv[1], sys.argv[2]
    (worker_ale if kind == "ale" else worker_vector)(game)
