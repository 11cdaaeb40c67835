"""The side-by-side verifier itself: exact on identical emulators, precise on a planted fault."""
import os
import pathlib

import pytest

from hybridsim import roms, verify

ale_py = pytest.importorskip("ale_py")
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


class FaultyALE(ale_py.ALEInterface):
    """ale-py with one planted fault after `at` frames."""

    def __init__(self, kind, at):
        super().__init__()
        self.kind, self.at, self.frames = kind, at, 0

    def act(self, action, strength=1.0):
        self.frames += 1
        reward = super().act(action, strength)
        return reward + 1 if self.kind == "reward" and self.frames == self.at else reward

    def getRAM(self, *args):
        ram = super().getRAM(*args)
        if self.kind == "ram" and self.frames >= self.at:
            ram = ram.copy()
            ram[5] ^= 1
        return ram

    def getScreenRGB(self, *args):
        rgb = super().getScreenRGB(*args)
        if self.kind == "rgb" and self.frames >= self.at:
            rgb = rgb.copy()
            rgb[100, 7, 2] ^= 4
        return rgb


def test_identical_emulators_are_exact():
    result = verify.verify(ale_py.ALEInterface, ale_py.ALEInterface, roms.rom_path("breakout"),
                           game="breakout", frames=300, reset_every=120)
    assert result.exact, str(result)
    assert result.frames == 300 and result.resets >= 2


@pytest.mark.parametrize("kind,at,field,detail", [
    ("reward", 17, "reward", "reference 0, candidate 1"),
    ("ram", 40, "RAM", "byte $85"),
    ("rgb", 60, "getScreenRGB", "at (100, 7, 2)"),
])
def test_planted_faults_are_reported_where_they_are(kind, at, field, detail):
    result = verify.verify(ale_py.ALEInterface, lambda: FaultyALE(kind, at),
                           roms.rom_path("pong"), game="pong", frames=200, full_every=10)
    assert not result.exact
    assert result.divergence.field == field
    assert detail in result.divergence.detail
    expected_frame = at if kind != "rgb" else ((at + 9) // 10) * 10
    assert result.divergence.frame == expected_frame


@pytest.mark.parametrize("args,message", [
    (["verify", "--games", "pong", "--frames", "0"], "--frames must be >= 1"),
    (["verify", "--games", "pong", "--screen-every", "0"], "--screen-every must be >= 1"),
    (["verify", "--games", "pong", "--seed", "-1"], "--seed must be >= 0"),
    (["verify", "--games", ","], "names no game"),
    (["verify", "--games", "pong,Pong"], "--games names 'pong' twice"),  # verified twice, "2 of 2 exact"
    (["verify", "--games", "/etc/passwd"], "--games: '/etc/passwd': unknown game 'etc_passwd'"),
    (["verify", "--games", "combat"], "no game settings"),
    (["bench", "--single", "--frames", "0"], "--frames must be >= 1"),
    (["bench", "--vector", "--rounds", "0"], "--rounds must be >= 1"),
    (["bench", "--vector", "--thread-affinity-offset", "-2"], "--thread-affinity-offset must be >= -1"),
])
def test_cli_refuses_checks_that_would_check_nothing(args, message, capsys):
    """verify and bench never report success for zero frames, zero games or zero rounds."""
    from hybridsim.cli import main
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_verify_takes_game_names_as_train_does(capsys):
    from hybridsim.cli import main
    assert main(["verify", "--games", "Pong", "--frames", "30"]) == 0
    assert "pong: exact" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["bench", "--games", "freeway"], "--games applies to --single or --vector or --train, which is not given"),
    (["bench", "--vector", "--train-frames", "100"], "--train-frames applies to --train"),
    (["bench", "--single", "--recipe", "pong-cpu"], "--recipe applies to --train"),
    (["bench", "--single", "--rounds", "2"], "--rounds applies to --vector or --train"),
    (["bench", "--train", "--vector"], "--train runs as train does"),
    (["bench", "--train", "--train-frames", "0"], "--train-frames must be >= 1"),
    (["bench", "--train", "--recipe", "no-such-recipe"], "config file not found: no-such-recipe"),
    (["bench", "--train", "--recipe", "IMPALA_TOML"], "trains with the impala schedule"),
    (["verify", "--games", "pong", "--jobs", "-1"], "--jobs must be >= 0"),
    (["bench", "--frames", "100"], "--frames applies to --single"),
    (["bench", "--vector", "--sound"], "--sound applies to --single"),
    (["bench", "--single", "--num-envs", "8"], "--num-envs applies to --vector"),
    (["bench", "--vector", "--scaling", "1,two"], "--scaling: 'two' is not a positive integer"),
    (["bench", "--vector", "--scaling", "0"], "--scaling: '0' is not a positive integer"),
    (["bench", "--single", "--games", "pong,pongg"], "unknown game 'pongg' (did you mean 'pong'?)"),
    (["bench", "--single", "--batch-size", "8"], "--batch-size applies to --vector"),
    (["bench", "--single", "--thread-affinity-offset", "0"], "--thread-affinity-offset applies to --vector"),
    (["bench", "--vector", "--num-envs", "4", "--batch-size", "5"], "--batch-size 5 must be <= --num-envs 4"),
    (["bench", "--vector", "--envpool-python", "/nonexistent/python"],
     "--envpool-python /nonexistent/python: not an interpreter that can import envpool"),
    (["verify", "--games", "pong", "--mode", "99"], "pong: --mode 99 is not one of its modes"),
    (["verify", "--games", "pong", "--difficulty", "7"], "pong: --difficulty 7 is not one of its difficulties"),
    (["verify", "--games", "pong", "--seed", str(2**31)], "--seed must be < 2**31"),
    (["info", "--brief", "--json"], "--brief prints one fixed line"),
    (["info", "--brief", "--sections", "host"], "--brief prints one fixed line"),
])
def test_cli_refuses_options_it_would_ignore_or_misread(args, message, capsys, tmp_path):
    """Each of these used to run and quietly do something else (time the 6507 core instead
    of the game, skip EnvPool's column, fail deep in ale-py or in the scaling table)."""
    from hybridsim.cli import main
    if "IMPALA_TOML" in args:
        (tmp_path / "impala.toml").write_text('schedule = "impala"\n')
        args = [str(tmp_path / "impala.toml") if a == "IMPALA_TOML" else a for a in args]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_bench_vector_refuses_too_many_environments_before_printing_its_table(capsys, monkeypatch):
    """The refusal came after the table's header, as if the timing had started."""
    from hybridsim import vector
    from hybridsim.cli import main
    real = vector.AtariVectorEnv

    def out_of_memory(game, num_envs, *args, **kwargs):
        if num_envs > 1:
            raise MemoryError("cannot allocate the environment table")
        return real(game, num_envs, *args, **kwargs)

    monkeypatch.setattr(vector, "AtariVectorEnv", out_of_memory)
    assert main(["bench", "--vector", "--games", "pong", "--num-envs", "64"]) == 2
    captured = capsys.readouterr()
    assert "--num-envs 64: the environments do not fit in this machine's memory" in captured.err
    assert "vector envs" not in captured.out and "hybridsim" not in captured.out, captured.out


@pytest.mark.parametrize("args", [["verify", "--games", "pong", "--all"],
                                  ["eval", "checkpoint.pt", "--random", "--greedy"]])
def test_cli_refuses_exclusive_options_together(args, capsys):
    from hybridsim.cli import main
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_bench_single_with_sound_reads_the_samples(capsys, monkeypatch):
    """`bench --single --sound`: both sides load with sound_obs and read each act's samples."""
    from hybridsim import ale
    from hybridsim.cli import main
    reads = []
    real = ale.ALEInterface.getAudio
    monkeypatch.setattr(ale.ALEInterface, "getAudio", lambda self, buffer=None: reads.append(
        self.getBool("sound_obs")) or real(self, buffer))
    assert main(["bench", "--single", "--sound", "--games", "space_invaders", "--frames", "20"]) == 0
    assert "with sound_obs and getAudio()" in capsys.readouterr().out
    assert len(reads) == 40 and all(reads)  # act() alone, then with the screen read


def test_bench_single_reads_the_screen_as_an_agent_does(capsys, monkeypatch):
    """`act()` alone favours hybridsim (it draws only frames whose screen is read): bench
    also times both sides reading the RGB screen after every N acts, a frame skip's step."""
    import ale_py

    from hybridsim import ale
    from hybridsim.cli import main
    reads = {"hybridsim": 0, "ale-py": 0}
    for name, cls in (("hybridsim", ale.ALEInterface), ("ale-py", ale_py.ALEInterface)):
        def counting(self, buffer=None, real=cls.getScreenRGB, name=name):
            reads[name] += 1
            return real(self, buffer)
        monkeypatch.setattr(cls, "getScreenRGB", counting)
    assert main(["bench", "--single", "--games", "pong", "--frames", "40", "--screen-every", "4"]) == 0
    out = capsys.readouterr().out
    assert "then with getScreenRGB() after every 4 acts" in out and len(out.splitlines()[-1].split()) == 8
    assert reads == {"hybridsim": 10, "ale-py": 10}
    assert main(["bench", "--single", "--games", "pong", "--frames", "40", "--screen-every", "0"]) == 0
    assert "getScreenRGB" not in capsys.readouterr().out and reads == {"hybridsim": 10, "ale-py": 10}


def test_bench_vector_plays_each_game_s_own_actions(capsys):
    """The scaling table drew actions 0-3 for every game but pong; freeway has 3."""
    from hybridsim.cli import main
    assert main(["bench", "--vector", "--games", "freeway", "--num-envs", "2", "--steps", "2",
                 "--rounds", "1", "--scaling", "1"]) == 0
    out = capsys.readouterr().out
    assert "threads scaling (freeway" in out and out.rstrip().splitlines()[-1].split()[0] == "1"


def test_bench_vector_times_async_mode(capsys):
    """--batch-size below --num-envs: every side is timed in async mode (send/recv)."""
    from hybridsim.cli import main
    assert main(["bench", "--vector", "--games", "breakout", "--num-envs", "4", "--batch-size", "2",
                 "--steps", "3", "--rounds", "1", "--scaling", "1"]) == 0
    out = capsys.readouterr().out
    assert "vector envs (async, batches of 2): 4 envs" in out and "threads scaling (breakout" in out


def test_bench_vector_pins_every_side(capsys, monkeypatch):
    """--thread-affinity-offset reaches hybridsim's, ale-py's and EnvPool's constructors."""
    from hybridsim import bench
    from hybridsim.cli import main
    made = []
    real_time_vector, real_time_envpool = bench._time_vector, bench._time_envpool

    def time_vector(make, *args):
        env = make()
        made.append((type(env).__module__, getattr(env, "worker_cores", "ale-py")))
        env.close()
        return real_time_vector(make, *args)

    def time_envpool(*args):
        made.append(("envpool", args[-1]))
        return real_time_envpool(*args)
    monkeypatch.setattr(bench, "_time_vector", time_vector)
    monkeypatch.setattr(bench, "_time_envpool", time_envpool)
    assert main(["bench", "--vector", "--games", "pong", "--num-envs", "2", "--threads", "1", "--steps", "2",
                 "--rounds", "1", "--scaling", "", "--thread-affinity-offset", "0"]) == 0
    assert "workers pinned from core offset 0" in capsys.readouterr().out
    first = sorted(os.sched_getaffinity(0))[0]
    assert ("hybridsim.vector", [first]) in made and any(m[0].startswith("ale_py") for m in made)
    if bench.find_envpool_python() is not None:
        assert ("envpool", 0) in made


def _roms_with_a_foreign_pong(tmp_path, data: bytes):
    """A copy of the installed ROM directory whose pong.bin holds `data`."""
    rom_dir = tmp_path / "roms"
    rom_dir.mkdir()
    for path in roms.roms_dir().glob("*.bin"):
        (rom_dir / path.name).symlink_to(path)
    (rom_dir / "pong.bin").unlink()
    (rom_dir / "pong.bin").write_bytes(data)
    return rom_dir


def test_verify_refuses_a_rom_ale_py_does_not_ship(tmp_path):
    """ale-py spins forever inside loadROM on such an image (and ignores Ctrl-C)."""
    import subprocess
    import sys
    rom_dir = _roms_with_a_foreign_pong(tmp_path, bytes(range(256)) * 16)
    result = subprocess.run([sys.executable, "-m", "hybridsim", "verify", "--games", "pong",
                             "--frames", "10"], capture_output=True, text=True, timeout=60,
                            env={**__import__("os").environ, "ALE_ROMS_DIR": str(rom_dir)})
    assert result.returncode == 2, result.stderr
    assert "pong.bin is an image ale-py does not ship" in result.stderr
    assert "not the 'pong' ROM of ale-py 0.12.1 (md5 60e0ea3cbe0913d39803477945e9e5ec)" in result.stderr


def test_hybridsim_warns_when_a_game_s_rom_is_another_image(tmp_path, monkeypatch):
    pytest.importorskip("hybridsim._vector")
    from hybridsim.vector import AtariVectorEnv
    breakout = roms.read_rom(roms.rom_path("breakout"))
    monkeypatch.setenv("ALE_ROMS_DIR", str(_roms_with_a_foreign_pong(tmp_path, breakout)))
    with pytest.warns(RuntimeWarning, match="pong.bin is the 'breakout' ROM"):
        AtariVectorEnv("pong", 1).close()


def test_verify_sound_compares_every_act_s_samples(capsys):
    """`verify --sound`: exact on a game that makes sound; one altered sample of the
    candidate is named as a getAudio divergence at its frame."""
    import ale_py
    from hybridsim import roms, verify
    from hybridsim.ale import ALEInterface
    from hybridsim.cli import main
    assert main(["verify", "--games", "space_invaders", "--frames", "300", "--sound"]) == 0
    assert "space_invaders: exact" in capsys.readouterr().out

    class OneSampleOff(ALEInterface):
        acts = 0

        def act(self, *args, **kwargs):
            self.acts += 1
            return super().act(*args, **kwargs)

        def getAudio(self, buffer=None):
            samples = super().getAudio()
            if self.acts == 120:
                samples[37] ^= 4
            return samples
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    result = verify.verify(ale_py.ALEInterface, OneSampleOff, roms.rom_path("space_invaders"),
                           frames=300, sound=True)
    assert (result.divergence.frame, result.divergence.field) == (120, "getAudio")
    assert "at (37,)" in result.divergence.detail
    assert verify.verify(ale_py.ALEInterface, OneSampleOff, roms.rom_path("space_invaders"),
                         frames=300).exact  # without sound the samples are not compared


def test_verify_jobs_prints_what_one_process_prints_in_game_order(capsys):
    """--jobs compares games in worker processes and prints each result in the games'
    order; a divergence travels back whole (pickled)."""
    from hybridsim.cli import main
    args = ["verify", "--games", "breakout,pong,seaquest", "--frames", "600", "--screen-every", "3"]
    assert main(args) == 0
    alone = capsys.readouterr().out
    assert main(args + ["--jobs", "2"]) == 0
    assert capsys.readouterr().out == alone
    assert alone.splitlines()[0].startswith("breakout: exact (600 frames")
    import pickle
    faulty = verify.verify(ale_py.ALEInterface, lambda: FaultyALE("ram", 40), roms.rom_path("pong"),
                           game="pong", frames=100)
    assert str(pickle.loads(pickle.dumps(faulty))) == str(faulty) and "RAM" in str(faulty)


def _verify_with_two_workers(tmp_path):
    """A long `verify --jobs 2` in a session of its own, once both workers run."""
    import subprocess
    import sys
    import time
    proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "verify", "--games", "pong,breakout,seaquest",
                             "--frames", "2000000", "--jobs", "2"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = []
    for _ in range(600):  # the workers start (spawn) within a few seconds
        children = pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        pids = children.read_text().split() if children.exists() else []
        workers = [int(p) for p in pids if b"spawn_main" in pathlib.Path(f"/proc/{p}/cmdline").read_bytes()]
        if len(workers) == 2:
            break
        time.sleep(0.05)
    assert len(workers) == 2, workers
    time.sleep(1.0)  # inside their games
    return proc, workers


def _gone_soon(pids, seconds=20.0) -> bool:
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if pathlib.Path(f"/proc/{p}").exists()
                 and "State:\tZ" not in pathlib.Path(f"/proc/{p}/status").read_text()]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_verify_jobs_names_a_worker_that_died(tmp_path):
    """A worker killed mid-game (the OOM killer, a cluster's limits) ends verify with an
    error naming the games not finished, after the ones that were."""
    import signal
    proc, workers = _verify_with_two_workers(tmp_path)
    try:
        os.kill(workers[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 2, (out, err)
    assert "--jobs: a worker process died (killed, or out of memory) while pong or a game after it" in err, err
    assert "Traceback" not in err and _gone_soon(workers)


def test_verify_jobs_workers_end_with_verify(tmp_path):
    """A verify killed alone (SIGTERM from `timeout` or a scheduler) left its workers
    comparing games for nobody. (Ctrl-C to the process group hung in two fresh-clone CI
    runs and in none here; not yet understood, so not tested yet.)"""
    proc, workers = _verify_with_two_workers(tmp_path)
    try:
        proc.terminate()
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert _gone_soon(workers), workers
