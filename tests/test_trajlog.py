"""HDF5 trajectory logs: round trip, master virtual datasets, SWMR, kill -9, corrupt files."""
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

from hybridsim import trajlog


def fake_step(rng, step, batch, actions, env_offset=0):
    return dict(
        action=rng.integers(0, actions, batch).astype(np.int16),
        reward_raw=rng.normal(size=batch).astype(np.float32),
        reward_clipped=np.sign(rng.normal(size=batch)).astype(np.float32),
        terminated=rng.random(batch) < 0.05,
        truncated=np.zeros(batch, bool),
        lives=rng.integers(0, 5, batch).astype(np.int16),
        value=rng.normal(size=batch).astype(np.float32),
        env_id=np.arange(env_offset, env_offset + batch, dtype=np.int32),
        episode_id=np.full(batch, step // 10, dtype=np.int64),
        global_frame=np.full(batch, step * 4, dtype=np.int64),
        behavior_logits=rng.normal(size=(batch, actions)).astype(np.float32),
    )


def write_rank(path, steps, batch, actions, seed, env_offset=0, flush_every=8, **kw):
    rng = np.random.default_rng(seed)
    rows = []
    with trajlog.TrajectoryWriter(path, batch_size=batch, num_actions=actions,
                                  attrs={"game": "pong", "config": {"lr": 1e-3}},
                                  flush_every=flush_every, **kw) as w:
        for s in range(steps):
            row = fake_step(rng, s, batch, actions, env_offset)
            rows.append(row)
            w.append_step(**row)
            if s % 10 == 9:
                w.append_episode(env_offset, s // 10, float(s), 10, s * 4 - 36, s * 4)
    return rows


@pytest.mark.parametrize("compression", ["lzf", "gzip", "none"])
def test_round_trip(tmp_path, compression):
    path = tmp_path / "traj_rank00000.h5"
    rows = write_rank(path, 37, 4, 6, seed=1, compression=compression)
    got = trajlog.read_steps(path)
    for name in rows[0]:
        np.testing.assert_array_equal(got[name], np.stack([r[name] for r in rows]), err_msg=name)
    episodes = trajlog.read_episodes(path)
    assert list(episodes["episode_id"]) == [0, 1, 2]
    with trajlog.open_trajectory_file(path) as f:
        assert f.attrs["game"] == "pong"
        assert '"lr"' in f.attrs["config"]


def test_master_stitches_ranks_of_different_sizes(tmp_path):
    rows0 = write_rank(trajlog.rank_file(tmp_path, 0), 20, 3, 5, seed=2, env_offset=0)
    rows1 = write_rank(trajlog.rank_file(tmp_path, 1), 12, 2, 5, seed=3, env_offset=3)
    master = trajlog.write_master(tmp_path)
    steps = trajlog.read_steps(master)
    assert steps["action"].shape == (20, 5)
    np.testing.assert_array_equal(steps["reward_raw"][:, :3], np.stack([r["reward_raw"] for r in rows0]))
    np.testing.assert_array_equal(steps["reward_raw"][:12, 3:], np.stack([r["reward_raw"] for r in rows1]))
    assert (steps["env_id"][12:, 3:] == -1).all()  # rows rank 1 never wrote
    assert np.isnan(steps["value"][12:, 3:]).all()
    episodes = trajlog.read_episodes(master)
    assert list(episodes["env_id"]) == [0, 0, 3]
    from hybridsim import replay  # replay follows an env through the master: rank 1's fill rows are no damage
    with trajlog.open_trajectory_file(master) as f:
        assert [replay._env_history(f, master, env, "a2c")["action"].size for env in (0, 3)] == [20, 12]


def test_reader_follows_a_live_writer_in_swmr_mode(tmp_path):
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(0)
    w = trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, flush_every=4)
    for s in range(8):
        w.append_step(**fake_step(rng, s, 2, 3))
    reader = trajlog.open_trajectory_file(path)
    ds = reader["steps"]["action"]
    assert ds.shape[0] == 8
    for s in range(8, 16):
        w.append_step(**fake_step(rng, s, 2, 3))
    ds.refresh()
    assert ds.shape[0] == 16
    reader.close()
    w.close()


WRITER_SCRIPT = textwrap.dedent("""
    import sys, time, numpy as np
    from hybridsim import trajlog
    w = trajlog.TrajectoryWriter(sys.argv[1], batch_size=4, num_actions=6, flush_every=10)
    step = 0
    while True:
        w.append_step(action=np.full(4, step % 6, np.int16), reward_raw=np.full(4, step, np.float32),
                      reward_clipped=np.zeros(4, np.float32), terminated=np.zeros(4, bool),
                      truncated=np.zeros(4, bool), lives=np.zeros(4, np.int16),
                      value=np.zeros(4, np.float32), env_id=np.arange(4, dtype=np.int32),
                      episode_id=np.zeros(4, np.int64), global_frame=np.full(4, step, np.int64),
                      behavior_logits=np.zeros((4, 6), np.float32))
        step += 1
        if step % 10 == 0:
            print(step, flush=True)
""")


def test_kill_9_leaves_a_readable_file_up_to_the_last_flush(tmp_path):
    path = tmp_path / "traj_rank00000.h5"
    proc = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(path)],
                            stdout=subprocess.PIPE, text=True)
    flushed = 0
    deadline = time.monotonic() + 60
    while flushed < 200 and time.monotonic() < deadline:
        flushed = int(proc.stdout.readline())
    with trajlog.open_trajectory_file(path) as f:  # from another process, while it writes
        assert f.swmr_mode
        ds = f["steps/reward_raw"]
        seen = ds.shape[0]
        # lines already in the pipe may predate `seen`: wait for a step past its next flush
        while flushed < seen + 10 and time.monotonic() < deadline + 60:
            flushed = int(proc.stdout.readline())
        ds.refresh()
        assert ds.shape[0] > seen > 0
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert flushed >= 200
    steps = trajlog.read_steps(path, fields=["reward_raw", "global_frame"])
    n = steps["reward_raw"].shape[0]
    assert n >= flushed - 10  # everything up to the flush before the last print
    np.testing.assert_array_equal(steps["reward_raw"][:, 0], np.arange(n, dtype=np.float32))
    # still marked open for writing: read in SWMR mode, and so is a master file over it
    master = trajlog.write_master(tmp_path)
    with trajlog.open_trajectory_file(master) as f:
        assert f.swmr_mode
    np.testing.assert_array_equal(trajlog.read_steps(master, fields=["reward_raw"])["reward_raw"],
                                  steps["reward_raw"])


def test_a_killed_writers_file_reopens_to_resume_but_a_live_ones_does_not(tmp_path, capsys):
    """HDF5 marks a file open for writing in its superblock and a killed writer never
    unmarks it: resuming clears the mark (as h5clear -s) once the writer's lock is gone, and
    refuses while a live writer holds it."""
    path = tmp_path / "traj_rank00000.h5"
    proc = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(path)],
                            stdout=subprocess.PIPE, text=True)
    flushed = 0
    while flushed < 100:
        flushed = int(proc.stdout.readline())
    # the writer's flock (hybridsim's readers open with locking=False, so not them)
    with pytest.raises(trajlog.TrajectoryLogError,
                       match="another process holds a lock on this file: a running job's") as err:
        trajlog.clear_stale_write_flags(path)
    assert "hybridsim analyze" not in str(err.value) and "open it without locking" in str(err.value)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    last_write = path.stat().st_mtime
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(path, "a", libver="latest")
    idle_before = time.time() - last_write
    w = trajlog.TrajectoryWriter(path, batch_size=4, num_actions=6, resume_after_frame=50,
                                 flush_seconds=0.5)
    w.close()
    assert time.time() - last_write >= 5.9  # waited until idle 2 x 0.5 + 5 s since the last write
    if idle_before < 5.5:  # and said so, rather than sit silent
        assert "waiting until it has been unchanged for 6 s" in capsys.readouterr().err
    frames = trajlog.read_steps(path, fields=["global_frame"])["global_frame"][:, 0]
    np.testing.assert_array_equal(frames, np.arange(51))
    assert not trajlog.clear_stale_write_flags(path)  # closed cleanly: nothing to clear
    # a file another writer keeps changing (on another node, where flock is local) is refused
    import threading
    blob = bytearray(path.read_bytes())
    blob[11] = trajlog.SUPER_SWMR_WRITE_ACCESS | trajlog.SUPER_WRITE_ACCESS
    size = 12 + 4 * blob[9]
    blob[size:size + 4] = trajlog.hdf5_checksum(bytes(blob[:size])).to_bytes(4, "little")
    path.write_bytes(bytes(blob))
    stop = threading.Event()

    def touch():
        while not stop.wait(0.2):
            os.utime(path)
    toucher = threading.Thread(target=touch)
    toucher.start()
    try:
        with pytest.raises(trajlog.TrajectoryLogError, match="still has it open"):
            trajlog.clear_stale_write_flags(path, idle_seconds=2.0)
    finally:
        stop.set()
        toucher.join()


def test_hdf5_checksum_matches_the_library():
    """The superblock checksum as HDF5 writes it, on files of each kind written here; a
    superblock rewritten with a wrong checksum does not open."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for k, kw in enumerate((dict(libver="latest"), dict(libver=("v110", "latest")))):
            path = os.path.join(tmp, f"f{k}.h5")
            with h5py.File(path, "w", **kw) as f:
                f["x"] = np.arange(10)
            head = open(path, "rb").read(64)
            size = 12 + 4 * head[9]
            assert trajlog.hdf5_checksum(head[:size]) == int.from_bytes(head[size:size + 4], "little")
        with open(path, "r+b") as fh:
            fh.seek(size)
            fh.write(((trajlog.hdf5_checksum(head[:size]) + 1) & 0xFFFFFFFF).to_bytes(4, "little"))
        with pytest.raises(OSError):
            h5py.File(path, "r")
    for data in (b"", b"a", bytes(range(12)), bytes(range(13)), bytes(range(44)), bytes(range(48))):
        assert 0 <= trajlog.hdf5_checksum(data) < 2**32
    assert trajlog.hdf5_checksum(b"") == 0xDEADBEEF  # lookup3's value for no input


def test_corrupt_and_foreign_files_give_clear_errors(tmp_path):
    path = tmp_path / "traj_rank00000.h5"
    write_rank(path, 30, 2, 4, seed=5)
    data = path.read_bytes()
    truncated = tmp_path / "traj_rank00001.h5"
    truncated.write_bytes(data[: len(data) // 3])
    with pytest.raises(trajlog.TrajectoryLogError, match="traj_rank00001.h5"):
        trajlog.read_steps(truncated)
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not hdf5 at all" * 100)
    with pytest.raises(trajlog.TrajectoryLogError, match="garbage.h5: not a readable HDF5"):
        trajlog.open_trajectory_file(garbage)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = 1
    with pytest.raises(trajlog.TrajectoryLogError, match="not a hybridsim trajectory log"):
        trajlog.open_trajectory_file(foreign)
    with pytest.raises(trajlog.TrajectoryLogError, match="no such trajectory file"):
        trajlog.open_trajectory_file(tmp_path / "missing.h5")


def test_observations_follow_stride_and_env_subset(tmp_path):
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(3)
    obs_cfg = trajlog.ObservationLogging(shape=(4, 84, 84), stride=5, env_ids=(1,))
    frames = []
    with trajlog.TrajectoryWriter(path, batch_size=3, num_actions=4, observations=obs_cfg) as w:
        for s in range(12):
            obs = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
            w.append_step(**fake_step(rng, s, 3, 4), observation=obs)
            if s % 5 == 0:
                frames.append(obs[1])
    with trajlog.open_trajectory_file(path) as f:
        np.testing.assert_array_equal(f["observations/frames"][()], np.stack(frames))
        assert f["observations/index"][:, 0].tolist() == [0, 5, 10]
        assert (f["observations/index"][:, 1] == 1).all()
        # every dataset is stored as the file says (the index was left uncompressed)
        assert {f[name].compression for name in ("steps/reward_raw", "observations/frames",
                                                 "observations/index")} == {"lzf"}


def test_bad_shapes_are_rejected(tmp_path):
    with trajlog.TrajectoryWriter(tmp_path / "t.h5", batch_size=2, num_actions=3) as w:
        row = fake_step(np.random.default_rng(0), 0, 2, 3)
        row["reward_raw"] = np.zeros(3, np.float32)
        with pytest.raises(ValueError, match=r"reward_raw must have shape \(2,\)"):
            w.append_step(**row)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A rank file of 300 steps and its master file, to damage copies of."""
    run = tmp_path_factory.mktemp("small_run")
    write_rank(trajlog.rank_file(run, 0), 300, 4, 6, seed=7, flush_every=64)
    trajlog.write_master(run)
    return run


def damaged_copy(src, dst, offset, count=256):
    """Copy src to dst with `count` random bytes written over it at `offset`."""
    data = bytearray(src.read_bytes())
    data[offset:offset + count] = np.random.default_rng(offset).bytes(count)
    dst.write_bytes(bytes(data))
    return dst


def damage_header(src, dst, name):
    """Copy src to dst with 16 random bytes inside the object header of `name`: past its
    signature and version (damaged, those fail at once even in SWMR mode), so that its
    checksum fails."""
    with h5py.File(src, "r") as f:
        header = h5py.h5o.get_info(f[name].id).addr
    return damaged_copy(src, dst, header + 16, count=16)


TRY_OPEN = textwrap.dedent("""
    import sys
    from hybridsim import trajlog
    for path in sys.argv[1:]:
        try:
            with trajlog.open_trajectory_file(path) as f:  # and read, as analyze would
                f["steps/action"][()], f["episodes/return"][()]
            print("read", path)
        except trajlog.TrajectoryLogError as exc:
            print(exc)
        except Exception as exc:
            print("unexpected", type(exc).__name__, exc)
""")


def test_files_shorter_than_a_superblock_are_refused_at_once(small_run, tmp_path):
    # 8 and 9 bytes raised IndexError; 12 and 20 read an EOF address of 0 and hung in
    # h5py's SWMR open, so in a subprocess with a time limit
    data = trajlog.rank_file(small_run, 0).read_bytes()
    paths = []
    for size in (0, 5, 8, 9, 12, 20, 30):
        paths.append(tmp_path / f"cut{size}.h5")
        paths[-1].write_bytes(data[:size])
    out = subprocess.run([sys.executable, "-c", TRY_OPEN, *map(str, paths)], capture_output=True,
                         text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert len(lines) == len(paths), out.stdout + out.stderr
    for path, line in zip(paths, lines):
        assert line.startswith(f"{path}: truncated file"), line


@pytest.mark.parametrize("name", ["/", "steps", "steps/action"])
def test_damaged_metadata_fails_at_once_without_swmr_retries(small_run, tmp_path, name):
    """A closed file opens without SWMR, so a failed metadata checksum is an error at once
    (SWMR reads retried it for minutes); a subprocess bounds the time a hang would take."""
    src = trajlog.rank_file(small_run, 0)
    path = damage_header(src, tmp_path / src.name, name)
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", TRY_OPEN, str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.startswith(f"{path}: damaged trajectory file"), out.stdout + out.stderr
    assert time.monotonic() - start < 30


def mark_open_for_writing(path):
    """Set the superblock's SWMR-writer flags, as a killed writer leaves them."""
    blob = bytearray(path.read_bytes())
    blob[11] = trajlog.SUPER_SWMR_WRITE_ACCESS | trajlog.SUPER_WRITE_ACCESS
    size = 12 + 4 * blob[9]
    blob[size:size + 4] = trajlog.hdf5_checksum(bytes(blob[:size])).to_bytes(4, "little")
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize("name", ["steps", "steps/action"])
def test_damaged_metadata_of_a_killed_writers_file_fails_in_seconds(small_run, tmp_path, name):
    """A file still marked open for writing must be read in SWMR mode, where HDF5 retries a
    failed metadata checksum with doubling waits: with its default attempts this open had
    not failed after 10 minutes (HDF5 2.0). The attempts are bounded: an error in seconds."""
    src = trajlog.rank_file(small_run, 0)
    marked = tmp_path / "marked" / src.name
    marked.parent.mkdir()
    marked.write_bytes(src.read_bytes())
    mark_open_for_writing(marked)
    with trajlog.open_trajectory_file(marked) as f:  # undamaged: read as before, in SWMR mode
        assert f.swmr_mode and f.mode == "r"
        assert f["steps/action"].shape == h5py.File(src, "r")["steps/action"].shape
    path = damage_header(src, tmp_path / src.name, name)
    mark_open_for_writing(path)
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", TRY_OPEN, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith(f"{path}: damaged trajectory file"), out.stdout + out.stderr
    assert "after all read attempts" in out.stdout
    assert time.monotonic() - start < 30


def test_damage_found_at_open_or_on_a_read_names_the_file(small_run, tmp_path):
    src = trajlog.rank_file(small_run, 0)
    # offset 48: the root group's object header ("Can't deserialize object header prefix")
    root = damaged_copy(src, tmp_path / "root.h5", 48)
    with pytest.raises(trajlog.TrajectoryLogError,
                       match=re.escape(f"{root}: damaged trajectory file")):
        trajlog.open_trajectory_file(root)
    # a damaged chunk is only read lazily, inside the caller's with block
    with h5py.File(src, "r") as f:
        chunk = f["steps/action"].id.get_chunk_info(0).byte_offset
    data = damaged_copy(src, tmp_path / "data.h5", chunk, count=64)
    with pytest.raises(trajlog.TrajectoryLogError,
                       match=re.escape(f"{data}: damaged trajectory file")):
        trajlog.read_steps(data, fields=["action"])
    with pytest.raises(OSError, match="not ours"):  # the caller's own errors pass unchanged
        with trajlog.open_trajectory_file(src):
            raise OSError("not ours")


def test_master_file_needs_its_rank_files(small_run, tmp_path):
    master = small_run / trajlog.MASTER_FILE
    np.testing.assert_array_equal(trajlog.read_episodes(master)["return"],
                                  trajlog.read_episodes(trajlog.rank_file(small_run, 0))["return"])
    alone = tmp_path / trajlog.MASTER_FILE
    alone.write_bytes(master.read_bytes())
    # plain h5py reads fill values where the rank file is missing, never a plausible episode
    with h5py.File(alone, "r") as f:
        assert (f["episodes/env_id"][()] == -1).all() and np.isnan(f["episodes/return"][()]).all()
        assert (f["episodes/length"][()] == -1).all() and (f["steps/env_id"][()] == -1).all()
    with pytest.raises(trajlog.TrajectoryLogError,
                       match=re.escape(f"{alone}: its rank file traj_rank00000.h5 is missing")):
        trajlog.read_episodes(alone)
    damage_header(trajlog.rank_file(small_run, 0), trajlog.rank_file(tmp_path, 0), "steps/action")
    with pytest.raises(trajlog.TrajectoryLogError,
                       match=re.escape(f"{alone}: reads ") + ".*traj_rank00000.h5: damaged"):
        trajlog.read_episodes(alone)


def _rows(path, steps, batch=2, actions=3, **kw):
    """A closed rank file of `steps` rows (global_frame = 4 x step)."""
    rng = np.random.default_rng(0)
    with trajlog.TrajectoryWriter(path, batch_size=batch, num_actions=actions, **kw) as w:
        for s in range(steps):
            w.append_step(**fake_step(rng, s, batch, actions))


def test_a_resume_records_lost_rows_as_a_gap_and_restarts(tmp_path, capsys):
    """A checkpoint that counted more rows than reached the file (a kill before a flush):
    the resume says so and records the gap, and a resume whose environments restart from
    their seeds records that frame; replay reads both."""
    path = tmp_path / "traj_rank00000.h5"
    _rows(path, 10)  # frames 0 .. 36
    w = trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=60,
                                 resume_expected_rows=16, resume_restarts_envs=True)
    w.close()
    assert "6 step rows after frame 36" in capsys.readouterr().err
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "gaps") == [[36, 60]]
        assert trajlog.json_list_attr(f, "restarts") == [60]
    # every row reached the file: no gap; restarts accumulate
    w = trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=36,
                                 resume_expected_rows=10, resume_restarts_envs=True)
    w.close()
    assert capsys.readouterr().err == ""
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "gaps") == [[36, 60]]
        assert trajlog.json_list_attr(f, "restarts") == [60, 36]


def test_a_file_without_rows_resumes(tmp_path):
    """A job killed after its first checkpoint but before its first flush left a file with
    no step rows; the resume continues it instead of failing on the empty table."""
    path = tmp_path / "traj_rank00000.h5"
    _rows(path, 0)
    rng = np.random.default_rng(1)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=1000) as w:
        w.append_step(**fake_step(rng, 300, 2, 3))
    assert trajlog.read_steps(path, fields=["global_frame"])["global_frame"][:, 0].tolist() == [1200]


def test_a_resume_may_start_logging_observations_but_not_change_their_stride(tmp_path):
    path = tmp_path / "traj_rank00000.h5"
    _rows(path, 4)
    rng = np.random.default_rng(2)
    obs_cfg = trajlog.ObservationLogging(shape=(2, 3), stride=2, env_ids=(0,))
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=12,
                                  observations=obs_cfg) as w:
        for s in range(4, 8):
            w.append_step(**fake_step(rng, s, 2, 3), observation=np.full((2, 2, 3), s, np.uint8))
    with trajlog.open_trajectory_file(path) as f:
        assert f["observations"].attrs["stride"] == 2
        assert f["observations/index"][:, 0].tolist() == [4, 6]
    other = trajlog.ObservationLogging(shape=(2, 3), stride=5, env_ids=(0,))
    with pytest.raises(trajlog.TrajectoryLogError, match="every 2 steps, this run every 5"):
        trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=28, observations=other)
    assert trajlog.read_steps(path, fields=["global_frame"])["global_frame"].shape[0] == 8  # untouched


def test_a_foreign_file_is_refused_on_resume(tmp_path):
    path = tmp_path / "traj_rank00000.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(trajlog.TrajectoryLogError, match="not a hybridsim trajectory log"):
        trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=10)
    with h5py.File(path, "r") as f:  # closed again: another process may open it
        assert list(f) == ["x"]


def test_datasets_of_unequal_length_are_named(tmp_path):
    """A closed file whose datasets in a group disagree on their rows is damaged: the
    readers say which, instead of an IndexError or a short, silently wrong answer."""
    path = tmp_path / "traj_rank00000.h5"
    _rows(path, 12)
    with h5py.File(path, "r+") as f:
        f["steps/env_id"].resize(5, axis=0)
    with pytest.raises(trajlog.TrajectoryLogError, match=r"steps datasets differ in length \(action 12, .*env_id 5"):
        trajlog.read_steps(path)
    # a resume refuses it when cutting would lose rows its checkpoint counted (they were
    # flushed before it was written, so the file held them: damage); it used to cut them
    before = path.read_bytes()
    with pytest.raises(trajlog.TrajectoryLogError, match=r"steps datasets differ in length"):
        trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=1000,
                                 resume_expected_rows=12)
    assert path.read_bytes() == before
    # rows past the checkpoint's (a kill inside a later flush): cut to the rows all of them hold
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=1000,
                                  resume_expected_rows=5):
        pass
    assert trajlog.read_steps(path)["action"].shape[0] == 5


def test_a_master_over_rank_files_a_resume_cut_is_named_stale(tmp_path):
    """A resume drops the rows after the checkpoint's frame from each rank file; a master
    written before then maps rows that are gone: readers say it is stale and how to
    rewrite it, instead of an HDF5 dataspace error."""
    write_rank(trajlog.rank_file(tmp_path, 0), 20, 3, 5, seed=2)
    master = trajlog.write_master(tmp_path)
    with trajlog.TrajectoryWriter(trajlog.rank_file(tmp_path, 0), batch_size=3, num_actions=5,
                                  resume_after_frame=40):
        pass
    with pytest.raises(trajlog.TrajectoryLogError, match="stale: traj_rank00000.h5 now holds 11 step"):
        trajlog.read_steps(master)
    trajlog.write_master(tmp_path)
    assert trajlog.read_steps(master)["action"].shape == (11, 3)


READER_SCRIPT = textwrap.dedent("""
    import sys, time
    from hybridsim import trajlog
    with trajlog.open_trajectory_file(sys.argv[1]) as f:
        print(f["steps/action"].shape[0], flush=True)
        time.sleep(60)
""")


def test_a_reader_does_not_keep_a_resume_out(tmp_path):
    """HDF5's reader lock made a resuming writer's open fail ('unable to lock file') while
    anyone (a notebook, a monitoring script) had the run's file open."""
    path = tmp_path / "traj_rank00000.h5"
    write_rank(path, 30, 2, 3, seed=4)
    reader = subprocess.Popen([sys.executable, "-c", READER_SCRIPT, str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "30"
        with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=40) as w:
            w.append_step(**fake_step(np.random.default_rng(0), 11, 2, 3))
        assert reader.poll() is None  # still reading
    finally:
        reader.kill()
        reader.wait()
    assert trajlog.read_steps(path, "global_frame")["global_frame"][:, 0].tolist() == \
        [4 * s for s in range(11)] + [44]


def test_a_refused_resume_leaves_the_file_as_it_was(tmp_path, capsys):
    """The stride (or shape) check ran after the resume had recorded a gap and a restart
    and cut the rows after the checkpoint: a refused resume lost those rows, left
    observations pointing at deleted steps and warned of a gap that never happened."""
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(3)
    obs_cfg = trajlog.ObservationLogging(shape=(2, 3), stride=2, env_ids=(0,))
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, observations=obs_cfg) as w:
        for s in range(10):  # frames 0 .. 36, episodes every 10 steps
            w.append_step(**fake_step(rng, s, 2, 3), observation=np.full((2, 2, 3), s, np.uint8))
            w.append_episode(0, s, 1.0, 4, 4 * s, 4 * s)
    before = path.read_bytes()
    capsys.readouterr()
    for other, message in ((trajlog.ObservationLogging(shape=(2, 3), stride=5, env_ids=(0,)),
                            "every 2 steps, this run every 5"),
                           (trajlog.ObservationLogging(shape=(3, 3), stride=2, env_ids=(0,)),
                            r"of shape \(2, 3\), this run \(3, 3\)")):
        with pytest.raises(trajlog.TrajectoryLogError, match=message):
            trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=16,
                                     resume_expected_rows=12, resume_restarts_envs=True,
                                     observations=other)
        assert capsys.readouterr().err == ""  # no gap warning for a resume that did not happen
        with trajlog.open_trajectory_file(path) as f:
            assert f["steps/action"].shape[0] == 10 and f["episodes/env_id"].shape[0] == 10
            assert f["observations/index"].shape[0] == 5
            assert "gaps" not in f.attrs and "restarts" not in f.attrs
    with h5py.File(path, "r", locking=False) as f, h5py.File(io.BytesIO(before), "r") as g:
        for name in ("steps/global_frame", "episodes/end_frame", "observations/index"):
            np.testing.assert_array_equal(f[name][()], g[name][()])


def _flip_chunk_byte(path, dataset, row):
    """Flip a byte in the middle of the stored chunk holding `row` of `dataset`."""
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        info = ds.id.get_chunk_info_by_coord((row // ds.chunks[0] * ds.chunks[0],) + (0,) * (ds.ndim - 1))
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)[0]
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(bytes([byte ^ 0xFF]))


@pytest.mark.parametrize("dataset, row, refused", [
    ("steps/action", 992, True),  # the block the cut ends in: rewritten by the cut and the appends
    ("steps/behavior_logits", 992, True),
    ("episodes/return", 992, True),
    ("steps/action", 0, False),  # a block before the cut: never rewritten
    ("episodes/return", 1100, False),  # a block past the cut: dropped unread
    ("observations/frames", 599, False),  # the last observation, past the cut (one per block)
])
def test_a_damaged_block_a_resume_would_rewrite_is_refused(tmp_path, dataset, row, refused):
    """HDF5 rewrites a partly filled chunk whole: a resume into a file whose chunk at the
    cut failed its checksum (a kill during a write) passed every check, then failed at the
    cut (having changed the file) or at its first flush mid-run ("filter returned failure
    during read"). A damaged block the resume does not rewrite must not refuse it."""
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(4)
    obs = trajlog.ObservationLogging(shape=(2, 3), stride=2, env_ids=(0,))
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, observations=obs) as w:
        for s in range(1200):  # frames 0, 4, ...; an episode ends at every step
            w.append_step(**fake_step(rng, s, 2, 3), observation=np.full((2, 2, 3), s % 251, np.uint8))
            w.append_episode(0, s, 1.0, 1, 4 * s, 4 * s)
    with h5py.File(path, "r") as f:
        assert f[dataset].shape[0] > row
        chunk = f[dataset].chunks[0]
    _flip_chunk_byte(path, dataset, row)
    before = path.read_bytes()
    resume = dict(batch_size=2, num_actions=3, observations=obs, resume_after_frame=4 * 992,
                  resume_expected_rows=993)
    if refused:
        with pytest.raises(trajlog.TrajectoryLogError, match=f"damaged trajectory file: /{dataset} rows "
                                                             f"{992 // chunk * chunk}-"):
            trajlog.TrajectoryWriter(path, **resume)
        assert path.read_bytes() == before
    else:
        trajlog.TrajectoryWriter(path, **resume).close()
        with h5py.File(path, "r") as f:
            assert f["steps/action"].shape[0] == 993 and f["episodes/return"].shape[0] == 993


def test_a_failed_master_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """A full disk while writing the master: the error stands and trajectories.h5.tmp is
    removed (it was left behind for the next resume to trip over)."""
    write_rank(trajlog.rank_file(tmp_path, 0), steps=10, batch=2, actions=3, seed=0)
    real = trajlog._write_master_file

    def full_disk(tmp, *args):
        real(tmp, *args)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trajlog, "_write_master_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        trajlog.write_master(tmp_path)
    assert not (tmp_path / (trajlog.MASTER_FILE + ".tmp")).exists()
    assert not (tmp_path / trajlog.MASTER_FILE).exists()


def test_a_resume_after_frames_that_were_not_logged_records_a_gap(tmp_path, capsys):
    """A job resumed with --log-trajectories false, then one with logging on: the file's
    rows stopped at the first job's frame and went on at the third's, with no `gaps`, so
    replay blamed the emulator (MISMATCH) and analyze missed the episodes silently. The
    checkpoint of a job that did not log counts no rows (None)."""
    path = tmp_path / "traj_rank00000.h5"
    _rows(path, 10)  # frames 0 .. 36, 4 a row
    trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=36).close()
    assert capsys.readouterr().err == ""  # the rows reach the resume frame: nothing missing
    trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=100).close()
    assert "holds steps up to frame 36 only, and this run resumes at frame 100" in capsys.readouterr().err
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "gaps") == [[36, 100]]
        assert trajlog.json_list_attr(f, "resumes") == [36, 100]
    # a checkpoint that counted the rows: they are all there, nothing more to record
    trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=36,
                             resume_expected_rows=10).close()
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "gaps") == [[36, 100]]
    # a new file started by a job whose checkpoint's job did not log: no row before it
    other = tmp_path / "traj_rank00001.h5"
    trajlog.TrajectoryWriter(other, batch_size=2, num_actions=3, resume_after_frame=100).close()
    assert "the steps before the checkpoint, which its job did not log" in capsys.readouterr().err
    with trajlog.open_trajectory_file(other) as f:
        assert trajlog.json_list_attr(f, "gaps") == [[0, 100]]


def test_a_checkpoint_says_where_the_logged_rows_end(tmp_path, capsys):
    """A job that does not log carries the last logging job's record on (train.py
    _trajectory_resume_state: its rows and the checkpoint frame they reach). Here the
    logging job checkpointed at frame 20, logged on to frame 36 and was killed; a job
    resumed from 20 without logging checkpointed at 100; the next one, logging again, cuts
    the rows after 20 (the killed job's, not this run's) and records [20, 100] as a gap
    (the heuristic without that record kept them and recorded [36, 100])."""
    path = tmp_path / "traj_rank00000.h5"
    _rows(path, 10)  # frames 0 .. 36, 4 a row; the checkpoint at 20 counted 6 rows
    trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=100,
                             resume_expected_rows=6, resume_logged_until=20).close()
    assert "holds steps up to frame 20 only, and this run resumes at frame 100" in capsys.readouterr().err
    with trajlog.open_trajectory_file(path) as f:
        assert f["steps/global_frame"].shape[0] == 6 and f["steps/global_frame"][-1, 0] == 20
        assert trajlog.json_list_attr(f, "gaps") == [[20, 100]]


def test_a_rank_of_several_resumes_without_a_false_gap(tmp_path, capsys):
    """With 2 ranks, a rank's rows end an iteration short of the run's frame by the other
    rank's frames (4 rows of 4 frames a rank, iterations of 32 frames): no gap there."""
    path = tmp_path / "traj_rank00000.h5"
    rng = np.random.default_rng(0)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3) as w:
        for it in range(3):
            for k in range(4):
                row = fake_step(rng, 0, 2, 3)
                row["global_frame"][:] = 32 * it + 4 * (k + 1)
                w.append_step(**row)
    trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=96).close()
    assert capsys.readouterr().err == ""
    trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, resume_after_frame=128).close()
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "gaps") == [[80, 128]]


def run_of_ranks(run_dir, world_size=2, ranks=None):
    """Rank files of one run (all ranks, or `ranks`), with the rank, world_size and run_id
    attributes train writes."""
    for rank in range(world_size) if ranks is None else ranks:
        path = trajlog.rank_file(run_dir, rank)
        write_rank(path, 20, 2, 4, seed=rank, env_offset=2 * rank)
        with h5py.File(path, "r+") as f:
            f.attrs.update({"rank": rank, "world_size": world_size, "run_id": "r" * 32})


def test_a_master_is_not_written_over_some_of_the_ranks(tmp_path):
    """A multi-node run with a node-local --log-dir: rank 0 saw only its node's rank files
    and wrote a master of part of the batch, which read as the whole run."""
    run_of_ranks(tmp_path, world_size=3, ranks=(0, 2))
    with pytest.raises(trajlog.MissingRankFilesError,
                       match=re.escape(f"{tmp_path}: the run had 3 ranks but the file of rank 1 "
                                       f"(traj_rank00001.h5) is missing; no master file written. "
                                       f"Likely the log directory is not shared") + ".*gather every rank's"):
        trajlog.write_master(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traj_rank00000.h5", "traj_rank00002.h5"]
    # the trainer notes a RuntimeError there and keeps the rank files
    assert issubclass(trajlog.MissingRankFilesError, RuntimeError)
    run_of_ranks(tmp_path, world_size=3, ranks=(1,))  # gathered: the whole batch
    master = trajlog.write_master(tmp_path)
    assert trajlog.read_steps(master, "env_id")["env_id"].shape == (20, 6)
    assert not (tmp_path / (trajlog.MASTER_FILE + ".tmp")).exists()


def test_a_run_at_its_budget_says_why_it_wrote_no_master_over_some_ranks(tmp_path):
    """complete_master (a resume at the budget) over a node's rank files only: it says why
    no master was written, and writes it once every rank file is there."""
    run_of_ranks(tmp_path, world_size=3, ranks=(0, 2))
    done = trajlog.complete_master(tmp_path, last_frame=76)
    assert done.startswith(f"{tmp_path / trajlog.MASTER_FILE} was missing, and is not written now: ")
    assert "traj_rank00001.h5" in done and "not shared" in done
    assert not (tmp_path / trajlog.MASTER_FILE).exists()
    assert not (tmp_path / (trajlog.MASTER_FILE + ".tmp")).exists()
    run_of_ranks(tmp_path, world_size=3, ranks=(1,))
    assert "written now from 3 rank file(s)" in trajlog.complete_master(tmp_path, last_frame=76)
    assert (tmp_path / trajlog.MASTER_FILE).is_file()


def test_check_resumable_refuses_a_file_another_program_holds_with_hdf5_locking(tmp_path):
    """A cleanly closed file held open by a plain h5py.File (HDF5's own lock, a notebook):
    the resume's read-only check passed, then the writer's open failed after the other
    ranks had cut their files."""
    path = tmp_path / "traj.h5"
    write_rank(path, steps=5, batch=4, actions=6, seed=0)
    trajlog.check_resumable(path, 4, 6)
    with h5py.File(path, "r"):  # default locking
        with pytest.raises(trajlog.TrajectoryLogError, match="another process holds a lock on this file"):
            trajlog.check_resumable(path, 4, 6)
    trajlog.check_resumable(path, 4, 6)


def test_a_file_hdf5_could_not_close_ends_the_process_with_its_status(tmp_path):
    """A write error mid-run (EFBIG here: a file size limit, as Slurm may pass on; EIO
    takes the same path) left HDF5 unable to close the file, and freeing its handles at
    exit segfaulted: status 139 (11 under mpiexec) instead of the stop's 4."""
    script = textwrap.dedent(f"""
        import os, resource, sys
        import numpy as np
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_trajlog import fake_step
        from hybridsim import trajlog
        trajlog.KEEP_UNFINISHED_WRITERS = True  # as `hybridsim train` sets it (cli.run)
        path = {str(tmp_path / "traj_rank00000.h5")!r}
        rng = np.random.default_rng(0)
        w = trajlog.TrajectoryWriter(path, batch_size=4, num_actions=4, flush_every=64, min_free_bytes=None)
        for s in range(300):
            w.append_step(**fake_step(rng, s, 4, 4))
        w.flush()
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 20000, resource.RLIM_INFINITY))
        try:
            for s in range(300, 3000):
                w.append_step(**fake_step(rng, s, 4, 4))
        except trajlog.TrajectoryWriteError as exc:
            print("write failed:", exc.__cause__, flush=True)
        try:
            w.close()
        except trajlog.TrajectoryWriteError:
            print("close failed", flush=True)
        trajlog.end_process_if_unfinished(4)
        print("not reached")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    assert "write failed:" in result.stdout and "File too large" in result.stdout, result.stdout + result.stderr
    if "close failed" not in result.stdout:
        pytest.skip("this HDF5 closed the file after the failed write")
    assert result.returncode == 4, result.stderr[-2000:]
    assert "not reached" not in result.stdout and "Segmentation fault" not in result.stderr


def test_a_damaged_world_size_is_named_without_listing_every_rank(tmp_path):
    """world_size 2**40 made analyze list every missing rank (23 GB, then killed); 10**6
    printed a 27.8 MB message."""
    write_rank(trajlog.rank_file(tmp_path, 0), 20, 2, 4, seed=1)
    with h5py.File(trajlog.rank_file(tmp_path, 0), "r+") as f:
        f.attrs["world_size"] = 2 ** 40
    with pytest.raises(trajlog.TrajectoryLogError, match=r"world_size attribute 1099511627776 is not an "
                                                         r"integer in 0..16,777,216"):
        trajlog.check_one_run({trajlog.rank_file(tmp_path, 0): {"rank": 0, "world_size": 2 ** 40}},
                              all_ranks=True)
    with pytest.raises(trajlog.MissingRankFilesError) as missing:
        trajlog.check_one_run({trajlog.rank_file(tmp_path, 0): {"rank": 0, "world_size": 10 ** 6}},
                              all_ranks=True)
    assert len(str(missing.value)) < 1000
    assert "the run had 1,000,000 ranks" in str(missing.value)
    assert "ranks 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 999,989 more (traj_rank00001.h5" in str(missing.value)


@pytest.mark.parametrize("compression", ["lzf", "gzip"])
def test_a_compressed_chunk_of_zeros_is_damage_not_data(tmp_path, compression):
    """A chunk whose bytes a crash left zero (checksum too) passed HDF5's fletcher32 check,
    and lzf then read leftover memory: analyze printed a mean episode length of 3e17."""
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 300, 4, 6, seed=7, flush_every=64, compression=compression)
    with h5py.File(path, "r") as f:
        info = f["episodes/length"].id.get_chunk_info(0)
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset)
        fh.write(bytes(info.size))
    with pytest.raises(trajlog.TrajectoryLogError, match=rf"episodes/length's chunk at byte "
                                                         rf"{info.byte_offset:,} \({info.size} bytes\) is all zeros"):
        trajlog.open_trajectory_file(path)


def test_zeros_a_filter_left_uncompressed_are_data(tmp_path):
    """lzf skips a chunk it cannot shrink (a few bytes) and HDF5 marks it in the chunk's
    filter mask: stored as they are, zeros there are the data."""
    path = tmp_path / "traj_rank00000.h5"
    obs = trajlog.ObservationLogging(shape=(2, 3), stride=1, env_ids=(0,))
    rng = np.random.default_rng(0)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, observations=obs) as w:
        for s in range(4):
            w.append_step(**fake_step(rng, s, 2, 3), observation=np.zeros((2, 2, 3), np.uint8))
    with trajlog.open_trajectory_file(path) as f:
        assert f["observations/frames"].shape[0] == 4 and not f["observations/frames"][()].any()


@pytest.mark.parametrize("name, value", [("gaps", [[0, 10 ** 30]]), ("restarts", [10 ** 30]),
                                         ("resumes", [-5])])
def test_frames_out_of_range_in_break_attributes_are_named(tmp_path, name, value):
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    with h5py.File(path, "r+") as f:
        f.attrs[name] = json.dumps(value)
    with trajlog.open_trajectory_file(path) as f, pytest.raises(trajlog.TrajectoryLogError,
                                                                 match=f"its '{name}' attribute is not a list"):
        trajlog.json_list_attr(f, name)


def test_a_file_this_user_cannot_read_is_not_called_damaged(tmp_path, monkeypatch):
    """root reads any file, so the refusal is simulated where the file is opened."""
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    real_open = open

    def refusing_open(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)
    monkeypatch.setattr("builtins.open", refusing_open)
    with pytest.raises(trajlog.TrajectoryLogError, match=r"traj_rank00000.h5: cannot read it: Permission "
                                                         r"denied \(file permissions") as refused:
        trajlog.open_trajectory_file(path)
    assert "damaged" not in str(refused.value)


@pytest.mark.parametrize("zeroed_row, refused", [(590, False), (100, True)])
def test_a_resume_drops_lost_blocks_past_its_cut_and_refuses_kept_ones(tmp_path, zeroed_row, refused):
    """The file is not synced at checkpoints, so a node's crash loses its last blocks,
    which a resume cuts anyway: those must not refuse it (helper-91). A lost block among
    the rows it keeps must, with what to do."""
    path = trajlog.rank_file(tmp_path, 0)
    rng = np.random.default_rng(3)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=3, chunk_steps=64) as w:
        for s in range(600):
            w.append_step(**fake_step(rng, s, 2, 3))
    with h5py.File(path, "r") as f:
        ds = f["steps/action"]
        info = ds.id.get_chunk_info_by_coord((zeroed_row // ds.chunks[0] * ds.chunks[0], 0))
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset)
        fh.write(bytes(info.size))
    resume = dict(expected_rows=201, last_frame=4 * 200)
    if refused:
        with pytest.raises(trajlog.TrajectoryLogError, match=r"steps/action's chunk at byte .* is all zeros.*"
                                                             r"move it away and resume"):
            trajlog.check_resumable(path, 2, 3, None, **resume)
    else:
        assert trajlog.check_resumable(path, 2, 3, None, **resume)[1] == 201
