"""The quick benchmark scripts run end to end with tiny arguments, so a rename in the
package shows here and not when someone reruns a BENCHMARKS.md command (two scripts
crashed on a renamed trajlog function before this test). Figures are not checked: these
are seconds-long runs on a shared machine."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("h5py")
pytest.importorskip("hybridsim.vector", reason="needs the built extensions")
import hybridsim  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
# the scripts import the hybridsim this test imported: a source tree built in place, or the
# installed package (a clean checkout has no extensions in its own hybridsim/)
PACKAGE_PARENT = pathlib.Path(hybridsim.__file__).resolve().parents[1]


def _run(script: str, *args: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_PARENT),
                                                                    os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_trajlog_write_times_both_sides(tmp_path):
    out = _run("trajlog_write.py", "--steps", "64", "--rounds", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "fletcher32 / plain:" in out.stdout


def test_logging_overhead_reaches_its_codec_table(tmp_path):
    out = _run("logging_overhead.py", "--backend", "cpu", "--frames", "640", "--num-envs", "4",
               "--repeats", "1", "--variants", "0,1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "compression of" in out.stdout and "gzip" in out.stdout


def test_async_order_prints_one_json_report(tmp_path):
    out = _run("async_order.py", "--steps", "20", "--rounds", "1", "--train-frames", "640",
               "--num-envs", "4", "--batch", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)  # the trainer's progress lines went to stderr
    assert report["num_envs"] == 4 and report["rounds"] == 1


def test_allreduce_refuses_a_single_rank(tmp_path):
    pytest.importorskip("mpi4py")
    out = _run("allreduce.py", "--repeats", "2", cwd=tmp_path)
    assert out.returncode == 2 and "run it under mpiexec -n 2" in out.stderr, out.stderr
