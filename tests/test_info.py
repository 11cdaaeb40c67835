"""`hybridsim info`: each fact checked against the library or variable it comes from, in a
child process with a known environment."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np

from hybridsim import gpu, sysinfo
from hybridsim.cli import main

REPO = pathlib.Path(__file__).resolve().parents[1]


def _info_child(extra_env, code):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "PMI_", "OMPI_", "MPI_LOCALRANK", "OMP_"))}
    env.update(extra_env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_info_reports_what_the_process_sees():
    code = ("import json, sys; from hybridsim.cli import main; main(['info', '--json'])\n"
            "print(json.dumps('mpi4py.MPI' in sys.modules))")
    out = _info_child({"OMP_NUM_THREADS": "1", "SLURM_JOB_ID": "4242", "PMI_SIZE": "3",
                       "MPI_LOCALRANKID": "2", "PMI_RANK": "1", "CUPY_CACHE_DIR": "/scratch/cupy",
                       "HYBRIDSIM_CACHE": "/scratch/hs"}, code)
    text, mpi_started = out.rsplit("\n", 2)[:2]
    report = json.loads(text)
    assert json.loads(mpi_started) is False  # info must not start MPI
    assert set(report) == set(sysinfo.SECTIONS)
    assert not [name for name, facts in report.items() if "error" in facts]
    assert report["packages"]["numpy"] == np.__version__
    assert report["hybridsim"]["core_source_hash"] == gpu.kernel_source_hash()
    host = report["host"]
    assert host["cpus_usable"] == len(os.sched_getaffinity(0))
    assert 0 <= host["cpus_usable_busy"] <= 1
    assert host["default_env_threads"] == len(os.sched_getaffinity(0))
    assert host["openmp_max_threads"] == 1 and host["thread_variables"] == {"OMP_NUM_THREADS": "1"}
    import ale_py.roms
    roms = report["roms"]
    assert roms["count"] == len(list(pathlib.Path(ale_py.roms.__file__).parent.glob("*.bin")))
    assert roms["ale_py"] == ale_py.__version__ and "warning" not in roms
    launcher = report["launcher"]
    assert launcher["ranks_launched"] == 3 and launcher["rank"] == 1 and launcher["local_rank"] == 2
    from hybridsim import launchers
    assert launcher["mpich_mpiexec"] == launchers.python_mpiexec() and launcher["MPIEXEC"] is None
    assert launcher["mpiexec_on_path"] == shutil.which("mpiexec")
    # (the child imports hybridsim from the checkout, this process maybe the installed one)
    launch_files = pathlib.Path(report["hybridsim"]["launch_files"])
    assert all((launch_files / name).is_file() for name in launchers.LAUNCH_FILES)
    assert report["gpu"]["kernel_cache"] == "/scratch/cupy" and report["hybridsim"]["cache"] == "/scratch/hs"
    assert launcher["slurm"] == {"SLURM_JOB_ID": "4242"}
    import torch
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["cuda_available"] == torch.cuda.is_available()
    reason = gpu.cupy_unavailable_reason()
    assert report["gpu"]["available"] == (reason is None)
    if reason:
        assert report["gpu"]["reason"] == reason


def test_a_failing_section_is_reported_and_the_rest_goes_on(monkeypatch):
    def broken():
        raise OSError("no such file: /gone/roms")
    monkeypatch.setitem(sysinfo.SECTIONS, "roms", broken)
    report = sysinfo.collect(["hybridsim", "roms", "packages"])
    assert report["roms"] == {"error": "OSError: no such file: /gone/roms"}
    assert report["packages"]["numpy"] == np.__version__
    text = sysinfo.format_report(report)
    assert "[roms]\n  error                  OSError: no such file: /gone/roms" in text


def test_another_ale_py_release_is_flagged(monkeypatch):
    real = sysinfo._version
    monkeypatch.setattr(sysinfo, "_version", lambda d: "0.11.2" if d == "ale-py" else real(d))
    roms = sysinfo.roms_section()
    assert roms["ale_py"] == "0.11.2"
    assert "hybridsim is exact with 0.12.1" in roms["warning"]


def test_info_text_and_section_choice(capsys):
    assert main(["info", "--sections", "host,packages"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[host]\n") and "\n[packages]\n" in out and "[torch]" not in out
    assert f"  numpy                  {np.__version__}\n" in out
    assert main(["info", "--sections", "host,gpus"]) == 2
    assert "--sections: unknown gpus; choose from hybridsim, host," in capsys.readouterr().err
    for empty in ("", ","):  # printed every section
        assert main(["info", "--sections", empty]) == 2
        assert f"--sections {empty!r} names no section" in capsys.readouterr().err


def test_prebuilt_cubin_is_checked_against_the_sources(monkeypatch, tmp_path):
    if gpu.cupy_unavailable_reason():  # the check reads files only: a stand-in CuPy does
        import types
        monkeypatch.setattr(gpu, "cupy_unavailable_reason", lambda: None)
        monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(__version__="stand-in"))
        monkeypatch.setattr(sysinfo, "_cupy_devices", lambda: [])
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"")
    monkeypatch.setenv("HYBRIDSIM_GPU_CUBIN", str(cubin))
    (tmp_path / "k.cubin.hash").write_text(gpu.kernel_source_hash() + "\n")
    assert sysinfo.gpu_section()["cubin_matches_sources"] is True
    (tmp_path / "k.cubin.hash").write_text("0" * 32)
    assert sysinfo.gpu_section()["cubin_matches_sources"] is False


def test_brief_line_names_rank_cores_threads_and_gpus():
    code = "from hybridsim import sysinfo; print(sysinfo.brief())"
    line = _info_child({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
                        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMP_NUM_THREADS": "3",
                        "CUDA_VISIBLE_DEVICES": "2"}, code).strip()
    cores = sorted(os.sched_getaffinity(0))
    assert line.startswith("rank 5/8 local 1 host ")
    assert f" cores {sysinfo.cpu_list(cores)} ({len(cores)}) OMP_NUM_THREADS=3 engine threads {len(cores)} " in line
    assert " CUDA_VISIBLE_DEVICES=2 GPUs " in line
    assert sysinfo.cpu_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8" and sysinfo.cpu_list([3]) == "3"
    assert " engine threads 1 " in sysinfo.brief(1)  # train's --num-threads 1 (hybridsim-mpirun --check)


def test_brief_line_reaches_stdout_in_one_write(monkeypatch):
    """Ranks share the launcher's stdout: the line and its newline must go out in one write,
    or two ranks' lines interleave (seen under PYTHONUNBUFFERED in hybridsim-mpirun --check)."""
    class Recorder:
        def __init__(self):
            self.writes = []

        def write(self, text):
            self.writes.append(text)
            return len(text)

        def flush(self):
            pass

    out = Recorder()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["info", "--brief"]) == 0
    assert len(out.writes) == 1 and out.writes[0].startswith("rank ") and out.writes[0].endswith("\n")
    assert out.writes[0].count("\n") == 1, out.writes
