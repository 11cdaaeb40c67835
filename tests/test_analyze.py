"""`hybridsim analyze` against statistics computed directly from what was written."""
import json
import os
import re
import subprocess
import sys
import warnings

import h5py
import numpy as np
import pytest

from hybridsim import analyze, replay, trajlog
from test_trajlog import damage_header, fake_step, run_of_ranks, small_run, write_rank  # noqa: F401


def test_summary_matches_the_written_data(tmp_path):
    rows0 = write_rank(trajlog.rank_file(tmp_path, 0), 60, 3, 5, seed=1, env_offset=0)
    rows1 = write_rank(trajlog.rank_file(tmp_path, 1), 40, 2, 5, seed=2, env_offset=3)
    summary = analyze.analyze(tmp_path)
    actions = np.concatenate([np.stack([r["action"] for r in rows]).ravel() for rows in (rows0, rows1)])
    assert summary["overall"]["action_counts"] == np.bincount(actions, minlength=5).tolist()
    episodes = trajlog.read_episodes(trajlog.rank_file(tmp_path, 0))
    assert summary["per_rank"]["traj_rank00000.h5"]["episodes"] == episodes["return"].size == 6
    assert summary["overall"]["episodes"] == 6 + 4
    returns = np.concatenate([trajlog.read_episodes(trajlog.rank_file(tmp_path, r))["return"] for r in (0, 1)])
    assert summary["overall"]["return_mean"] == np.mean(returns)
    assert summary["overall"]["return_max"] == returns.max()
    for name in ("returns.png", "actions.png", "throughput.png", "summary.json"):
        assert (tmp_path / name).is_file()


def test_one_rank_file_is_summarised_apart_from_its_run(tmp_path):
    """The run's summary.json stays the run's: one rank file's goes into a folder of its
    own beside it (and the report says where), the master file's is the run's."""
    write_rank(trajlog.rank_file(tmp_path, 0), 30, 2, 4, seed=1, env_offset=0)
    write_rank(trajlog.rank_file(tmp_path, 1), 30, 2, 4, seed=2, env_offset=2)
    run = analyze.analyze(tmp_path, plots=False)
    before = (tmp_path / "summary.json").read_text()
    assert run["summary_file"] == str(tmp_path / "summary.json")
    result = run_cli("analyze", trajlog.rank_file(tmp_path, 1), "--no-plots")
    assert result.returncode == 0, result.stderr
    own = tmp_path / "analysis-traj_rank00001" / "summary.json"
    assert f"summary: {own}" in result.stdout
    assert json.loads(own.read_text())["files"] == [str(trajlog.rank_file(tmp_path, 1))]
    assert (tmp_path / "summary.json").read_text() == before
    assert analyze.default_out_dir(tmp_path / trajlog.MASTER_FILE) == tmp_path


def test_cli_prints_summary_and_names_a_corrupt_file(tmp_path):
    write_rank(trajlog.rank_file(tmp_path, 0), 30, 2, 4, seed=3)
    result = subprocess.run([sys.executable, "-m", "hybridsim", "analyze", str(tmp_path), "--json",
                             "--no-plots"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["overall"]["episodes"] == 3
    bad = tmp_path / "traj_rank00001.h5"
    bad.write_bytes(trajlog.rank_file(tmp_path, 0).read_bytes()[:5000])
    result = subprocess.run([sys.executable, "-m", "hybridsim", "analyze", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "traj_rank00001.h5" in result.stderr and "truncated" in result.stderr


def run_cli(*args):
    # time-limited: a damaged file once hung analyze and replay in SWMR read retries
    return subprocess.run([sys.executable, "-m", "hybridsim", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("name", ["steps", "steps/action"])
def test_cli_refuses_a_damaged_file_at_once(small_run, tmp_path, name):
    src = trajlog.rank_file(small_run, 0)
    path = damage_header(src, tmp_path / src.name, name)
    for args in (["analyze", path, "--no-plots"], ["replay", path, "--episode", "0"]):
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert f"{path}: damaged trajectory file" in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["steps/action", "steps/env_id", "episodes", "episodes/return",
                                  "steps/behavior_logits"])
def test_a_missing_dataset_is_named(small_run, tmp_path, name):
    path = tmp_path / "traj_rank00000.h5"
    path.write_bytes(trajlog.rank_file(small_run, 0).read_bytes())
    with h5py.File(path, "r+") as f:
        del f[name]
    message = re.escape(f"{path}: damaged trajectory file: {name} is missing")
    with pytest.raises(trajlog.TrajectoryLogError, match=message):
        analyze.analyze(path, plots=False)
    with pytest.raises(trajlog.TrajectoryLogError, match=message):
        replay.replay(path, 0)


def test_cli_refuses_a_master_file_without_its_rank_files(small_run, tmp_path):
    master = tmp_path / trajlog.MASTER_FILE
    master.write_bytes((small_run / trajlog.MASTER_FILE).read_bytes())
    result = run_cli("analyze", master, "--no-plots")  # printed 30 episodes of fill values
    assert result.returncode == 2, result.stdout
    assert f"{master}: its rank file traj_rank00000.h5 is missing" in result.stderr
    summary = analyze.analyze(small_run / trajlog.MASTER_FILE, out_dir=tmp_path, plots=False)
    assert summary["overall"]["episodes"] == 30


# ----- damaged data and foreign files that used to pass as data ---------------------------
def _flip_chunk_bytes(path, dataset, chunk=0):
    """Flip two bytes in the middle of a dataset's stored chunk (its data, not metadata)."""
    with h5py.File(path, "r") as f:
        info = f[dataset].id.get_chunk_info(chunk)
    blob = bytearray(path.read_bytes())
    middle = info.byte_offset + info.size // 2
    blob[middle] ^= 0x5A
    blob[middle + 1] ^= 0xA5
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize("dataset", ["episodes/return", "steps/action", "steps/global_frame"])
def test_a_damaged_data_chunk_is_named_not_read_as_numbers(tmp_path, dataset):
    """lzf without a checksum decoded some flipped bytes into plausible numbers: analyze
    reported a mean return of 0.00 with exit status 0. Chunks carry fletcher32 now."""
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 60, 3, 5, seed=1)
    _flip_chunk_bytes(path, dataset)
    with pytest.raises(trajlog.TrajectoryLogError, match="damaged trajectory file"):
        analyze.analyze(path, plots=False)
    result = run_cli("analyze", path, "--no-plots")
    assert result.returncode == 2 and "damaged trajectory file" in result.stderr, result.stderr


def test_a_master_refuses_a_rank_file_of_another_run(tmp_path):
    for run, seed in (("a", 1), ("b", 2)):
        (tmp_path / run).mkdir()
        write_rank(trajlog.rank_file(tmp_path / run, 0), 40, 2, 4, seed=seed)
        trajlog.write_master(tmp_path / run)
    (tmp_path / "b" / "traj_rank00000.h5").replace(tmp_path / "a" / "traj_rank00000.h5")
    with pytest.raises(trajlog.TrajectoryLogError, match="is not the file it was written over"):
        analyze.analyze(tmp_path / "a" / "trajectories.h5", plots=False)


def test_a_master_written_before_the_run_went_on_says_what_it_covers(tmp_path):
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    master = trajlog.write_master(tmp_path)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4, resume_after_frame=10**6) as w:
        from test_trajlog import fake_step
        for s in range(20, 30):
            w.append_step(**fake_step(np.random.default_rng(s), s, 2, 4))
    with pytest.warns(RuntimeWarning, match="covers 20 of the 30 step rows"):
        summary = analyze.analyze(master, plots=False)
    assert summary["overall"]["action_counts"] and sum(summary["overall"]["action_counts"]) == 40


def _set_attr(name, value):
    def damage(path):
        with h5py.File(path, "r+") as f:
            f.attrs[name] = value
    return damage


def _retype(name, convert):
    def damage(path):
        with h5py.File(path, "r+") as f:
            data = convert(f[name][()])
            del f[name]
            f.create_dataset(name, data=data, maxshape=(None, *data.shape[1:]))
    return damage


@pytest.mark.parametrize("damage,message", [
    (_set_attr("format_version", 2), "written in trajectory format_version 2"),
    (_set_attr("format_version", "banana"), "its format_version attribute 'banana' is not an integer"),
    # an array made `!=` ambiguous (no file named); '1' was "format_version '1' ... reads version 1"
    (_set_attr("format_version", np.array([1, 1])), "damaged trajectory file: its format_version "
                                                     "attribute array\\(\\[1, 1\\]\\) is not an integer"),
    (_set_attr("format_version", "1"), "damaged trajectory file: its format_version attribute '1' "
                                       "is not an integer"),
    (_retype("steps/action", lambda a: a.astype(np.float32) + 0.5), "steps/action is float32, not int16"),
    (_retype("episodes/return", lambda r: r.astype("S8")), "episodes/return is \\|S8, not float64"),
])
def test_foreign_versions_and_types_are_named(tmp_path, damage, message):
    """Both were read as if they were this version's: actions of 2.5 truncated to 2,
    returns failing deep in numpy without the file's name."""
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    damage(path)
    with pytest.raises(trajlog.TrajectoryLogError, match=message):
        trajlog.read_episodes(path)


def test_actions_outside_the_action_set_are_named(tmp_path):
    """They dropped out of the histogram (past its end) or failed in numpy without the file."""
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    with h5py.File(path, "r+") as f:
        f["steps/action"][3, 1] = 50
    with pytest.raises(trajlog.TrajectoryLogError, match="steps/action holds 1 value.* outside 0..3 .*50"):
        analyze.analyze(path, plots=False)


def test_json_output_is_strict_json():
    """A NaN printed a bare NaN, which jq and JavaScript reject (a NaN return is refused
    as damage now, below; the summary's writer stays strict anyway)."""
    text = analyze.to_json({"overall": {"return_mean": float("nan"), "x": [float("inf"), 1.5]}})
    summary = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert summary == {"overall": {"return_mean": None, "x": [None, 1.5]}}


def test_analyze_refuses_an_out_path_that_is_a_file_before_reading(tmp_path, monkeypatch):
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    monkeypatch.setattr(analyze, "_scan_steps", lambda *a: pytest.fail("scanned first"))
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        analyze.analyze(path, out_dir=path)
    with pytest.raises(NotADirectoryError, match=f"--out {path}/plots: {path} is a file"):
        analyze.analyze(path, out_dir=path / "plots")  # was errno text from mkdir
    with pytest.raises(NotADirectoryError, match=r"--out \(default: beside the logs\) "):
        analyze.analyze(path / "traj_rank00000.h5")  # a file in a file: the default is named


def test_bad_gaps_and_observation_index_are_named(tmp_path):
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    with h5py.File(path, "r+") as f:
        f.attrs["gaps"] = "[[1, 2, 3]]"
    with pytest.raises(trajlog.TrajectoryLogError, match="'gaps' attribute is not a list of \\[from, to\\]"):
        replay.replay(path, 0)
    (tmp_path / "obs").mkdir()
    other = trajlog.rank_file(tmp_path / "obs", 0)
    write_rank(other, 20, 2, 4, seed=1,
               observations=trajlog.ObservationLogging(shape=(2, 3), stride=2, env_ids=(0,)))
    with h5py.File(other, "r+") as f:
        del f["observations/index"]
        f.create_dataset("observations/index", data=np.zeros((4, 1), np.int64))
    with pytest.raises(trajlog.TrajectoryLogError, match="observations/index has 1 columns, not 3"):
        trajlog.read_episodes(other)


def test_read_steps_names_unknown_fields(tmp_path):
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 20, 2, 4, seed=1)
    with pytest.raises(ValueError, match="no step field 'acton'; the fields are action, "):
        trajlog.read_steps(path, ["acton"])
    assert list(trajlog.read_steps(path, "action")) == ["action"]
    assert trajlog.read_steps(path, []) == {}
    with pytest.raises(trajlog.TrajectoryLogError, match="a directory"):
        trajlog.read_steps(tmp_path)


@pytest.mark.parametrize("size, window", [(200, 40), (7, 3), (5, 1), (3, 100), (1, 1)])
def test_the_returns_curve_is_the_mean_of_the_last_window_episodes(size, window):
    rng = np.random.default_rng(size)
    values = rng.normal(size=size)
    expected = [values[max(0, i - window + 1):i + 1].mean() for i in range(size)]
    np.testing.assert_allclose(analyze.trailing_mean(values, window), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(analyze.trailing_mean(np.full(size, -20.0), window), np.full(size, -20.0))


def test_rank_files_of_different_runs_are_not_read_as_one(tmp_path):
    """A rank file copied in from another run was summarised with this one's (or failed
    with a numpy broadcast error when its game had other actions)."""
    import shutil

    from hybridsim.train import TrainConfig, Trainer
    runs = {}
    for name, seed in (("mine", 1), ("other", 2)):
        runs[name] = tmp_path / name
        Trainer(TrainConfig(game="pong", backend="ale-py", num_envs=2, num_minibatches=1, total_frames=160,
                            log_dir=str(runs[name]), num_threads=1, torch_threads=1, seed=seed)).train()
    with h5py.File(runs["mine"] / "traj_rank00000.h5", "r") as f:
        assert len(f.attrs["run_id"]) == 32
    copied = runs["mine"] / "traj_rank00001.h5"
    shutil.copy(runs["other"] / "traj_rank00000.h5", copied)
    with pytest.raises(trajlog.TrajectoryLogError, match=re.escape(f"{copied}: holds rank 0's rows, not rank 1's")):
        analyze.analyze(runs["mine"], plots=False)
    with h5py.File(copied, "a") as f:
        f.attrs["rank"] = 1  # renamed as if it were this run's rank 1
    for call in (analyze.analyze, trajlog.write_master):
        with pytest.raises(trajlog.TrajectoryLogError, match="are from different runs \\(run_id"):
            call(runs["mine"])
    # one file under any name is analysed on its own
    renamed = tmp_path / "pong_run_1.h5"
    shutil.copy(runs["other"] / "traj_rank00000.h5", renamed)
    assert analyze.analyze(renamed, plots=False)["files"] == [str(renamed)]


def test_analyze_says_when_the_out_directory_cannot_be_made(tmp_path):
    """/proc passes the writability check as root but refuses mkdir: the message names --out."""
    if not os.access("/proc", os.W_OK):
        pytest.skip("/proc is not writable-looking for this user: the earlier check answers")
    from hybridsim import storage
    with pytest.raises(OSError, match=r"--out /proc/nope: cannot make the directory \(No such file"):
        storage.check_output_directory("/proc/nope", "--out")


def test_a_copy_of_a_rank_file_is_refused_naming_both(tmp_path):
    """A stray copy beside the rank files doubled every count of the summary."""
    import shutil
    run_of_ranks(tmp_path)
    assert analyze.analyze(tmp_path, plots=False)["overall"]["episodes"] == 4
    copy = tmp_path / "traj_rank00000 (copy).h5"
    shutil.copy(trajlog.rank_file(tmp_path, 0), copy)
    result = run_cli("analyze", tmp_path, "--no-plots")
    assert result.returncode == 2, result.stdout
    assert f"{trajlog.rank_file(tmp_path, 0)} and {copy} both hold rank 0's rows" in result.stderr \
        or f"{copy} and {trajlog.rank_file(tmp_path, 0)} both hold rank 0's rows" in result.stderr, result.stderr
    with pytest.raises(trajlog.TrajectoryLogError, match="both hold rank 0's rows"):
        trajlog.write_master(tmp_path)  # the master would have counted it twice too
    assert analyze.analyze(copy, plots=False)["overall"]["episodes"] == 2  # named alone: read


def test_a_missing_rank_file_is_named(tmp_path):
    """Rank 0's file gone from a 3-rank run: a summary of the other ranks came out with exit 0."""
    run_of_ranks(tmp_path, world_size=3)
    trajlog.rank_file(tmp_path, 0).unlink()
    result = run_cli("analyze", tmp_path, "--no-plots")
    assert result.returncode == 2, result.stdout
    assert f"{tmp_path}: the run had 3 ranks but the file of rank 0 (traj_rank00000.h5) is missing" \
        in result.stderr, result.stderr
    trajlog.rank_file(tmp_path, 2).unlink()
    with pytest.raises(trajlog.TrajectoryLogError, match=r"files of ranks 0, 2 \(traj_rank00000.h5, "
                                                         r"traj_rank00002.h5\) are missing"):
        analyze.analyze(tmp_path, plots=False)
    # one rank file named on its own is that rank's summary
    assert analyze.analyze(trajlog.rank_file(tmp_path, 1), plots=False)["overall"]["episodes"] == 2


def _timed_rows(writer, rng, steps, first_step, start_time, seconds_per_step):
    from test_trajlog import fake_step
    for s in range(first_step, first_step + steps):
        writer.append_step(**fake_step(rng, s, 2, 4), unix_time=start_time + (s - first_step) * seconds_per_step)


def test_throughput_leaves_out_the_time_a_job_was_stopped(tmp_path):
    """A run stopped for an hour and resumed reported its frames over the whole span: 23
    frames/s for a run at ~2,000. 4 frames per row at 0.002 s a row: 2,000 frames/s."""
    path = trajlog.rank_file(tmp_path, 0)
    rng = np.random.default_rng(0)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4) as w:
        _timed_rows(w, rng, 100, 0, 1e9, 0.002)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4, resume_after_frame=99 * 4,
                                  resume_expected_rows=100) as w:
        _timed_rows(w, rng, 100, 100, 1e9 + 3600, 0.002)
    summary = analyze.analyze(path, plots=False)
    assert summary["overall"]["frames_per_second"] == pytest.approx(2000, rel=1e-6)
    assert summary["per_rank"][path.name]["running_segments"] == 2
    assert "throughput: 2,000 frames/s (while running: 2 stretches" in analyze.format_summary(summary)
    with h5py.File(path, "r+") as f:  # a file from before resumes were recorded: the hour is a stop
        assert trajlog.json_list_attr(f, "resumes") == [396]
        del f.attrs["resumes"]
    assert analyze.analyze(path, plots=False)["overall"]["frames_per_second"] == pytest.approx(2000, rel=1e-6)


def test_a_damaged_global_frame_gives_no_negative_throughput(tmp_path):
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 30, 2, 4, seed=1)
    with h5py.File(path, "r+") as f:
        f["steps/global_frame"][...] = -f["steps/global_frame"][()] - 1  # frames run backwards
    with pytest.warns(RuntimeWarning, match="30 of 30 step rows left out of the frame rate"):
        summary = analyze.analyze(path, plots=False)
    assert summary["overall"]["frames_per_second"] is None
    assert "throughput" not in analyze.format_summary(summary)
    import subprocess  # on the command line: one line, not the source line that warned
    import sys
    run = subprocess.run([sys.executable, "-m", "hybridsim", "analyze", str(path), "--no-plots",
                          "--out", str(tmp_path / "a")], capture_output=True, text=True)
    err = run.stderr
    assert run.returncode == 0, err
    assert f"hybridsim analyze: warning: {path}: 30 of 30 step rows left out of the" in err, err
    assert "warnings.warn" not in err and "RuntimeWarning" not in err, err


def test_only_hybridsims_own_warnings_print_as_one_line():
    """numpy's and torch's warnings raised on a line of hybridsim keep Python's form."""
    import warnings
    from hybridsim import HybridsimWarning
    from hybridsim.cli import _format_warning
    where = analyze.__file__
    assert (_format_warning(["analyze"], warnings.formatwarning, "x", HybridsimWarning, where, 1)
            == "hybridsim analyze: warning: x\n")
    numpy_style = _format_warning(["analyze"], warnings.formatwarning, "divide by zero", RuntimeWarning, where, 1)
    assert "RuntimeWarning: divide by zero" in numpy_style and where in numpy_style


def test_analyze_names_the_gaps_of_a_file(tmp_path):
    path = trajlog.rank_file(tmp_path, 0)
    write_rank(path, 30, 2, 4, seed=1)
    with h5py.File(path, "r+") as f:
        f.attrs["gaps"] = "[[40, 400]]"
    summary = analyze.analyze(path, plots=False)
    assert summary["per_rank"][path.name]["gaps"] == [[40, 400]]
    assert (f"warning: {path.name}: no steps logged after frame 40 up to frame 400 (lost, or not "
            f"logged); the episodes there are missing") in analyze.format_summary(summary)


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    """analyze and replay of a FIFO (and a resume into one) waited forever for a writer."""
    fifo = trajlog.rank_file(tmp_path, 0)
    os.mkfifo(fifo)
    message = f"{fifo}: not a regular file"
    for args in (["analyze", fifo, "--no-plots"], ["analyze", tmp_path, "--no-plots"],
                 ["replay", fifo, "--episode", "0"]):
        result = run_cli(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
    code = ("import sys; from hybridsim import trajlog\n"
            "try:\n"
            "    trajlog.TrajectoryWriter(sys.argv[1], batch_size=2, num_actions=3, resume_after_frame=8)\n"
            "except trajlog.TrajectoryLogError as exc:\n"
            "    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    assert message in result.stdout, result.stdout + result.stderr


def _brute_force_rate(times, frames, clean):
    """Frames over seconds summed over consecutive clean rows (no stops in these files)."""
    rows = [k for k in range(len(frames)) if clean[k]]
    run = sum(frames[b] - frames[a] for a, b in zip(rows, rows[1:]))
    return run / sum(times[b] - times[a] for a, b in zip(rows, rows[1:]))


@pytest.mark.parametrize("damaged", [{30: 2**40}, {30: 0}, {30: 2**40, 31: 2**40 + 8}, {0: 2**40},
                                     {58: 2**40}, {30: -5}, {r: 0 for r in range(20, 30)},
                                     {r: 2**40 + r for r in range(20, 35)}])
def test_a_damaged_global_frame_row_is_left_out_of_the_rate(tmp_path, damaged):
    """One row whose global_frame spiked to 2**40 counted its jump as frames run: an absurd
    frames/s. Damaged rows (one, or a stretch) are left out, they alone (a warning says how
    many), and the rate is that of the rows around them."""
    path = trajlog.rank_file(tmp_path, 0)
    rng = np.random.default_rng(7)
    from test_trajlog import fake_step
    times = 1e9 + np.cumsum(rng.uniform(0.001, 0.004, 60))  # uneven steps: a spike's row matters
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4) as w:
        for s in range(60):
            w.append_step(**fake_step(rng, s, 2, 4), unix_time=times[s])
    with h5py.File(path, "r+") as f:
        frames = f["steps/global_frame"][:, 0].tolist()
        for row, value in damaged.items():
            f["steps/global_frame"][row] = value
    expected = _brute_force_rate(times.tolist(), frames, [k not in damaged for k in range(60)])
    with pytest.warns(RuntimeWarning, match=re.escape(f"{path}: ") + r"\d+ of 60 step rows left out"):
        summary = analyze.analyze(path, plots=False)
    assert summary["overall"]["frames_per_second"] == pytest.approx(expected, rel=1e-9)
    assert summary["per_rank"][path.name]["rows_left_out"] == len(damaged)  # those rows alone


def test_an_undamaged_file_leaves_out_no_row(tmp_path):
    path = trajlog.rank_file(tmp_path, 0)
    rng = np.random.default_rng(0)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4) as w:
        _timed_rows(w, rng, 50, 0, 1e9, 0.002)
    with h5py.File(path, "r+") as f:  # frames that stand still for a few rows are no damage
        f["steps/global_frame"][10:14] = f["steps/global_frame"][10]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = analyze.analyze(path, plots=False)
    assert summary["per_rank"][path.name]["rows_left_out"] == 0
    assert summary["overall"]["frames_per_second"] == pytest.approx(49 * 4 / (49 * 0.002), rel=1e-6)


def test_the_throughput_plot_draws_no_rate_across_a_resume(tmp_path):
    """Each resume drew a dip to ~0.1 frames/s: the point spanning it counted the hour
    between the jobs as running. Every point lies within one job now."""
    path = trajlog.rank_file(tmp_path, 0)
    rng = np.random.default_rng(0)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4) as w:
        _timed_rows(w, rng, 100, 0, 1e9, 0.002)
    for job in (1, 2):  # 4 frames a row, resumed after rows 99 and 199, an hour later each
        with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4, resume_after_frame=(100 * job - 1) * 4,
                                      resume_expected_rows=100 * job) as w:
            _timed_rows(w, rng, 100, 100 * job, 1e9 + 3600 * job, 0.002)
    with trajlog.open_trajectory_file(path) as f:
        resumes = trajlog.json_list_attr(f, "resumes")
        assert resumes == [396, 796]
        lines = analyze._scan_steps(f, 4, resumes)["series"]
        stops = analyze._scan_steps(f, 4)["series"]  # a file from before resumes: the hour's stop
    for series in (lines, stops):
        assert len(series) == 3
        points = np.concatenate(series)
        for r in resumes:  # a point from frame a to frame b spans r when a <= r < b
            assert not ((points[:, 0] <= r) & (r < points[:, 1])).any()
        np.testing.assert_allclose(points[:, 2], 2000, rtol=1e-3)  # times near 1e9: float steps
        assert points[0, 0] == 0 and points[-1, 1] == 299 * 4  # from the first row to the last
    assert analyze.analyze(path)["plots"]  # and the plot draws them
    assert (tmp_path / "analysis-traj_rank00000" / "throughput.png").is_file()


def test_the_run_s_rate_is_that_of_the_file_covering_most_of_it(tmp_path):
    """Two ranks, then one after a resume: rank 1's file holds only the two-rank stretch,
    and its (faster) rate was reported as the run's (the largest of the files' rates)."""
    rng = np.random.default_rng(2)
    for rank, seconds_per_step in ((0, 0.004), (1, 0.001)):
        path = trajlog.rank_file(tmp_path, rank)
        with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4) as w:
            _timed_rows(w, rng, 100, 0, 1e9, seconds_per_step)
        with h5py.File(path, "r+") as f:
            f.attrs.update({"rank": rank, "world_size": 2, "run_id": "r" * 32})
    path = trajlog.rank_file(tmp_path, 0)
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4, resume_after_frame=99 * 4,
                                  resume_expected_rows=100) as w:  # rank 0 alone from here
        _timed_rows(w, rng, 300, 100, 1e9 + 60, 0.004)
    summary = analyze.analyze(tmp_path, plots=False)
    rates = {name: r["frames_per_second"] for name, r in summary["per_rank"].items()}
    assert rates["traj_rank00001.h5"] == pytest.approx(4000, rel=1e-6)
    assert summary["overall"]["frames_per_second"] == rates["traj_rank00000.h5"] == pytest.approx(1000, rel=1e-6)


def test_a_master_over_a_rank_added_on_resume_reads_as_the_run(tmp_path):
    """One rank, then two after a resume: the new rank's row k is a later step than rank
    0's row k, and a master file's row frame (the largest of its columns) jumped ahead
    and back: a third of the rows left out as damage, with a warning, and another rate."""
    rng = np.random.default_rng(3)
    first = trajlog.rank_file(tmp_path, 0)
    with trajlog.TrajectoryWriter(first, batch_size=2, num_actions=4) as w:
        _timed_rows(w, rng, 100, 0, 1e9, 0.002)
    with trajlog.TrajectoryWriter(first, batch_size=2, num_actions=4, resume_after_frame=99 * 4,
                                  resume_expected_rows=100) as w:
        _timed_rows(w, rng, 100, 100, 1e9 + 60, 0.004)
    with trajlog.TrajectoryWriter(trajlog.rank_file(tmp_path, 1), batch_size=2, num_actions=4) as w:
        for s in range(100, 200):  # from the resume on, at rank 0's frames and times
            step = fake_step(rng, s, 2, 4, env_offset=2)
            w.append_step(**step, unix_time=1e9 + 60 + (s - 100) * 0.004)
    for rank in (0, 1):
        with h5py.File(trajlog.rank_file(tmp_path, rank), "r+") as f:
            f.attrs.update({"rank": rank, "world_size": 2, "run_id": "r" * 32})
    master = trajlog.write_master(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no row is taken for damage
        of_master = analyze.analyze(master, out_dir=tmp_path / "m", plots=False)
        of_dir = analyze.analyze(tmp_path, out_dir=tmp_path / "d", plots=False)
    rate = (99 * 4 + 99 * 4) / (99 * 0.002 + 99 * 0.004)  # the two stretches of rank 0
    assert of_master["overall"]["frames_per_second"] == pytest.approx(rate, rel=1e-6)
    assert of_dir["overall"]["frames_per_second"] == pytest.approx(rate, rel=1e-6)
    assert of_master["per_rank"][master.name]["rows_left_out"] == 0


def test_a_master_whose_rank_0_file_started_anew_reads_as_the_run(tmp_path):
    """Rank 0's file lost and started anew at a resume (its rows from there on, a gap
    before): the master file's rate came from rank 0's column alone, the later stretch;
    the run directory's from rank 1's file, which covers both."""
    rng = np.random.default_rng(5)
    second = trajlog.rank_file(tmp_path, 1)
    with trajlog.TrajectoryWriter(second, batch_size=2, num_actions=4) as w:
        for s in range(100):
            w.append_step(**fake_step(rng, s, 2, 4, env_offset=2), unix_time=1e9 + s * 0.002)
    with trajlog.TrajectoryWriter(second, batch_size=2, num_actions=4, resume_after_frame=99 * 4,
                                  resume_expected_rows=100) as w:
        for s in range(100, 200):
            w.append_step(**fake_step(rng, s, 2, 4, env_offset=2), unix_time=1e9 + 60 + (s - 100) * 0.004)
    with trajlog.TrajectoryWriter(trajlog.rank_file(tmp_path, 0), batch_size=2, num_actions=4) as w:
        for s in range(100, 200):  # started anew at the resume
            w.append_step(**fake_step(rng, s, 2, 4), unix_time=1e9 + 60 + (s - 100) * 0.004)
    for rank in (0, 1):
        with h5py.File(trajlog.rank_file(tmp_path, rank), "r+") as f:
            f.attrs.update({"rank": rank, "world_size": 2, "run_id": "r" * 32})
            if rank == 0:
                f.attrs["gaps"] = json.dumps([[0, 396]])
    master = trajlog.write_master(tmp_path)
    of_master = analyze.analyze(master, out_dir=tmp_path / "m", plots=False)
    of_dir = analyze.analyze(tmp_path, out_dir=tmp_path / "d", plots=False)
    rate = (99 * 4 + 99 * 4) / (99 * 0.002 + 99 * 0.004)  # rank 1's two stretches
    assert of_dir["overall"]["frames_per_second"] == pytest.approx(rate, rel=1e-6)
    assert of_master["overall"]["frames_per_second"] == pytest.approx(rate, rel=1e-6)
    assert of_master["per_rank"][master.name]["rows_left_out"] == 0


def _training_like_file(path, schedule="a2c", rank=0, steps=40, batch=2):
    """A rank file with the attributes training writes: its rank, and a config giving the
    rank's environments (rank * num_envs ...) and schedule."""
    rng = np.random.default_rng(5)
    first = rank * batch
    attrs = {"game": "pong", "rank": rank, "world_size": rank + 1,
             "config": {"num_envs": batch, "schedule": schedule, "max_episode_frames": 4000}}
    with trajlog.TrajectoryWriter(path, batch_size=batch, num_actions=4, attrs=attrs) as w:
        for s in range(steps):
            w.append_step(**fake_step(rng, s, batch, 4, env_offset=first))
            if s % 10 == 9:
                w.append_episode(first + s % batch, s // 10, float(s), 10, s * 4 - 36, s * 4)
    return path


@pytest.mark.parametrize("field, row, value, message", [
    ("length", 0, 10**15, r"episodes/length is outside 1..4000"),
    ("length", 1, 0, r"episodes/length is outside"),
    ("return", 2, np.nan, r"episodes/return is not a number or beyond any game's score"),
    ("return", 0, 1.7e308, r"episodes/return is not a number or beyond"),
    ("env_id", 1, 7, r"episodes/env_id is outside this rank's environments 0..1"),
    ("episode_id", 1, 0, r"episodes hold an \(env_id, episode_id\) twice"),
    ("start_frame", 0, 10**9, r"episodes/start_frame is after end_frame"),
])
def test_damaged_episode_rows_are_named_not_summarised(tmp_path, field, row, value, message):
    """analyze summarised any episodes table: a length of 1e15 gave a mean of 2.6e13, a
    repeated row counted twice, a return of 1.7e308 failed deep in matplotlib after the
    new summary had replaced the last analysis's."""
    path = _training_like_file(trajlog.rank_file(tmp_path, 0))
    analyze.analyze(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".json", ".png")}
    with h5py.File(path, "r+") as f:
        if field == "episode_id":  # row 1 made a copy of row 0
            for name in trajlog.EPISODE_FIELDS:
                f["episodes"][name][1] = f["episodes"][name][0]
        else:
            f["episodes"][field][row] = value
    with pytest.raises(trajlog.TrajectoryLogError, match=message):
        analyze.analyze(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".json", ".png")} == before


@pytest.mark.parametrize("schedule, value, message", [
    ("a2c", -1, r"steps/env_id row 7 \(\[-1, 1\]\) differs from row 0"),
    ("a2c", 5, r"steps/env_id row 7 \(\[5, 1\]\) differs from row 0"),
    ("impala", 5, r"steps/env_id row 7 \(\[5, 1\]\) holds ids outside this rank's environments 0..1"),
    ("impala", -2, r"steps/env_id row 7 \(\[-2, 1\]\) holds ids outside"),
])
def test_a_damaged_step_env_id_is_named_not_dropped(tmp_path, schedule, value, message):
    """A step whose env_id was -1 was left out of the action counts without a word, and
    any other id was counted as if right."""
    path = _training_like_file(trajlog.rank_file(tmp_path, 0), schedule=schedule)
    analyze.analyze(tmp_path, plots=False)
    with h5py.File(path, "r+") as f:
        f["steps/env_id"][7, 0] = value
    with pytest.raises(trajlog.TrajectoryLogError, match=message):
        analyze.analyze(tmp_path, plots=False)


def test_an_impala_rank_file_with_answering_environments_reads(tmp_path):
    """-1 (no environment answered in that column) and the rank's own ids are an impala
    log's rows, not damage; rank 1's environments are 2 and 3."""
    path = _training_like_file(trajlog.rank_file(tmp_path, 1), schedule="impala", rank=1)
    with h5py.File(path, "r+") as f:
        f["steps/env_id"][3] = [3, -1]
        f["steps/env_id"][4] = [-1, 2]
    summary = analyze.analyze(path, plots=False)
    assert summary["overall"]["episodes"] == 4
    assert sum(summary["overall"]["action_counts"]) == 40 * 2 - 2


def test_a_resumed_impala_file_is_checked_against_the_environments_of_each_stretch(tmp_path):
    """An impala rank file resumed with another rank count goes on with other ids (rank 1:
    2..3, then 4..7); its config, written at its start, cannot say so and analyze checked
    no id of such a file. The writer records each stretch's ids (`env_ranges`), a resume
    dropping those of the timeline it replaces."""
    path = trajlog.rank_file(tmp_path, 1)
    rng = np.random.default_rng(3)
    attrs = {"game": "pong", "rank": 1, "world_size": 2,
             "config": {"num_envs": 2, "schedule": "impala", "max_episode_frames": 4000}}
    with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4, attrs=attrs, env_ids=(2, 4)) as w:
        for s in range(20):
            w.append_step(**fake_step(rng, s, 2, 4, env_offset=2))
            if s == 5:
                w.append_episode(3, 0, 1.0, 6, 0, 20)  # ends at frame 20: env 3 is the first stretch's
    for resume_at, env_ids in ((60, (6, 10)), (40, (4, 8))):  # the second replaces the first's stretch
        with trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4, resume_after_frame=resume_at,
                                      resume_expected_rows=resume_at // 4 + 1, env_ids=env_ids) as w:
            for s in range(resume_at // 4 + 1, 30):
                w.append_step(**fake_step(rng, s, 2, 4, env_offset=4 + s % 3))
                if s % 10 == 9:
                    w.append_episode(4 + s % 3, s // 10, float(s), 10, s * 4 - 36, s * 4)
    with trajlog.open_trajectory_file(path) as f:
        assert trajlog.json_list_attr(f, "env_ranges") == [[0, 2, 4], [40, 4, 8]]
    summary = analyze.analyze(path, plots=False)
    assert sum(summary["overall"]["action_counts"]) == 30 * 2 and summary["overall"]["episodes"] == 3
    with h5py.File(path, "r+") as f:
        f["episodes/env_id"][0] = 5  # a later stretch's environment, at frame 20
    with pytest.raises(trajlog.TrajectoryLogError, match=r"episodes/env_id is outside this rank's environments "
                                                         r"2..3 \(from frame 0 on"):
        analyze.analyze(path, plots=False)
    with h5py.File(path, "r+") as f:
        f["episodes/env_id"][0] = 3
    for row, value, stretch in ((25, 9, r"4..7 \(from frame 40 on"), (2, 7, r"2..3 \(from frame 0 on")):
        with h5py.File(path, "r+") as f:  # 9: no stretch's; 7: the later stretch's, in the first
            real = int(f["steps/env_id"][row, 1])
            f["steps/env_id"][row, 1] = value
        with pytest.raises(trajlog.TrajectoryLogError, match=rf"steps/env_id row {row} \(\[\d+, {value}\]\) holds "
                                                             rf"ids outside this rank's environments {stretch}"):
            analyze.analyze(path, plots=False)
        with h5py.File(path, "r+") as f:
            f["steps/env_id"][row, 1] = real
    analyze.analyze(path, plots=False)
    for damaged in ("[[0, 5, 2]]", "[[0, 0, 4294967296]]", '{"a": 1}'):  # a range of 4G ids: no 32 GB array
        with h5py.File(path, "r+") as f:
            f.attrs["env_ranges"] = damaged
        with pytest.raises(trajlog.TrajectoryLogError, match="its 'env_ranges' attribute is not a list"):
            analyze.analyze(path, plots=False)
    before = path.read_bytes()
    with pytest.raises(trajlog.TrajectoryLogError, match="its 'env_ranges' attribute is not a list"):
        trajlog.TrajectoryWriter(path, batch_size=2, num_actions=4, resume_after_frame=40, resume_expected_rows=11,
                                 env_ids=(4, 8))
    assert path.read_bytes() == before  # refused before the resume cut anything


def test_a_plot_that_cannot_be_drawn_is_an_error_naming_the_logs_and_writes_nothing(tmp_path, monkeypatch):
    path = _training_like_file(trajlog.rank_file(tmp_path, 0))
    import matplotlib.figure

    def fail(*args, **kwargs):
        raise ValueError("arange: cannot compute length")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", fail)
    with pytest.raises(trajlog.TrajectoryLogError, match=rf"{tmp_path}: cannot draw returns.png from these "
                                                         rf"logs \(arange: cannot compute length\)"):
        analyze.analyze(tmp_path)
    assert not list(tmp_path.glob("*.png")) and not (tmp_path / "summary.json").exists()
    assert path.is_file()
