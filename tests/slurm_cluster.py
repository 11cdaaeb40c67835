"""A real one-node Slurm cluster for tests: munged, slurmctld and slurmd on this machine.

Everything lives in one temporary directory (key, sockets, state, spool, pid and log
files) and the daemons listen on free ports, so several clusters can run side by side
and nothing touches /etc. Needs root (munged runs as the munge user, jobs run as root)
and Debian's slurm-wlm and munge (scripts/ci_install_system.sh).
"""
from __future__ import annotations

import os
import pathlib
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def find_program(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN_DIRS))


def missing_requirements() -> str | None:
    """Why a cluster cannot start here, or None."""
    missing = [p for p in ("munged", "munge", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")
               if find_program(p) is None]
    if missing:
        return (f"Slurm/munge not installed (missing {', '.join(missing)}); "
                f"run scripts/ci_install_system.sh")
    if os.geteuid() != 0:
        return "a test Slurm cluster needs root (SlurmUser=root, munged as the munge user)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user (the munge package creates it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_pid(path: pathlib.Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class SlurmCluster:
    """Start with start(), stop with stop(); run commands with env=cluster.env."""

    def __init__(self, startup_timeout: float = 60.0):
        self.startup_timeout = startup_timeout
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="hybridsim-slurm-"))
        self.root.chmod(0o755)  # munged (user munge) must reach its own subdirectory
        self.node = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.conf = self.root / "slurm.conf"
        self.munge_dir = self.root / "munge"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for var in [v for v in self.env if v.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_"))]:
            if var != "SLURM_CONF":
                del self.env[var]  # a job's settings would leak into our sbatch calls
        self.env["PATH"] = os.pathsep.join([self.env.get("PATH", ""), *SBIN_DIRS])
        self.pid_files = {"slurmd": self.root / "slurmd.pid", "slurmctld": self.root / "slurmctld.pid",
                          "munged": self.munge_dir / "munged.pid"}
        self.logs = {"slurmctld": self.root / "slurmctld.log", "slurmd": self.root / "slurmd.log",
                     "munged": self.munge_dir / "munged.log"}

    # ----- start ---------------------------------------------------------------------
    def start(self) -> "SlurmCluster":
        try:
            self._start_munged()
            self._write_conf()
            for daemon in ("slurmctld", "slurmd"):
                self._run([find_program(daemon), "-f", str(self.conf)], f"start {daemon}")
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, cmd, what, timeout=30):
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{what} failed ({proc.returncode}): {proc.stderr.strip()}\n"
                               f"{self.daemon_logs()}")
        return proc

    def _start_munged(self):
        munge = pwd.getpwnam("munge")
        # munged wants everyone to reach its socket's directory, and its key private
        self.munge_dir.mkdir(mode=0o755)
        key_dir = self.munge_dir / "key"
        key_dir.mkdir(mode=0o700)
        for path in (self.munge_dir, key_dir):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        key = key_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
        cmd = [find_program("munged"), f"--key-file={key}", f"--socket={self.munge_socket}",
               f"--pid-file={self.pid_files['munged']}", f"--log-file={self.logs['munged']}",
               f"--seed-file={self.munge_dir / 'munged.seed'}"]

        def as_munge():
            os.setgid(munge.pw_gid)
            os.setgroups([])
            os.setuid(munge.pw_uid)

        proc = subprocess.run(cmd, preexec_fn=as_munge, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"munged failed ({proc.returncode}): {proc.stderr.strip()}\n"
                               f"{self.daemon_logs()}")
        cred = self._run([find_program("munge"), "-n", "-S", str(self.munge_socket)], "munge -n")
        subprocess.run([find_program("unmunge"), "-S", str(self.munge_socket)], input=cred.stdout,
                       capture_output=True, text=True, timeout=30, check=True)

    def _write_conf(self):
        for sub in ("state", "spool"):
            (self.root / sub).mkdir()
        r = self.root
        self.conf.write_text(f"""\
ClusterName=hstest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={self.pid_files['slurmctld']}
SlurmdPidFile={self.pid_files['slurmd']}
SlurmctldLogFile={self.logs['slurmctld']}
SlurmdLogFile={self.logs['slurmd']}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def _wait_idle(self):
        self.wait_node_idle(self.startup_timeout, "did not become idle")

    def node_state(self) -> str:
        """sinfo's state of the node (idle, allocated, completing...), or its error."""
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env,
                              capture_output=True, text=True, timeout=30)
        return proc.stdout.strip() if proc.returncode == 0 else f"error: {proc.stderr.strip()}"

    def wait_step_done(self, step: str, timeout: float):
        """Wait for slurmd's "[STEP] done with job" (its slurmstepd has finished)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if f"[{step}] done with job" in self.logs["slurmd"].read_text(errors="replace"):
                return
            time.sleep(0.5)
        raise TimeoutError(f"step {step} not done after {timeout:.0f} s\n{self.daemon_logs()}")

    def wait_node_idle(self, timeout: float, what: str = "is not idle"):
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state()
            if state == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the test Slurm node {what} after {timeout:.0f} s "
                           f"(sinfo says: {state!r})\n"
                           f"{self.daemon_logs()}")

    # ----- use -----------------------------------------------------------------------
    def daemon_logs(self, lines: int = 30) -> str:
        out = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(none)"]
            out.append(f"--- {name} log ({path}) ---\n" + "\n".join(text))
        return "\n".join(out)

    def sbatch(self, script, *args, env=None, cwd=None) -> int:
        job_env = dict(self.env, **(env or {}))
        proc = subprocess.run(["sbatch", "--parsable", *args, str(script)], env=job_env, cwd=cwd,
                              capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch failed: {proc.stderr.strip()}")
        return int(proc.stdout.strip().split(";")[0])

    def job_info(self, job_id) -> dict:
        """`scontrol show job` as a dict ({} once the job has left slurmctld's memory)."""
        proc = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=self.env,
                              capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))

    def wait_job(self, job_id, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                       "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"),
                 timeout: float = 120.0, until=None) -> dict:
        """Poll until the job is in one of `states` (or until() is true); bounded."""
        deadline = time.monotonic() + timeout
        info = {}
        while time.monotonic() < deadline:
            info = self.job_info(job_id)
            if info.get("JobState") in states or (until is not None and until(info)):
                return info
            time.sleep(0.5)
        node = subprocess.run(["sinfo", "-h", "-N", "-o", "%T %E"], env=self.env,
                              capture_output=True, text=True, timeout=30).stdout.strip()
        raise TimeoutError(f"job {job_id} not in {states} after {timeout:.0f} s: "
                           f"{info.get('JobState')} ({info.get('Reason')}); node: {node}\n"
                           f"{self.daemon_logs()}")

    def scontrol(self, *args):
        return self._run(["scontrol", *args], "scontrol " + " ".join(args))

    # ----- stop ----------------------------------------------------------------------
    def _cancel_all_jobs(self, timeout=30.0):
        try:
            proc = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True,
                                  text=True, timeout=10)
            jobs = proc.stdout.split() if proc.returncode == 0 else []
            if not jobs:
                return
            subprocess.run(["scancel", *jobs], env=self.env, capture_output=True, timeout=10)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                proc = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env,
                                      capture_output=True, text=True, timeout=10)
                if proc.returncode != 0 or not proc.stdout.split():
                    return
                time.sleep(0.5)
        except (OSError, subprocess.SubprocessError):
            pass

    def stop(self):
        """Cancel jobs, stop the daemons by their pid files, delete the directory."""
        if self.conf.exists():
            self._cancel_all_jobs()
        for name in ("slurmd", "slurmctld", "munged"):
            pid = _read_pid(self.pid_files[name])
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 15
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
