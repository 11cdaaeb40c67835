"""The prepared device commands (docs/GPU.md, "Device session") in their --dry-run form, so
they still run when a session is finally lent a GPU machine: every phase must end ok."""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from mpi_util import mpiexec_or_skip

REPO = pathlib.Path(__file__).resolve().parent.parent


def run_script(name, out, timeout):
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(REPO / "scripts" / name), str(out), "--dry-run"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_device_check_dry_run(tmp_path):
    run_script("device_check.sh", tmp_path, 400)
    report = json.loads((tmp_path / "report.json").read_text())
    summary = report["summary"]
    bad = {k: v for k, v in summary.items() if k in report["phases"] and v != "ok"}
    assert not bad, (bad, (tmp_path / "check.log").read_text()[-4000:])
    assert summary["gpu_equals_cpu"] is True and summary["gpu_equals_cpu_every_step_asked"] is True
    exact = report["phases"]["exact"]
    assert exact["results"] and all(r["steps"] == exact["max_steps"] and r["state_equal"]
                                    for r in exact["results"].values())
    assert summary["gpu_equals_cpu_min_steps"] == exact["max_steps"]
    # each game's trajectory in segments side by side (test_segments_must_end_where_the_trajectory_went)
    assert all(r["chain_equal"] for r in exact["results"].values())
    assert summary["gpu_equals_cpu_trajectory_steps"] == exact["segments"] * exact["max_steps"] > exact["max_steps"]
    assert summary["hybrid_vs_cpu_plus_gpu"] and all(r > 0 for r in summary["hybrid_vs_cpu_plus_gpu"].values())
    hybrid = report["phases"]["hybrid"]
    assert all(r["steps"] == hybrid["timed_steps"] for r in hybrid["results"])
    streams = report["phases"]["streams"]
    assert [r["runs"] for r in streams["results"]] == [1, 2, 4, 8]
    assert all(r["step_ms"] > 0 and r["one_thread_step_ms"] > 0 for r in streams["results"])
    assert sorted(streams["slowdown_one_thread"]) == ["1", "2", "4", "8"]
    node = report["phases"]["node"]  # hybridsim info --json of the machine
    assert node["host"]["cpus_usable"] == len(os.sched_getaffinity(0)) and "gpu" in node


def test_device_scaling_dry_run(tmp_path):
    pytest.importorskip("mpi4py")
    mpiexec_or_skip()
    run_script("device_scaling.sh", tmp_path, 400)
    report = json.loads((tmp_path / "scaling.json").read_text())
    bad = {k: v for k, v in report["summary"].items() if v != "ok"}
    assert not bad, (bad, (tmp_path / "scaling.log").read_text()[-4000:])
    rows = report["phases"]["weak_scaling"]["rows"]
    assert [r["ranks"] for r in rows] == [1, 2] and all(r["fps"] > 0 for r in rows)
    assert report["phases"]["allreduce_gloo"]["gradient_path"].startswith("gloo")
    assert report["phases"]["allreduce_mpi"]["median_ms"] > 0
    assert report["phases"]["node"]["launcher"]["mpi4py"]


def _exact_phase_driver(out, on_third_breakout_device_step, *args):
    """Python source running gpu_bench's exact phase (dry run, pong and breakout) over fake
    environments: equal outputs everywhere; breakout's device environment does
    `on_third_breakout_device_step` at its third step; pong's fused device environment
    reports a different whole state."""
    return f"""
import importlib.util, time
import numpy as np
import hybridsim
spec = importlib.util.spec_from_file_location("gpu_bench", {str(REPO / "benchmarks" / "gpu_bench.py")!r})
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

class FakeEnv:
    num_envs = 2
    class single_action_space:
        n = 4
    def __init__(self, game, num_envs, backend="cpu", **kw):
        self.game, self.backend, self.t = game, backend, 0
        self.design = kw.get("gpu_options", {{}}).get("design")
    def reset(self, seed=None):
        return np.zeros(2, np.uint8), {{}}
    def get_state(self):
        if self.game == "pong" and self.backend == "gpu" and self.design == "fused":
            return b"differs"  # outputs equal, state not
        return bytes([self.t % 256])  # equal while both sides took the same steps
    def step(self, actions):
        self.t += 1
        if self.game == "breakout" and self.backend == "gpu" and self.t == 3:
            {on_third_breakout_device_step}
        z = np.zeros(2, np.uint8)
        return z, z, z, z, dict(lives=z, frame_number=z, episode_frame_number=z)

hybridsim.AtariVectorEnv = FakeEnv
bench.main(["exact", "--out", {str(out)!r}, "--dry-run", "--games", "pong", "breakout", "--budget", "60",
            *{list(args)!r}])
"""


def test_a_phase_stopped_midway_keeps_the_steps_it_compared(tmp_path):
    """device_check.sh kills a phase at its time limit (a device step far slower than
    planned, an NVRTC compile not cached in time): the steps compared by then are in its
    JSON file, marked partial. Here breakout's device environment hangs at its third step,
    which stops the lockstep for every run, and the process is killed as the shell's
    timeout does."""
    out = tmp_path / "exact.json"
    driver = _exact_phase_driver(out, "time.sleep(600)  # until the kill")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", driver], env=env)
    runs = [f"{g}/{d}" for g in ("pong", "breakout") for d in ("split", "fused", "split_shared")]

    def saved():
        try:
            return json.loads(out.read_text())
        except (OSError, ValueError):
            return None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if saved() and saved()["results"]:
                break
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        proc.kill()  # SIGKILL: no `except` or `finally` in the phase runs
        proc.wait()
    report = saved()
    assert report["status"].startswith("partial") and sorted(report["results"]) == sorted(runs)
    assert all(r["equal"] is True and r["steps"] >= 1 for r in report["results"].values())


def test_designs_phase_times_register_capped_cubins(tmp_path):
    """`designs --register-cubins LABEL=PATH` adds a row per cubin, labelled, after the
    design x block variants (host-emulated here: the path is not loaded)."""
    out = tmp_path / "designs.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_bench.py"), "designs", "--out", str(out),
                    "--dry-run", "--budget", "60", "--max-steps", "3", "--register-cubins",
                    "maxreg128=/nowhere/a.cubin", "maxreg168=/nowhere/b.cubin"],
                   env=env, check=True, capture_output=True, timeout=300)
    rows = json.loads(out.read_text())["results"]
    labelled = [r for r in rows if "cubin" in r]
    assert [r["cubin"] for r in labelled] == ["maxreg128", "maxreg168"]
    assert all(r["steps"] == 3 and "error" not in r for r in labelled)
    assert len(rows) == 10 + 2


def test_an_error_midway_is_not_equal(tmp_path):
    """A device step that raises (a sticky CUDA error) ends its run as not equal, with the
    error, and the phase's all_equal is False, however many steps were equal before."""
    out = tmp_path / "exact.json"
    driver = _exact_phase_driver(out, 'raise RuntimeError("cudaErrorIllegalAddress")', "--exact-steps", "5")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", driver], env=env, check=True, timeout=120)
    report = json.loads(out.read_text())
    bad = report["results"]["breakout/split"]
    assert bad["equal"] is False and "cudaErrorIllegalAddress" in bad["error"] and bad["steps"] == 2
    assert report["results"]["pong/split"] == dict(equal=True, steps=5, ends=0, state_equal=True,
                                                   seconds=bad["seconds"])
    fused = report["results"]["pong/fused"]
    assert fused["equal"] is False and fused["state_equal"] is False and fused["steps"] == 5
    assert fused["first_mismatch"].startswith("whole state at the end")
    assert report["all_equal"] is False


def _load_gpu_bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_bench", REPO / "benchmarks" / "gpu_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_segments_must_end_where_the_trajectory_went(tmp_path, monkeypatch):
    """exact --exact-segments (host-emulated device): each segment starts from the CPU
    trajectory's state and the device must equal the CPU at every step; the CPU's segments
    must also end in the trajectory's next states, else the segments did not replay the
    trajectory (here: each segment's actions one step late, which both sides follow)."""
    bench = _load_gpu_bench()
    out = tmp_path / "exact.json"
    argv = ["exact", "--out", str(out), "--dry-run", "--games", "breakout", "--exact-segments", "3",
            "--exact-steps", "24", "--budget", "120"]
    bench.main(argv)
    report = json.loads(out.read_text())
    assert report["all_equal"] and report["all_steps"] and report["trajectory_steps"] == 24
    assert [r["chain_equal"] for r in report["results"].values()] == [True] * 3
    assert report["envs_per_run"] == 6 and report["max_steps"] == 8

    honest = bench.SegmentedTrajectory.run

    def one_step_late(self, cpu, other, stream):
        run = honest(self, cpu, other, stream)
        return run._replace(actions=lambda t: self.actions[:, max(t - 1, 0)].reshape(-1))
    monkeypatch.setattr(bench.SegmentedTrajectory, "run", one_step_late)
    bench.main(argv)
    report = json.loads(out.read_text())
    assert not report["all_equal"]
    for r in report["results"].values():
        assert r["state_equal"] and r["chain_equal"] is False and r["equal"] is False
        assert "did not end where its trajectory went" in r["first_mismatch"]


def test_the_device_tests_phase_selects_no_emulated_test():
    """device_check's tests phase (its default -k, and -m "not emulated") must leave out
    every test on the host-emulated kernels: those build a library (minutes on a fresh
    machine) inside the phase's limit. -k matches substrings, so new test names such as
    test_emulated_hybrid_rebalance_... matched "balance"; the marker is what keeps them out."""
    import re
    import subprocess
    script = (REPO / "scripts" / "device_check.sh").read_text()
    expr = re.search(r'DEVICE_CHECK_TESTS:-"(.*?)"\}', script, re.S).group(1).replace("\\\n", "")
    assert '-m "not emulated"' in script

    def collect(*selection):
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "test_gpu_device.py", "test_gpu_emulated.py", *selection],
                             cwd=REPO / "tests", capture_output=True, text=True, timeout=120)
        return {line for line in out.stdout.splitlines() if "::" in line}
    chosen, emulated = collect("-k", expr, "-m", "not emulated"), collect("-m", "emulated")
    assert chosen and emulated and not chosen & emulated
    assert any("rebalance_moves" in name for name in emulated)
    assert any("test_balance_split" in name for name in chosen)


def test_carried_extensions_are_used_only_while_built_from_these_sources(tmp_path):
    """prebuild_device.sh stores extension_sources_hash beside its prebuilt extensions;
    device_lib.sh carries them only while that still matches: one built from an older
    pyx/ or core header would import fine and run the old code."""
    for name in ("device_lib.sh", "extension_sources.sh"):
        (tmp_path / "scripts").mkdir(exist_ok=True)
        (tmp_path / "scripts" / name).write_text((REPO / "scripts" / name).read_text())
    for name in ("setup.py", "pyx/_a.pyx", "pyx/engine.h", "cuda/core.h", "cuda/ops.inc", "README.md"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"{name} v1\n")
    (tmp_path / ".gpubuild" / "cp312").mkdir(parents=True)

    def fits():
        script = ('NAME=t DEADLINE=60 source scripts/device_lib.sh "$0"; extension_sources_hash "$PWD"; '
                  'carried_extensions_fit cp312 && echo fits || echo differs')
        result = subprocess.run(["bash", "-c", script, str(tmp_path / "out")], cwd=tmp_path,
                                capture_output=True, text=True, timeout=60, check=True)
        digest, verdict = result.stdout.split()
        return digest, verdict

    digest, verdict = fits()
    assert verdict == "differs" and len(digest) == 64  # no sources.hash yet
    (tmp_path / ".gpubuild" / "cp312" / "sources.hash").write_text(digest + "\n")
    assert fits() == (digest, "fits")
    (tmp_path / "README.md").write_text("edited\n")  # not built from
    assert fits() == (digest, "fits")
    for name in ("setup.py", "pyx/_a.pyx", "pyx/engine.h", "cuda/core.h", "cuda/ops.inc"):
        (tmp_path / name).write_text(f"{name} v2\n")
        changed, verdict = fits()
        assert changed != digest and verdict == "differs", name
        (tmp_path / name).write_text(f"{name} v1\n")
        assert fits() == (digest, "fits")
