"""A full disk (issue 9): training stops after a final checkpoint, says where it went, and
exits with STORAGE_EXIT_CODE; the trajectory files close with every logged row; --resume
continues. Fault-injection tests always run; the ones on a real, small tmpfs need root
(they skip, with the reason, where mounting is not permitted)."""
import errno
import os
import pathlib
import subprocess
import sys
import threading

import h5py
import numpy as np
import pytest

from hybridsim import storage, trajlog
from test_trajlog import fake_step

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ----- small file system (the small_fs fixture is in conftest.py) -------------------
def fill(directory: pathlib.Path, name="filler") -> pathlib.Path:
    """Write zeros into directory/name until the file system refuses any more."""
    path = directory / name
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as fh:
        while block:
            try:
                fh.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                block = block[:len(block) // 2]
    assert storage.free_bytes(directory) < 8192
    return path


# ----- trajectory writer ----------------------------------------------------------------
def write_steps(writer, rng, start, count, rows):
    """Append `count` fake steps; each goes into `rows` once the writer has taken it."""
    for s in range(start, start + count):
        row = fake_step(rng, s, writer.batch_size, writer.num_actions)
        rows.append(row)
        writer.append_step(**row, unix_time=float(s))


def assert_rows(path, rows, plain=True):
    """The file holds exactly `rows` (plain=True: opens without SWMR, i.e. closed cleanly)."""
    opener = (lambda: h5py.File(path, "r")) if plain else (lambda: trajlog.open_trajectory_file(path))
    with opener() as f:
        for name in ("reward_raw", "global_frame", "behavior_logits"):
            np.testing.assert_array_equal(f["steps"][name][()], np.stack([r[name] for r in rows]),
                                          err_msg=name)


def test_failed_flush_keeps_the_file_and_the_rows(tmp_path, monkeypatch):
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(0)
    w = trajlog.TrajectoryWriter(path, batch_size=3, num_actions=4, flush_every=8)
    rows = []
    write_steps(w, rng, 0, 16, rows)  # two good flushes
    real_setitem = h5py.Dataset.__setitem__
    calls = {"n": 0}

    def full_disk(self, key, value):
        calls["n"] += 1
        if calls["n"] > 3:  # part of a flush lands, then the disk is full
            raise ENOSPC
        real_setitem(self, key, value)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", full_disk)
    with pytest.raises(trajlog.TrajectoryWriteError) as err:
        write_steps(w, rng, 16, 8, rows)
    assert err.value.errno == errno.ENOSPC and err.value.disk_full
    assert str(path) in str(err.value) and "No space left on device" in str(err.value)
    assert isinstance(err.value, trajlog.TrajectoryLogError)
    write_steps(w, rng, 24, 20, rows)  # buffered, not flushed, while the write failure stands
    assert_rows(path, rows[:16], plain=False)  # a reader sees the last good flush
    monkeypatch.setattr(h5py.Dataset, "__setitem__", real_setitem)  # space again
    w.close()
    assert_rows(path, rows)  # every row, closed cleanly: opens without SWMR


def test_a_failed_flush_whose_rows_cannot_be_cut_back_says_so(tmp_path, monkeypatch):
    """The error said the file held the rows up to the last good flush while datasets HDF5
    would not shrink again kept the failed flush's length (a file readers refuse)."""
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(2)
    w = trajlog.TrajectoryWriter(path, batch_size=3, num_actions=4, flush_every=8)
    rows = []
    write_steps(w, rng, 0, 8, rows)
    real_setitem, real_resize = h5py.Dataset.__setitem__, h5py.Dataset.resize
    calls = {"n": 0}

    def full_disk(self, key, value):
        calls["n"] += 1
        if calls["n"] > 2:
            raise ENOSPC
        real_setitem(self, key, value)

    def no_shrinking(self, size, axis=None):
        if size < self.shape[0]:
            raise RuntimeError("Unable to extend dataset (no space)")
        real_resize(self, size, axis)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", full_disk)
    monkeypatch.setattr(h5py.Dataset, "resize", no_shrinking)
    with pytest.raises(trajlog.TrajectoryWriteError, match=r"the file holds the rows up to step 8; "
                       r"steps/\w+, steps/\w+, steps/\w+ could not be cut back .* differ in length"):
        write_steps(w, rng, 8, 8, rows)
    monkeypatch.setattr(h5py.Dataset, "__setitem__", real_setitem)
    monkeypatch.setattr(h5py.Dataset, "resize", real_resize)
    w.close()  # the retry writes over the uncut rows
    assert_rows(path, rows)


def test_too_little_free_space_stops_before_writing(tmp_path, monkeypatch):
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(1)
    w = trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, flush_every=4)
    rows = []
    write_steps(w, rng, 0, 4, rows)
    monkeypatch.setattr(storage, "free_bytes", lambda _: 1000)
    with pytest.raises(trajlog.TrajectoryWriteError, match="stopped before writing"):
        write_steps(w, rng, 4, 4, rows)
    assert_rows(path, rows[:4], plain=False)
    monkeypatch.undo()
    w.close()
    assert_rows(path, rows)


def test_a_quota_stops_the_writer_before_writing(tmp_path, monkeypatch):
    """statvfs shows room, the allocation is refused (EDQUOT, as under a user quota): the
    flush stops before HDF5 writes, and the rows go in once there is room again."""
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(3)
    w = trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, flush_every=4)
    rows = []
    write_steps(w, rng, 0, 4, rows)
    asked = []
    monkeypatch.setattr(storage, "_fallocate", lambda fd, nbytes: asked.append(nbytes) or errno.EDQUOT)
    with pytest.raises(trajlog.TrajectoryWriteError, match="a disk quota leaves less.*stopped before "
                                                           "writing, so the file is whole up to step 4") as err:
        write_steps(w, rng, 4, 4, rows)
    assert err.value.errno == errno.EDQUOT and err.value.disk_full and "Disk quota exceeded" in str(err.value)
    assert asked and asked[-1] >= trajlog.DEFAULT_MIN_FREE_BYTES
    assert_rows(path, rows[:4], plain=False)
    monkeypatch.undo()
    w.close()
    assert_rows(path, rows)


@pytest.mark.parametrize("tmpfile", [True, False], ids=["O_TMPFILE", "named-then-removed"])
def test_missing_room_leaves_no_file_behind(tmp_path, monkeypatch, tmpfile):
    """The allocation asked for goes into a file without a name (O_TMPFILE, or one removed
    before anything is allocated where there is no O_TMPFILE), so nothing is left."""
    if not tmpfile:
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    asked = []
    real = storage._fallocate
    if real is None:
        pytest.skip("no fallocate in this C library")
    monkeypatch.setattr(storage, "_fallocate",
                        lambda fd, nbytes: asked.append(os.fstat(fd).st_nlink) or real(fd, nbytes))
    assert storage.missing_room(tmp_path, 1 << 20) is None
    assert asked == [0] and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(storage, "_fallocate", lambda fd, nbytes: errno.EDQUOT)
    code, why = storage.missing_room(tmp_path, 3 << 20)
    assert code == errno.EDQUOT and why.startswith("a disk quota leaves less (allocating them failed; ")
    assert list(tmp_path.iterdir()) == []


def test_missing_room_asks_each_file_system_what_it_can_tell(tmp_path, monkeypatch):
    """EFBIG is the probe file's own size limit, not a full disk: no answer. A file system
    without fallocate is asked once. Room for all writers is asked, of the free space and
    of the allocation (one writer's bytes passed beside another's, and together they met
    the quota inside HDF5)."""
    asked = []

    def fallocate(fd, nbytes):
        asked.append(nbytes)
        return code
    monkeypatch.setattr(storage, "_fallocate", fallocate)
    monkeypatch.setattr(storage, "_without_fallocate", set())
    code = errno.EFBIG
    assert storage.missing_room(tmp_path, 5 << 20) is None and asked == [5 << 20]
    code = errno.EOPNOTSUPP
    assert storage.missing_room(tmp_path, 5 << 20) is None and storage.missing_room(tmp_path, 1) is None
    assert asked == [5 << 20, 5 << 20]  # not asked again on that file system
    monkeypatch.setattr(storage, "_without_fallocate", set())
    code = 0
    monkeypatch.setattr(storage, "free_bytes", lambda where: 20 << 20)
    assert storage.missing_room(tmp_path, 6 << 20, writers=3) is None and asked[-1] == 18 << 20
    assert storage.missing_room(tmp_path, 6 << 20, writers=4) == (errno.ENOSPC, "21.0 MB is free on its file system")


def test_the_master_file_is_not_written_without_room(tmp_path, monkeypatch):
    """write_master asks for room first too: a StorageError naming the master file and EDQUOT."""
    rng = np.random.default_rng(5)
    w = trajlog.TrajectoryWriter(tmp_path / "traj_rank00000.h5", batch_size=2, num_actions=3, flush_every=4)
    write_steps(w, rng, 0, 8, [])
    w.close()
    monkeypatch.setattr(storage, "_fallocate", lambda fd, nbytes: errno.EDQUOT)
    with pytest.raises(storage.StorageError, match="trajectories.h5: writing the virtual master file failed: "
                                                   "Disk quota exceeded .EDQUOT.; it needs up to 4.2 MB") as err:
        trajlog.write_master(tmp_path)
    assert err.value.disk_full and sorted(p.name for p in tmp_path.iterdir()) == ["traj_rank00000.h5"]
    monkeypatch.undo()
    assert trajlog.write_master(tmp_path) == tmp_path / "trajectories.h5"


def fill_quota(directory: pathlib.Path, name="filler") -> pathlib.Path:
    """Write into directory/name until the quota refuses any more (EDQUOT)."""
    path = directory / name
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as fh:
        while len(block) >= 4096:
            try:
                fh.write(block)
                os.fsync(fh.fileno())
            except OSError as exc:
                assert exc.errno == errno.EDQUOT, exc
                block = block[:len(block) // 2]
    assert storage.free_bytes(directory) > 64 << 20  # statvfs does not show the quota
    return path


def test_quota_on_a_real_file_system_stops_the_writer_before_writing(small_quota):
    """A btrfs qgroup: HDF5 writes past the quota fail with EDQUOT (and the process may
    crash when the file is closed, h5py issue 914); the writer stops before them."""
    directory = small_quota("32M")
    path = directory / "traj_rank00000.h5"
    rng = np.random.default_rng(4)
    w = trajlog.TrajectoryWriter(path, batch_size=16, num_actions=6, flush_every=64)
    rows = []
    write_steps(w, rng, 0, 64, rows)
    filler = fill_quota(directory)
    with pytest.raises(trajlog.TrajectoryWriteError, match="a disk quota leaves less.*stopped before writing") as err:
        write_steps(w, rng, 64, 64, rows)
    assert err.value.errno == errno.EDQUOT and str(path) in str(err.value)
    assert_rows(path, rows[:64], plain=False)
    filler.unlink()
    w.close()
    assert_rows(path, rows)


def test_an_output_folder_on_a_read_only_file_system_is_refused_saying_so(small_fs):
    fs = small_fs("1m")
    done = subprocess.run(["mount", "-o", "remount,ro", str(fs)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr.strip()}")
    with pytest.raises(PermissionError, match=r"output .*/out: cannot write into .* \(a read-only file system\)"):
        storage.check_output_directory(fs / "out", "output")


def test_enospc_on_a_real_small_file_system(small_fs):
    """No free-space check: HDF5 itself hits ENOSPC; freeing space lets close() finish."""
    fs = small_fs("2m")
    spare = fs / "spare"
    spare.write_bytes(b"\1" * 400_000)
    path = fs / "traj_rank00000.h5"
    rng = np.random.default_rng(2)
    w = trajlog.TrajectoryWriter(path, batch_size=16, num_actions=6, flush_every=64,
                                 min_free_bytes=None)
    rows = []
    with pytest.raises(trajlog.TrajectoryWriteError) as err:
        for block in range(1000):
            write_steps(w, rng, 64 * block, 64, rows)
    assert err.value.errno == errno.ENOSPC, err.value
    flushed = w.steps_written
    assert flushed > 0 and str(path) in str(err.value)
    with trajlog.open_trajectory_file(path) as f:  # readable, and holds every flushed row
        n = f["steps/reward_raw"].shape[0]
        assert n >= flushed
        np.testing.assert_array_equal(f["steps/reward_raw"][:flushed],
                                      np.stack([r["reward_raw"] for r in rows[:flushed]]))
    spare.unlink()
    w.close()
    assert_rows(path, rows)


# ----- small pieces -----------------------------------------------------------------------
def test_append_file_cuts_a_half_written_line(tmp_path, monkeypatch):
    path = tmp_path / "metrics.csv"
    f = storage.AppendFile(path, "w")
    f.write("a,b\n")
    f.write("1,2\n")

    def half_then_full(fd, data):
        os.write(fd, bytes(data[:2]))
        monkeypatch.setattr(storage.AppendFile, "_write", staticmethod(lambda fd, data: (_ for _ in ()).throw(ENOSPC)))
        return 2

    monkeypatch.setattr(storage.AppendFile, "_write", staticmethod(half_then_full))
    with pytest.raises(storage.StorageError, match="metrics.csv: writing a row failed: No space"):
        f.write("3,4\n")
    assert path.read_text() == "a,b\n1,2\n"
    monkeypatch.undo()
    f.write("5,6\n")
    f.close()
    assert path.read_text() == "a,b\n1,2\n5,6\n"
    path.write_text("a,b\n1,2\n3,")  # cut off by a crash
    g = storage.AppendFile(path, "a")
    g.write("7,8\n")
    g.close()
    assert path.read_text() == "a,b\n1,2\n7,8\n"


def test_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "checkpoint.pt"
    storage.atomic_write(path, lambda fh: fh.write(b"good"))

    def fails(fh):
        fh.write(b"half")
        raise ENOSPC

    with pytest.raises(OSError):
        storage.atomic_write(path, fails)
    assert path.read_bytes() == b"good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_write_errno_reads_h5py_and_torch_errors():
    hdf5 = RuntimeError("Unable to synchronously flush file (file write failed: time = x\n, "
                        "errno = 28, error message = 'No space left on device')")
    assert storage.write_errno(hdf5) == errno.ENOSPC
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")
    except RuntimeError as torch_error:
        assert storage.write_errno(torch_error) == errno.EDQUOT
    assert storage.write_errno(RuntimeError("no errno here")) is None


def test_disk_reserve_holds_and_releases(tmp_path):
    reserve = storage.DiskReserve(tmp_path / ".reserve", 3 << 20)
    reserve.create()
    assert (tmp_path / ".reserve").stat().st_blocks * 512 >= 3 << 20  # allocated, not sparse
    assert reserve.release() == 3 << 20 and not (tmp_path / ".reserve").exists()
    assert reserve.release() == 0


def test_allocate_writes_zeros_where_fallocate_is_not_supported(tmp_path, monkeypatch):
    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    nbytes = (2 << 20) + 12345  # not a whole number of the zeros' blocks
    with open(tmp_path / "f", "wb") as fh:
        storage.allocate(fh.fileno(), nbytes)
    info = (tmp_path / "f").stat()
    assert info.st_size == nbytes and info.st_blocks * 512 >= nbytes  # written, not sparse
    assert (tmp_path / "f").read_bytes() == bytes(nbytes)


# ----- the training loop --------------------------------------------------------------------
torch = pytest.importorskip("torch")
pytest.importorskip("ale_py")
from hybridsim import analyze, cli  # noqa: E402
from hybridsim.train import TrainConfig, Trainer, fallback_checkpoint_name  # noqa: E402

TRAIN = ["train", "--backend", "ale-py", "--num-envs", "4", "--num-minibatches", "2",
         "--num-threads", "1", "--torch-threads", "1", "--log-every", "0", "--noop-max", "5",
         "--log-flush-seconds", "0.1"]


def reserve_of(log_dir):
    return pathlib.Path(log_dir) / ".disk_reserve_rank00000"


def stopped_frames(err: str) -> int:
    return int(err.split("STOPPED at ")[1].split()[0].replace(",", ""))


def check_logs_and_resume(log_dir, frames, budget):
    """After the stop: the files hold every step up to `frames`; --resume finishes."""
    traj = log_dir / "traj_rank00000.h5"
    with h5py.File(traj, "r") as f:  # closed cleanly: no SWMR needed
        logged = f["steps/global_frame"][:, 0]
    assert logged[-1] == frames and (np.diff(logged) == 16).all()  # 4 envs x frame skip 4
    assert (log_dir / "trajectories.h5").is_file()
    summary = analyze.analyze(log_dir, plots=False)
    assert summary["per_rank"]["traj_rank00000.h5"]["steps"] == len(logged)
    state = torch.load(log_dir / "checkpoint.pt", weights_only=False)
    assert state["frames"] == frames
    resumed = Trainer(TrainConfig(game="pong", backend="ale-py", num_envs=4, num_minibatches=2,
                                  num_threads=1, torch_threads=1, log_every=0.0, noop_max=5,
                                  total_frames=budget, log_dir=str(log_dir), resume=True))
    result = resumed.train()
    assert result["stopped"] is None and result["frames"] >= budget
    with h5py.File(traj, "r") as f:
        logged = f["steps/global_frame"][:, 0]
    assert logged[0] == 16 and (np.diff(logged) == 16).all()  # nothing lost, nothing twice
    assert not reserve_of(log_dir).exists()


def test_full_disk_during_trajectory_writes_stops_cleanly(tmp_path, monkeypatch, capsys):
    """Fault injection: HDF5 writes fail with ENOSPC while the disk reserve exists (as on a
    full disk, where deleting the reserve makes room again)."""
    real_setitem = h5py.Dataset.__setitem__
    calls = {"n": 0}

    def full_while_reserved(self, key, value):
        calls["n"] += 1
        if calls["n"] > 12 * 5 and reserve_of(tmp_path).exists():  # after 5 good flushes
            raise ENOSPC
        real_setitem(self, key, value)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", full_while_reserved)
    code = cli.main([*TRAIN, "--total-frames", "100000", "--checkpoint-every", "2000",
                     "--log-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == cli.STORAGE_EXIT_CODE == 4, err
    assert f"{tmp_path}/traj_rank00000.h5: writing trajectory rows failed: No space left on device" in err
    assert f"final checkpoint: {tmp_path}/checkpoint.pt" in err and "--resume" in err
    assert f"free space under {tmp_path}, then run the same command with --resume" in err
    frames = stopped_frames(err)
    assert 5 * 16 <= frames < 100000  # 5 good flushes of at least one step
    monkeypatch.undo()
    check_logs_and_resume(tmp_path, frames, frames + 800)


def test_a_failed_write_that_is_no_full_disk_does_not_ask_for_space(tmp_path, monkeypatch, capsys):
    """An I/O error (a damaged file, a failing device) stops training as a full disk does,
    but the advice is to cure its cause: freeing space would not help."""
    real_setitem = h5py.Dataset.__setitem__
    calls = {"n": 0}

    def failing(self, key, value):
        calls["n"] += 1
        if calls["n"] > 12 * 5:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_setitem(self, key, value)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", failing)
    code = cli.main([*TRAIN, "--total-frames", "100000", "--checkpoint-every", "2000", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == cli.STORAGE_EXIT_CODE, err
    assert "writing trajectory rows failed: Input/output error" in err
    assert "not for want of space: cure its cause (above), then run the same command with --resume" in err
    assert "free space under" not in err


def test_full_disk_for_metrics_and_checkpoint_uses_the_fallback(tmp_path, monkeypatch, capsys):
    log_dir, fallback = tmp_path / "run", tmp_path / "elsewhere"
    real_save = torch.save
    state = {"rows": 0}

    def metrics_full(fd, data):
        state["rows"] += 1
        if state["rows"] > 8:
            raise ENOSPC
        return os.write(fd, data)

    def save_full_in_run(obj, fh, *a, **kw):
        if str(log_dir) in str(getattr(fh, "name", "")) and state["rows"] > 8:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from ENOSPC
        return real_save(obj, fh, *a, **kw)

    monkeypatch.setattr(storage.AppendFile, "_write", staticmethod(metrics_full))
    monkeypatch.setattr(torch, "save", save_full_in_run)
    code = cli.main([*TRAIN, "--total-frames", "100000", "--checkpoint-every", "320",
                     "--log-dir", str(log_dir), "--fallback-dir", str(fallback)])
    out, err = capsys.readouterr()
    assert code == cli.STORAGE_EXIT_CODE, err
    assert f"{log_dir}/metrics.csv: writing a row failed: No space left on device" in err
    moved = fallback / fallback_checkpoint_name(log_dir)
    assert moved.name.startswith("hybridsim-run-")
    assert f"final checkpoint: {moved}" in err and "move it to" in err
    frames = stopped_frames(err)
    assert torch.load(moved, weights_only=False)["frames"] == frames
    previous = torch.load(log_dir / "checkpoint.pt", weights_only=False)["frames"]
    assert 0 < previous < frames  # the last periodic checkpoint survived the failed writes
    assert not list(log_dir.glob("*.tmp"))
    rows = (log_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == 8 and all(r.count(",") == 9 for r in rows)  # whole rows only
    with h5py.File(log_dir / "traj_rank00000.h5", "r") as f:
        assert f["steps/global_frame"][-1, 0] == frames

    # nowhere to put it: the message says so
    monkeypatch.setattr(torch, "save", lambda *a, **k: (_ for _ in ()).throw(ENOSPC))
    state["rows"] = 0
    code = cli.main([*TRAIN, "--total-frames", "100000", "--log-dir", str(tmp_path / "run2"),
                     "--fallback-dir", str(fallback)])
    err = capsys.readouterr().err
    assert code == cli.STORAGE_EXIT_CODE and "final checkpoint: could NOT be written" in err, err


def test_a_fallback_dir_that_cannot_be_used_is_refused_at_start(tmp_path, capsys):
    """--fallback-dir is used only once log_dir is full, the worst time to find it is a file
    or cannot be made: the run is refused at start, naming the option, and leaves nothing."""
    a_file = tmp_path / "metrics.csv"
    a_file.write_text("x")
    for fallback, why in ((a_file, "is a file, not a directory"), (a_file / "sub", "is a file, not a directory"),
                          ("/proc/nope", "cannot make the directory")):
        code = cli.main([*TRAIN, "--total-frames", "64", "--log-dir", str(tmp_path / "run"),
                         "--fallback-dir", str(fallback)])
        err = capsys.readouterr().err
        assert code == 2 and f"--fallback-dir {fallback}: " in err and why in err, err
        assert not (tmp_path / "run").exists()
    code = cli.main([*TRAIN, "--total-frames", "64", "--log-dir", str(tmp_path / "run"),
                     "--fallback-dir", str(tmp_path / "new" / "fallback")])
    assert code == 0 and (tmp_path / "new" / "fallback").is_dir()


def subprocess_env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(pathlib.Path(trajlog.__file__).parent.parent), os.environ.get("PYTHONPATH")])))


def train_until_filled(log_dir, fill_up, obs_stride: str, env) -> tuple[pathlib.Path, str]:
    """The CLI training into log_dir until, after its first checkpoint, fill_up(its parent)
    takes the room left: (the filler file, its stderr) once it exited with STORAGE_EXIT_CODE."""
    import time
    args = [sys.executable, "-m", "hybridsim", *TRAIN, "--total-frames", "100000000",
            "--checkpoint-every", "1600", "--log-every", "0.2", "--log-observations",
            "--obs-stride", obs_stride, "--log-dir", str(log_dir)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not (log_dir / "checkpoint.pt").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    filler = fill_up(log_dir.parent)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == cli.STORAGE_EXIT_CODE, err[-3000:]
    return filler, err


def test_full_disk_on_a_real_tmpfs(small_fs, tmp_path):
    """The CLI in a subprocess on a 64 MB tmpfs that another writer fills mid-run."""
    log_dir = small_fs("64m") / "run"
    env = subprocess_env()
    filler, err = train_until_filled(log_dir, fill, "4", env)  # someone else takes every free byte
    assert "No space left on device" in err and str(log_dir) in err, err[-3000:]
    assert f"final checkpoint: {log_dir}/checkpoint.pt" in err, err[-3000:]
    frames = stopped_frames(err)
    filler.unlink()
    analyzed = subprocess.run([sys.executable, "-m", "hybridsim", "analyze", str(log_dir), "--no-plots"],
                              capture_output=True, text=True, env=env, timeout=120)
    assert analyzed.returncode == 0, analyzed.stderr[-2000:]
    with h5py.File(log_dir / "traj_rank00000.h5", "r") as f:
        # (failed once in ~40 runs on a loaded VM with a last row of 0, not reproduced since:
        # the shape and the run's stderr tell a recurrence's story)
        logged = f["steps/global_frame"]
        assert logged[-1, 0] == frames, (logged.shape, logged[-3:, 0], frames, err[-3000:])
        assert f["observations/frames"].shape[0] > 0
    check_logs_and_resume(log_dir, frames, frames + 800)


def test_quota_reached_mid_run_on_a_real_file_system(small_quota):
    """The CLI in a subprocess writing under a btrfs quota that another file of the same
    user fills mid-run: the trajectory writer stops before HDF5 meets the quota, training
    stops with a final checkpoint and exits with STORAGE_EXIT_CODE, naming EDQUOT and no
    second failure (a second flush after a failed one failed in HDF5: 'slist already
    enabled?'), the logs hold every step, and --resume goes on once there is room."""
    log_dir = small_quota("160M") / "run"
    filler, err = train_until_filled(log_dir, fill_quota, "1", subprocess_env())
    assert "Disk quota exceeded (EDQUOT)" in err and str(log_dir) in err, err[-3000:]
    assert "others not" not in err and "RuntimeError" not in err, err[-3000:]
    for line in err.splitlines():  # (the metrics row or the checkpoint may meet the quota first)
        if "traj_rank00000.h5: writing" in line:
            assert "stopped before writing" in line, err[-3000:]
    assert f"final checkpoint: {log_dir}/checkpoint.pt" in err, err[-3000:]
    frames = stopped_frames(err)
    filler.unlink()
    check_logs_and_resume(log_dir, frames, frames + 800)


def test_full_disk_for_tensorboard_events(tmp_path, monkeypatch, capsys):
    from torch.utils.tensorboard import SummaryWriter
    calls = {"n": 0}
    real_flush = SummaryWriter.flush

    def flush(self):
        calls["n"] += 1
        if calls["n"] > 3:
            raise ENOSPC
        real_flush(self)

    monkeypatch.setattr(SummaryWriter, "flush", flush)
    code = cli.main([*TRAIN, "--total-frames", "100000", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == cli.STORAGE_EXIT_CODE, err
    assert f"{tmp_path}/tensorboard: writing TensorBoard events failed: No space left on device" in err
    assert f"final checkpoint: {tmp_path}/checkpoint.pt" in err


def test_a_full_disk_in_tensorboards_writer_thread_is_reported_once_without_a_traceback(
        tmp_path, monkeypatch, capsys):
    """The writer thread re-raised the error it also hands to the next flush, and Python
    printed that thread's traceback beside train's own report of the full disk."""
    from tensorboard.summary.writer.record_writer import RecordWriter
    calls = {"n": 0}
    real_write = RecordWriter.write

    def write(self, data):
        calls["n"] += 1
        if calls["n"] > 3:
            raise ENOSPC
        real_write(self, data)

    monkeypatch.setattr(RecordWriter, "write", write)
    uncaught = []  # what Python's default hook would print
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    code = cli.main([*TRAIN, "--total-frames", "100000", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == cli.STORAGE_EXIT_CODE, err
    assert f"{tmp_path}/tensorboard: writing TensorBoard events failed: No space left on device" in err
    assert calls["n"] > 3 and uncaught == [], [(u.thread, u.exc_value) for u in uncaught]
    failure = threading.Thread(target=lambda: 1 / 0)  # any other thread's error still reaches it
    failure.start()
    failure.join()
    assert [type(u.exc_value) for u in uncaught] == [ZeroDivisionError]


def test_fallback_checkpoints_of_different_runs_do_not_collide(tmp_path):
    """It was hybridsim-<dir name>-checkpoint.pt: runs/a/run and runs/b/run, stopped by
    a full disk, wrote the same fallback file, the second over the first."""
    a, b = tmp_path / "a" / "run", tmp_path / "b" / "run"
    assert fallback_checkpoint_name(a) != fallback_checkpoint_name(b)
    assert fallback_checkpoint_name(a) == fallback_checkpoint_name(tmp_path / "a" / "." / "run")


def test_atomic_write_names_its_temporary_file_apart(tmp_path):
    """Two writers of one path at once (here two threads) each write their own temporary
    file: a shared NAME.tmp let one rename the other's half-written bytes into place."""
    target = tmp_path / "checkpoint.pt"
    seen, halfway, second_done = [], threading.Event(), threading.Event()

    def second(fh):
        seen.extend(tmp_path.glob("checkpoint.pt*.tmp"))  # both writers' files exist now
        fh.write(b"second")

    def other_writer():
        halfway.wait()
        storage.atomic_write(target, second)
        second_done.set()

    def first(fh):
        fh.write(b"fir")
        halfway.set()
        second_done.wait(30)
        fh.write(b"st")

    thread = threading.Thread(target=other_writer)
    thread.start()
    storage.atomic_write(target, first)
    thread.join()
    assert len(set(seen)) == 2
    assert target.read_bytes() == b"first"  # the later rename wins, each file whole
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("all_full, some_full, advice", [
    (True, True, "free space under RUN, then run the same command with --resume"),
    (False, True, "some writes failed for want of space and others not: free space under RUN and cure "
                  "the other cause (above), then run the same command with --resume"),
    (False, False, "the failed write was not for want of space: cure its cause (above)")])
def test_the_advice_after_a_failed_write_fits_every_rank_s_failure(capsys, all_full, some_full, advice):
    """Rank 0 out of space and rank 1 with an I/O error: the advice was only to cure the
    cause, as if space would not help."""
    cli._report_storage_stop({
        "log_dir": "RUN", "frames": 1600, "final_checkpoint": "RUN/checkpoint.pt", "trajectories_closed": True,
        "storage_report": ["rank 0: RUN/traj_rank00000.h5: writing trajectory rows failed: No space left on device",
                           "rank 1: RUN/traj_rank00001.h5: writing trajectory rows failed: Input/output error"],
        "storage_disk_full": all_full, "storage_some_full": some_full})
    err = capsys.readouterr().err
    assert advice in err, err
    assert err.count("--resume") == 1, err


def test_the_advice_counts_every_failed_write_not_the_first(tmp_path, monkeypatch, capsys):
    """An I/O error first, then a full disk (the final flush): the advice said only to cure
    the cause, as the first failure alone decided."""
    real_setitem = h5py.Dataset.__setitem__
    calls = {"n": 0}

    def eio_then_full(self, key, value):
        calls["n"] += 1
        if calls["n"] == 12 * 5 + 1:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        if calls["n"] > 12 * 5 + 1:
            raise ENOSPC
        real_setitem(self, key, value)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", eio_then_full)
    code = cli.main([*TRAIN, "--total-frames", "100000", "--checkpoint-every", "2000", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == cli.STORAGE_EXIT_CODE, err
    assert "Input/output error" in err and "No space left on device" in err, err
    assert (f"some writes failed for want of space and others not: free space under {tmp_path} and cure the "
            f"other cause (above)") in err, err
