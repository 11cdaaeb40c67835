"""`hybridsim info`: what this process sees, for checking a node before a job runs on it.

Each section is gathered on its own; one that fails (a library that will not load, a
driver that refuses) is reported with its error instead of ending the report. Nothing
here starts MPI (mpi4py.MPI is not imported: outside a launcher that can hang on some
clusters) or compiles kernels.
"""
from __future__ import annotations

import importlib.metadata
import os
import pathlib
import platform
import socket
import sys
import time

ORACLE_ALE_PY = "0.12.1"  # the ale-py release hybridsim is bit-exact with
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY")
SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_CPUS_PER_TASK",
                   "SLURM_PROCID", "SLURM_LOCALID", "SLURM_GPUS_ON_NODE")
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HYBRIDSIM_GPU_CUBIN", "CUPY_CACHE_DIR", "CUPY_CACHE_IN_MEMORY")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _env(names) -> dict:
    return {k: os.environ[k] for k in names if k in os.environ}


def hybridsim_section() -> dict:
    import hybridsim
    from hybridsim import _core, launchers
    from hybridsim.gpu import hybridsim_cache_dir, kernel_source_hash
    try:
        launch_files = str(launchers.launch_dir())
    except FileNotFoundError as exc:
        launch_files = f"missing: {exc}"
    return {"version": hybridsim.__version__,
            "package": str(pathlib.Path(hybridsim.__file__).parent),
            "core_headers": hybridsim.core_include_dir(),
            "core_source_hash": kernel_source_hash(),
            "openmp": bool(_core.openmp_enabled()),
            "cache": str(hybridsim_cache_dir()),
            "launch_files": launch_files}


def usable_cores() -> set | None:
    """The cores this process may run on (its affinity); None where the OS does not say.
    Under OMP_PROC_BIND, libgomp binds the calling thread to one of them after its first
    parallel region, so there the other threads' cores count too."""
    try:
        cores = set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    if os.environ.get("OMP_PROC_BIND", "false").strip().lower() in ("", "false"):
        return cores
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return cores
    for tid in threads:
        try:
            cores |= os.sched_getaffinity(int(tid))
        except (OSError, ValueError):  # a thread that has ended since the listing
            pass
    return cores


def cores_to_use() -> list[int]:
    """usable_cores, sorted; every core of the machine where the OS does not say."""
    return sorted(usable_cores() or range(os.cpu_count() or 1))


def _rounded(fraction: float | None) -> float | None:
    return None if fraction is None else round(fraction, 2)


def cpu_model() -> str:
    """The processor's name (Linux's /proc/cpuinfo, else what platform knows)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Processor", "cpu model"):  # x86, arm, others
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_section() -> dict:
    from hybridsim import _core
    from hybridsim.vector import resolve_num_threads
    usable = usable_cores()
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": sys.version.split()[0], "executable": sys.executable,
            "cpu_model": cpu_model(), "cpus": os.cpu_count(),
            "cpus_usable": None if usable is None else len(usable),
            # what `train` reads to choose OMP_WAIT_POLICY (cli.py): other work on these CPUs
            "cpus_usable_busy": None if usable is None else _rounded(cpu_busy_fraction(sorted(usable))),
            "default_env_threads": resolve_num_threads(0, 1 << 30),
            "openmp_max_threads": _core.openmp_max_threads(),
            "thread_variables": _env(THREAD_VARIABLES)}


def packages_section() -> dict:
    names = ("numpy", "ale-py", "gymnasium", "h5py", "torch", "mpi4py", "mpich", "openmpi",
             "cupy", "cupy-cuda12x", "cupy-cuda13x", "envpool")
    return {name: _version(name) for name in names}


def roms_section() -> dict:
    from hybridsim import roms
    ale_py = _version("ale-py")
    out = {"ale_py": ale_py, "oracle": ORACLE_ALE_PY}
    if ale_py is not None and ale_py != ORACLE_ALE_PY:
        out["warning"] = (f"ale-py {ale_py} is installed; hybridsim is exact with {ORACLE_ALE_PY} "
                          f"(its ROMs and settings), pip install ale-py=={ORACLE_ALE_PY}")
    where = roms.roms_dir()
    out["dir"] = str(where)
    out["count"] = len(list(where.glob("*.bin")))
    return out


def launcher_section() -> dict:
    """The ranks this process was launched among, and the mpiexecs a launch would take: the
    one first on PATH (the wrapper's default from a checkout) and pip's MPICH installed for
    this Python (the `hybridsim-mpirun` script's default); $MPIEXEC overrides both."""
    import shutil
    from hybridsim import dist, launchers
    return {"ranks_launched": dist.launched_ranks(), "rank": dist.launcher_rank(), "local_rank": dist.local_rank(),
            "single_process": os.environ.get("HYBRIDSIM_SINGLE_PROCESS") == "1",
            "mpi4py": _version("mpi4py"), "mpiexec_on_path": shutil.which("mpiexec"),
            "mpich_mpiexec": launchers.python_mpiexec(), "MPIEXEC": os.environ.get("MPIEXEC"),
            "slurm": _env(SLURM_VARIABLES)}


def torch_section() -> dict:
    import torch
    import torch.distributed
    out = {"version": torch.__version__, "cuda_build": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(),
           "gloo": torch.distributed.is_available() and torch.distributed.is_gloo_available(),
           "nccl": torch.distributed.is_available() and torch.distributed.is_nccl_available()}
    if out["cuda_available"]:
        out["devices"] = [torch.cuda.get_device_name(k) for k in range(torch.cuda.device_count())]
    return out


def _cupy_devices() -> list[dict]:
    """CuPy's view of each visible device (CuPy must see one: gpu.cupy_unavailable_reason())."""
    import cupy
    devices = []
    for k in range(cupy.cuda.runtime.getDeviceCount()):
        props = cupy.cuda.runtime.getDeviceProperties(k)
        name = props["name"]
        devices.append({"id": k, "name": name.decode() if isinstance(name, bytes) else str(name),
                        "compute_capability": f"{props['major']}{props['minor']}",
                        "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
                        "multiprocessors": props["multiProcessorCount"]})
    return devices


def gpu_section() -> dict:
    from hybridsim import gpu
    out = {"variables": _env(GPU_VARIABLES), "kernel_cache": gpu.cupy_cache_dir()}
    reason = gpu.cupy_unavailable_reason()
    if reason:
        out["available"] = False
        out["reason"] = reason
        return out
    import cupy
    out["available"] = True
    out["cupy"] = cupy.__version__
    out["devices"] = _cupy_devices()
    cubin = os.environ.get("HYBRIDSIM_GPU_CUBIN")
    if cubin:
        recorded = pathlib.Path(cubin + ".hash")
        out["cubin_matches_sources"] = (recorded.is_file()
                                        and recorded.read_text().strip() == gpu.kernel_source_hash())
    return out


def cpu_list(cpus) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the form of /proc's Cpus_allowed_list)."""
    runs = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def brief(num_threads: int = 0) -> str:
    """One line per process, for checking where a launcher put each rank (hybridsim-mpirun
    --check): rank, host, the cores it may run on, its threads (the engine's for train's
    --num-threads num_threads), its GPUs."""
    from hybridsim import dist, gpu
    from hybridsim.vector import resolve_num_threads
    rank = dist.launcher_rank()
    ranks = dist.launched_ranks()
    cores = cores_to_use()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    reason = gpu.cupy_unavailable_reason()
    if reason is None:
        names = [d["name"] for d in _cupy_devices()]
        gpus = f"{len(names)} ({', '.join(names)})"
    else:
        gpus = f"none ({reason.split(' (')[0]})"
    return (f"rank {'-' if rank is None else rank}/{ranks} local {dist.local_rank()} "
            f"host {socket.gethostname()} cores {cpu_list(cores)} ({len(cores)}) "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '<unset>')} "
            f"engine threads {resolve_num_threads(num_threads, 1 << 30)} "
            f"CUDA_VISIBLE_DEVICES={'<unset>' if visible is None else visible} GPUs {gpus}")


SECTIONS = {"hybridsim": hybridsim_section, "host": host_section, "packages": packages_section,
            "roms": roms_section, "launcher": launcher_section, "torch": torch_section,
            "gpu": gpu_section}


def collect(sections=None) -> dict:
    """{section: facts}, or {section: {"error": "..."}} for a section that failed."""
    report = {}
    for name in sections or SECTIONS:
        try:
            report[name] = SECTIONS[name]()
        except Exception as exc:  # the report goes on: say what failed and why
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return report


def _plain(value, missing: str = "-") -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return "; ".join(_plain(v) for v in value) or "-"
    return missing if value is None else str(value)


def format_report(report: dict) -> str:
    lines = []
    for section, facts in report.items():
        lines.append(f"[{section}]")
        missing = "not installed" if section == "packages" else "-"
        for key, value in facts.items():
            lines.append(f"  {key:22s} {_plain(value, missing)}")
    return "\n".join(lines)


def _cpu_times() -> dict[int, tuple[int, int]]:
    """CPU index -> (all jiffies, idle + iowait jiffies), from /proc/stat (Linux)."""
    times = {}
    with open("/proc/stat") as fh:
        for line in fh:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
                times[int(name[3:])] = (sum(ticks), ticks[3] + ticks[4])
    return times


def cpu_busy_fraction(cpus, seconds: float = 0.25) -> float | None:
    """How busy `cpus` are, 0 to 1, over the next `seconds` (this process sleeps meanwhile,
    so it is the other processes' share); None where /proc/stat cannot tell."""
    try:
        before = _cpu_times()
        time.sleep(seconds)
        after = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    total = idle = 0
    for cpu in cpus:
        if cpu in before and cpu in after:
            total += after[cpu][0] - before[cpu][0]
            idle += after[cpu][1] - before[cpu][1]
    return None if total <= 0 else 1.0 - idle / total
