"""One training job per run directory (hybridsim.runlock): a second job is refused with the
first one's host and pid, a dead holder is taken over, and a holder on another node is
told apart by its heartbeat."""
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from hybridsim import runlock
from hybridsim.runlock import LOCK_NAME, RunDirectoryBusy, RunLock


def write_record(path, **record):
    path.write_bytes(json.dumps(record).encode().ljust(runlock.RECORD_BYTES))


def test_a_second_job_is_refused_until_the_first_releases(tmp_path):
    first = RunLock(tmp_path).acquire()
    record = json.loads((tmp_path / LOCK_NAME).read_bytes())
    assert record["host"] == socket.gethostname() and record["pid"] == os.getpid()
    with pytest.raises(RunDirectoryBusy, match=rf"{tmp_path} is in use by another training job "
                                                rf"\(host {socket.gethostname()}, pid {os.getpid()}"):
        RunLock(tmp_path).acquire()
    first.release()
    assert not (tmp_path / LOCK_NAME).exists()
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_NAME).exists()
    assert not (tmp_path / LOCK_NAME).exists()
    first.release()  # idempotent


def test_the_heartbeat_rewrites_the_record(tmp_path):
    with RunLock(tmp_path, beat_seconds=0.05):
        time.sleep(0.4)
        assert json.loads((tmp_path / LOCK_NAME).read_bytes())["beat"] >= 3


def test_a_dead_holder_on_this_host_is_taken_over_at_once(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_record(tmp_path / LOCK_NAME, host=socket.gethostname(), pid=gone.pid, beat=7)
    notes = []
    start = time.monotonic()
    with RunLock(tmp_path, notice=notes.append):
        pass
    assert time.monotonic() - start < 5
    assert len(notes) == 1 and f"pid {gone.pid}" in notes[0] and "is gone; taking it over" in notes[0]


def test_a_holder_on_another_node_is_refused_while_its_heartbeat_moves(tmp_path):
    """Where flock is local to a node, another node's holder shows only by its heartbeat."""
    path = tmp_path / LOCK_NAME
    write_record(path, host="node-elsewhere", pid=1234, slurm_job="991", beat=0)
    stop = threading.Event()

    def beat():
        k = 0
        while not stop.wait(0.1):
            k += 1
            write_record(path, host="node-elsewhere", pid=1234, slurm_job="991", beat=k)
    beater = threading.Thread(target=beat)
    beater.start()
    try:
        with pytest.raises(RunDirectoryBusy, match=r"host node-elsewhere, pid 1234, Slurm job 991; "
                                                   r"its heartbeat is moving"):
            RunLock(tmp_path, beat_seconds=0.2, stale_seconds=3.0).acquire()
    finally:
        stop.set()
        beater.join()
    # the same record, no longer beating: that job died without releasing
    notes = []
    start = time.monotonic()
    with RunLock(tmp_path, beat_seconds=0.2, stale_seconds=1.0, notice=notes.append):
        assert json.loads(path.read_bytes())["host"] == socket.gethostname()
    assert time.monotonic() - start >= 1.0
    assert len(notes) == 1 and "wrote no heartbeat for 1 s; taking it over" in notes[0]


def test_without_flock_a_live_holder_on_this_host_is_watched(tmp_path, monkeypatch):
    """A file system without flock (ENOLCK): a record of a live process on this host is
    judged by its heartbeat like any other."""
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(fcntl, "flock", no_flock)
    holder = RunLock(tmp_path, beat_seconds=0.1).acquire()  # takes it: nothing there
    try:
        with pytest.raises(RunDirectoryBusy, match="its heartbeat is moving"):
            RunLock(tmp_path, beat_seconds=0.1, stale_seconds=3.0).acquire()
    finally:
        holder.release()


def test_sees_holder_tells_the_holders_directory_from_another(tmp_path):
    """Another rank's view of LOG_DIR: the holder's record (host and pid) is there, or the
    path names another directory on that node; a stale record of another job is not it."""
    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    private.mkdir()
    with RunLock(shared) as lock:
        holder = lock.holder()
        assert holder == {"host": socket.gethostname(), "pid": os.getpid()}
        assert runlock.sees_holder(shared, holder, wait_seconds=0)
        start = time.monotonic()
        assert not runlock.sees_holder(private, holder, wait_seconds=0.6)
        assert 0.5 <= time.monotonic() - start < 5  # it retried, then gave up
        (private / LOCK_NAME).write_text(json.dumps({**holder, "pid": holder["pid"] + 1}))
        assert not runlock.sees_holder(private, holder, wait_seconds=0)


def test_train_refuses_a_run_directory_another_train_is_using(tmp_path):
    """Two `hybridsim train` in one --log-dir: the second ends with status 2 and names the
    first; the first trains on, stops with a checkpoint on SIGTERM and releases it."""
    cmd = [sys.executable, "-m", "hybridsim", "train", "--game", "pong", "--backend", "ale-py",
           "--num-envs", "2", "--num-minibatches", "1", "--num-threads", "1", "--torch-threads", "1",
           "--total-frames", "100000000", "--log-dir", str(tmp_path / "run")]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "run" / "metrics.csv").exists() and time.monotonic() < deadline:
            assert first.poll() is None, first.stdout.read()
            time.sleep(0.2)
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"is in use by another training job (host {socket.gethostname()}, pid {first.pid}" \
            in second.stderr, second.stderr
        resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 2 and "is in use by another training job" in resumed.stderr
        assert first.poll() is None
        first.send_signal(signal.SIGTERM)
        out, _ = first.communicate(timeout=120)
        assert first.returncode == 3, out
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    assert not (tmp_path / "run" / LOCK_NAME).exists()
