"""benchmarks/scaling_model.py against a step-by-step ring allreduce, and docs/SCALING.md's
table against the script's output."""
import contextlib
import importlib.util
import io
import math
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _model():
    spec = importlib.util.spec_from_file_location("scaling_model", ROOT / "benchmarks" / "scaling_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _simulated_ring_allreduce(values: np.ndarray):
    """Reduce-scatter then all-gather around a ring of P ranks (values: [P, n]), one chunk
    per rank per step, as in Thakur, Rabenseifner and Gropp (2005). Returns every rank's
    result, the number of steps and the bytes one rank sends."""
    p, n = values.shape
    chunks = [np.array_split(row, p) for row in values]
    steps = sent = 0
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(p - 1):
            # every rank sends at once; the receiver adds (reduce-scatter) or copies
            outgoing = [(r, (r - s - (0 if phase == "reduce-scatter" else -1)) % p) for r in range(p)]
            payload = {r: chunks[r][c].copy() for r, c in outgoing}
            for r, c in outgoing:
                dest = (r + 1) % p
                if phase == "reduce-scatter":
                    chunks[dest][c] = chunks[dest][c] + payload[r]
                else:
                    chunks[dest][c] = payload[r]
            sent += payload[0].nbytes
            steps += 1
    return np.array([np.concatenate(c) for c in chunks]), steps, sent


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 9])
def test_ring_time_is_the_simulated_rings_steps_and_bytes(p):
    model = _model()
    values = np.random.default_rng(p).integers(-10**6, 10**6, size=(p, 2520))  # equal chunks, P <= 10
    result, steps, sent = _simulated_ring_allreduce(values)
    np.testing.assert_array_equal(result, np.broadcast_to(values.sum(axis=0), values.shape))
    alpha, bandwidth = 5e-6, 40e9
    n_bytes = values[0].nbytes
    assert math.isclose(model.ring(p, n_bytes, alpha, bandwidth), steps * alpha + sent / bandwidth,
                        rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7, 8, 16, 33])
def test_tree_latency_is_a_reduce_and_a_broadcast_down_a_binary_tree(p):
    """With no bytes, the tree model is the depth of a reduction that halves the active
    ranks each round, then the broadcast back: 2 ceil(log2 P) latencies."""
    active, rounds = p, 0
    while active > 1:
        active, rounds = (active + 1) // 2, rounds + 1
    assert math.isclose(_model().tree(p, 0.0, 5e-6, 40e9), 2 * rounds * 5e-6, abs_tol=1e-15)


def _table(lines):
    return [line.strip() for line in lines if line.strip().startswith("| ") and line.strip()[2:3].isdigit()]


def test_scaling_docs_first_table_is_the_scripts_output(monkeypatch):
    model = _model()
    monkeypatch.setattr(sys, "argv", ["scaling_model.py"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        model.main()
    docs = (ROOT / "docs" / "SCALING.md").read_text()
    section = docs.split("## Weak scaling, one rank per node", 1)[1].split("\n## ", 1)[0]
    assert _table(section.splitlines()) == _table(out.getvalue().splitlines())
