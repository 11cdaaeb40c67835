"""One training job per run directory.

Two jobs writing one --log-dir (a job started twice, a resubmitted job while the first
still runs) would overwrite each other's checkpoint, metrics and trajectory files, and a
fresh run would move a live run's files aside. Rank 0 of `hybridsim train` therefore
holds LOG_DIR/.hybridsim-train.lock while it trains:

- an exclusive flock on it: the kernel drops it when the process dies, and NFS carries it
  to other clients; a second job whose flock fails is refused at once;
- a heartbeat in its text (host, pid, Slurm job, a counter rewritten every
  `beat_seconds`), for file systems whose flock is local to a node (Lustre's localflock)
  or missing: a job that finds the text of another host's holder watches it, and is
  refused if the counter moves within `stale_seconds`, else takes over (that job died
  without releasing: node failure, SIGKILL).

A job that ends, by any path, removes the file; a holder on this host whose process is
gone is known dead at once.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time

LOCK_NAME = ".hybridsim-train.lock"
RECORD_BYTES = 1024  # the record is rewritten in place at this fixed size (no torn length)
BEAT_SECONDS = 10.0
STALE_SECONDS = 60.0


class RunDirectoryBusy(RuntimeError):
    """Another training job is using this run directory; the message says which."""


def _describe(record: dict) -> str:
    parts = [f"host {record.get('host', '?')}", f"pid {record.get('pid', '?')}"]
    if record.get("slurm_job"):
        parts.append(f"Slurm job {record['slurm_job']}")
    if record.get("started"):
        parts.append(f"started {record['started']}")
    return ", ".join(parts)


def _read(fd: int) -> dict | None:
    """The holder's record, None for an empty file, {} for text that does not parse (a
    rewrite seen halfway, or a foreign file): counted as a change while watching."""
    data = os.pread(fd, RECORD_BYTES * 2, 0).strip(b"\0 \n")
    if not data:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _process_gone(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    return False


def _read_fresh(path) -> dict | None:
    """The record as the file server has it now: NFS revalidates cached data when a file
    is opened (close-to-open consistency), not on reads of a descriptor kept open."""
    try:
        fresh = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None  # removed: its holder released it
    try:
        return _read(fresh)
    finally:
        os.close(fresh)


def sees_holder(log_dir, holder: dict, wait_seconds: float = 15.0) -> bool:
    """Whether LOG_DIR here holds the lock record of `holder` (RunLock.holder() of the job
    that took it): False when the same path names another directory on this node (node-local
    storage). An NFS client may remember for a while that a new name did not exist (the
    lookup cache, nfs(5)); listing the directories makes it ask the server again, and
    retrying for `wait_seconds` covers the rest."""
    path = os.path.join(os.fspath(log_dir), LOCK_NAME)
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            record = _read_fresh(path) or {}
        except OSError:
            record = {}
        if record.get("host") == holder.get("host") and record.get("pid") == holder.get("pid"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
        # only when not seen: a thousand ranks listing a big shared parent is a metadata storm
        for directory in (os.path.dirname(os.path.abspath(os.fspath(log_dir))), os.fspath(log_dir)):
            try:
                os.listdir(directory)
            except OSError:
                pass


class RunLock:
    """LOG_DIR/.hybridsim-train.lock, held from acquire() to release()."""

    def __init__(self, log_dir, *, beat_seconds: float = BEAT_SECONDS,
                 stale_seconds: float = STALE_SECONDS, notice=None):
        self.path = os.path.join(os.fspath(log_dir), LOCK_NAME)
        self.beat_seconds = float(beat_seconds)
        self.stale_seconds = float(stale_seconds)
        self.notice = notice or (lambda message: None)
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record: dict = {}

    def _open_locked(self) -> tuple[int, bool]:
        """The file, open and flocked (or on a file system without flock, just open)."""
        import fcntl
        for _ in range(100):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    holder = _read(fd) or {}
                    os.close(fd)
                    raise RunDirectoryBusy(self._busy_message(holder, "it holds the lock")) from None
                return fd, False  # ENOLCK, ENOSYS, EOPNOTSUPP: no flock on this file system
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    return fd, True
            except FileNotFoundError:
                pass
            os.close(fd)  # a holder released (removed) it between our open and flock: again
        raise RunDirectoryBusy(f"{self.path}: could not take the run directory's lock file")

    def acquire(self) -> "RunLock":
        fd, have_flock = self._open_locked()
        try:
            holder = _read(fd)
            if holder is not None:
                self._check_previous(holder, have_flock)
            self._fd = fd
            self._record = {"host": socket.gethostname(), "pid": os.getpid(),
                            "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
                            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "beat": 0}
            self._write()
            # to the file server now: an NFS client may hold written pages for about 30 s
            # (vm.dirty_expire_centisecs), and other ranks look for this record (sees_holder)
            os.fsync(fd)
        except BaseException:
            self._fd = None
            os.close(fd)
            raise
        self._thread = threading.Thread(target=self._beat_loop, name="hybridsim-runlock", daemon=True)
        self._thread.start()
        return self

    def _check_previous(self, holder: dict, have_flock: bool) -> None:
        """A record is left: its job died without releasing, or runs on a node whose
        flock this one does not see. Refuse while its heartbeat moves."""
        if holder.get("host") == socket.gethostname() and (have_flock or _process_gone(holder.get("pid"))):
            # on this host a live holder would hold the flock (or, without flock, its pid)
            self.notice(f"note: {self.path}: a training job that ended without releasing the run "
                        f"directory ({_describe(holder)}) is gone; taking it over")
            return
        deadline = time.monotonic() + self.stale_seconds
        while time.monotonic() < deadline:
            time.sleep(min(1.0, self.beat_seconds / 4))
            now = _read_fresh(self.path)
            if now != holder:
                raise RunDirectoryBusy(self._busy_message(now or holder, "its heartbeat is moving"))
        self.notice(f"note: {self.path}: the training job that held the run directory "
                    f"({_describe(holder)}) wrote no heartbeat for {self.stale_seconds:.0f} s; "
                    f"taking it over")

    def holder(self) -> dict:
        """Who holds the lock (host, pid): what sees_holder looks for elsewhere."""
        return {"host": self._record.get("host"), "pid": self._record.get("pid")}

    def _busy_message(self, holder: dict, how: str) -> str:
        log_dir = os.path.dirname(self.path)
        return (f"{log_dir} is in use by another training job ({_describe(holder)}; {how}): two "
                f"jobs in one run directory would overwrite each other's checkpoint and logs; wait "
                f"for it to end, or choose another --log-dir")

    def _write(self) -> None:
        data = json.dumps(self._record).encode().ljust(RECORD_BYTES)
        os.pwrite(self._fd, data, 0)  # same size every time: blocks already allocated

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.beat_seconds):
            self._record["beat"] += 1
            try:
                self._write()
            except OSError:
                pass  # a failing disk is training's to report; the flock still holds

    def release(self) -> None:
        """Stop the heartbeat and remove the file (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)  # drops the flock
        self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
