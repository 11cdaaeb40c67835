"""The `hybridsim` command line."""
from __future__ import annotations

import argparse
import functools
import math
import pathlib
import signal
import sys

PREEMPTED_EXIT_CODE = 3  # training stopped by SIGUSR1/SIGTERM after writing a checkpoint
STORAGE_EXIT_CODE = 4  # a write into the run directory failed (disk full, quota): stopped cleanly
TRAIN_EXIT_CODES = f"""exit status: 0 trained to the budget; 2 bad settings or an error; \
{PREEMPTED_EXIT_CODE} stopped by SIGUSR1/SIGTERM after a checkpoint (run again with --resume); \
{STORAGE_EXIT_CODE} a write into the run directory failed (disk full, quota exceeded, I/O \
error): training stopped, a final checkpoint was written to log_dir, or to --fallback-dir \
when log_dir is full, or the message says it could not be; the trajectory files are closed \
and hold every logged step; free space and run again with --resume; 130 interrupted by \
Ctrl-C (the last checkpoint written stays; --resume continues from it)."""


def _cmd_bench(args) -> int:
    from hybridsim import bench
    _given_paths(args, "envpool_python", "recipe")  # ("" ran this interpreter)
    if args.train and (args.cpu or args.single or args.vector):
        # train's OpenMP rule (main) would change the engine timings on a busy machine
        raise ValueError("--train runs as train does (OpenMP threads wait passively on busy CPUs); "
                         "time --cpu, --single or --vector in a run of their own")
    _require_at_least(args, frames=1, num_envs=1, threads=0, steps=1, rounds=1, batch_size=0,
                      thread_affinity_offset=-1, screen_every=0, train_frames=1)
    _refuse_unused(args, {"single": ("frames", "sound", "screen_every"),
                          "vector": ("num_envs", "threads", "steps", "scaling",
                                     "envpool_python", "batch_size", "thread_affinity_offset"),
                          "train": ("recipe", "train_frames"),
                          "vector or train": ("rounds",),
                          "single or vector or train": ("games",)})
    # (numpy named no option: "Maximum allowed dimension exceeded", or a traceback)
    for option, bound in (("num_envs", 2**20), ("steps", 2**40), ("rounds", 2**20), ("threads", 2**16),
                          ("thread_affinity_offset", 2**16)):
        if getattr(args, option) >= bound:
            raise ValueError(f"--{option.replace('_', '-')} must be < {bound:,}, got {getattr(args, option)}")
    if args.batch_size > args.num_envs:
        raise ValueError(f"--batch-size {args.batch_size} must be <= --num-envs {args.num_envs} "
                         f"(0: synchronous)")
    games = _game_list(args.games) if args.games else None
    threads = _count_list("--scaling", args.scaling)
    if args.single:
        import ale_py
        from hybridsim.ale import ALEInterface
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        bench.bench_single(ale_py.ALEInterface, ALEInterface, games=games or bench.SINGLE_GAMES,
                           frames=args.frames, sound=args.sound, screen_every=args.screen_every)
    if args.vector:
        try:
            bench.bench_vector(games=games or bench.VECTOR_GAMES, num_envs=args.num_envs,
                               threads=args.threads, steps=args.steps, rounds=args.rounds,
                               envpool_python=args.envpool_python, scaling_threads=threads or None,
                               batch_size=args.batch_size, thread_affinity_offset=args.thread_affinity_offset)
        except MemoryError as exc:
            raise ValueError(f"--num-envs {args.num_envs:,}: the environments do not fit in this "
                             f"machine's memory ({exc})") from None
    if args.train:
        bench.bench_train(games=games, recipe=args.recipe, frames=args.train_frames, rounds=args.rounds)
    if args.cpu or not (args.single or args.vector or args.train):
        bench.bench_cpu()
    return 0


def _refuse_unused(args, by_mode: dict) -> None:
    """An option set away from its default for a mode that is not chosen is an error:
    `bench --games freeway` alone would time the 6507 core and ignore the game."""
    for modes, options in by_mode.items():
        if any(getattr(args, m) for m in modes.split(" or ")):
            continue
        for option in options:
            if getattr(args, option) != args.default_of(option):
                flags = " or ".join(f"--{m}" for m in modes.split(" or "))
                raise ValueError(f"--{option.replace('_', '-')} applies to {flags}, "
                                 f"which is not given")


def _game_list(text: str) -> list[str]:
    """'Pong, space-invaders' -> ['pong', 'space_invaders'], each a known game."""
    from hybridsim import games_table, roms
    typed = [n.strip() for n in text.split(",") if n.strip()]
    if not typed:
        raise ValueError(f"--games {text!r} names no game")
    names = []
    for given in typed:
        name = roms.snake_case(given)
        try:
            games_table.by_name(name)  # unknown: ValueError listing the known games
        except ValueError as exc:  # say the name as given (/etc/passwd read as 'etc_passwd')
            raise ValueError(f"--games: {given!r}: {exc}") from None
        if name in names:  # pong,pong ran and counted pong twice
            raise ValueError(f"--games names {name!r} twice")
        names.append(name)
    return names


def _count_list(option: str, text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4], each a positive integer."""
    counts = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"{option}: {item!r} is not a positive integer (give e.g. 1,2,4)")
        counts.append(int(item))
    return counts


def _require_at_least(args, **lows) -> None:
    """Numeric options below their least sensible value are errors (zero frames would
    report success having checked or timed nothing)."""
    for name, low in lows.items():
        if getattr(args, name) < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")


def _verify_game(name: str, options: dict):
    """One game of `verify`, in this process or a --jobs worker."""
    import ale_py
    from hybridsim import roms, verify
    from hybridsim.ale import ALEInterface
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    return verify.verify(ale_py.ALEInterface, ALEInterface, roms.rom_path(name), game=name, **options)


def _start_verify_worker() -> None:
    """A --jobs worker leaves Ctrl-C to verify itself, which ends the workers, and dies with
    it (Linux's PR_SET_PDEATHSIG): a verify killed by a scheduler or `timeout` leaves no
    worker comparing games for nobody."""
    import ctypes
    import os
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's own exit paths still end them
        return
    if os.getppid() == 1:  # the parent died before the prctl
        os._exit(1)


def _verified(names: list, options: dict, jobs: int):
    """Each game's VerifyResult in the order of `names`, each as soon as it and the ones
    before it are done; jobs > 1 compares that many games at once in worker processes."""
    if jobs <= 1 or len(names) <= 1:
        for name in names:
            yield _verify_game(name, options)
        return
    import concurrent.futures
    import multiprocessing
    # spawn: a fork would copy this process's ale-py and OpenMP state into each worker
    pool = concurrent.futures.ProcessPoolExecutor(min(jobs, len(names)), initializer=_start_verify_worker,
                                                  mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = [pool.submit(_verify_game, name, options) for name in names]
        for name, future in zip(names, futures):
            try:
                yield future.result()
            except concurrent.futures.process.BrokenProcessPool:
                raise RuntimeError(f"--jobs: a worker process died (killed, or out of memory) while "
                                   f"{name} or a game after it was compared; the games above are "
                                   f"complete") from None
    except BaseException:  # Ctrl-C, an error, a closed stdout: end the games under way too
        for worker in list((getattr(pool, "_processes", None) or {}).values()):
            worker.kill()
        # no waiting here: a wait hung once in CI after a Ctrl-C; the executor's own thread
        # sees the killed workers and ends
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _cmd_verify(args) -> int:
    import os

    from hybridsim import games_table
    if args.all:  # ale-py cannot load the games ALE has no settings for
        names = [g["name"] for g in games_table.games() if g.get("ale_settings", True)]
    elif args.games:
        names = _game_list(args.games)  # Pong, SpaceInvaders: as train --game takes them
    else:
        raise ValueError("name games with --games a,b or pass --all")
    _require_at_least(args, frames=1, screen_every=1, reset_every=0, seed=0, jobs=0)
    if args.seed >= 2**31:  # ALE's random_seed is a C int
        raise ValueError(f"--seed must be < 2**31 (ALE's random_seed is a C int), got {args.seed}")
    for name in names:
        games_table.require_ale_py_loadable(name, "verify compares with ale-py")
        entry = games_table.by_name(name)
        for option, value, valid, plural in (("--mode", args.mode, entry["modes"], "modes"),
                                             ("--difficulty", args.difficulty, entry["difficulties"],
                                              "difficulties")):
            if value is not None and value not in valid:
                raise ValueError(f"{name}: {option} {value} is not one of its {plural} {valid}")
    options = dict(frames=args.frames, repeat_action_probability=args.sticky, seed=args.seed,
                   reset_every=args.reset_every, mode=args.mode, difficulty=args.difficulty,
                   screen_every=args.screen_every, sound=args.sound)
    inexact = 0
    for result in _verified(names, options, args.jobs or len(os.sched_getaffinity(0))):
        print(result, flush=True)
        inexact += not result.exact
    print(f"{len(names) - inexact} of {len(names)} games exact")
    return 1 if inexact else 0


def _given_paths(args, *names) -> None:
    """An empty path on the command line is an error, not "the current directory" (analyze
    '', eval '') or "not given" (--gif ''); so is one of blanks alone (--gif '  ' wrote a
    file named two spaces: a quoting slip, not a name)."""
    for name in names:
        value = getattr(args, name, None)
        for one in value if isinstance(value, list) else [value]:
            if isinstance(one, str) and not one.strip():
                flag = name if name in ("target", "checkpoint", "file", "output", "dest") else f"--{name.replace('_', '-')}"
                raise ValueError(f"{flag}: an empty path; name a file or directory")


def _cmd_analyze(args) -> int:
    from hybridsim import analyze
    _given_paths(args, "target", "out")
    summary = analyze.analyze(args.target, out_dir=args.out or None, plots=not args.no_plots)
    if args.json:
        print(analyze.to_json(summary))
    else:
        print(analyze.format_summary(summary))
        print(f"summary: {summary['summary_file']}")
        for path in summary.get("plots", []):
            print(f"plot: {path}")
    return 0


def _cmd_replay(args) -> int:
    from hybridsim import replay, storage
    _given_paths(args, "file", "gif", "png_dir", "npz")
    _refuse_unused(args, {"gif or npz": ("overwrite",)})
    with storage.new_directories_undone_on_error(args.png_dir):
        replay.check_outputs(gif=args.gif or None, png_dir=args.png_dir or None,
                             overwrite=args.overwrite, npz=args.npz or None)
        result = replay.replay(args.file, args.episode, env=args.env, keep_transitions=bool(args.npz),
                               keep_frames=bool(args.gif or args.png_dir),
                               scratch_dir=pathlib.Path(args.npz).resolve().parent if args.npz else None)
    print(f"env {result.env_id} episode {result.episode_id}: {result.steps} steps, "
          f"return {result.episode_return:g}, replayed on {result.backend}")
    if not result.reproduced:
        for line in result.mismatches:
            print(f"MISMATCH {line}")
        print("the replay does NOT reproduce the log")
        return 1
    print("reproduced: every replayed reward, episode end, lives count and logged observation matches the log")
    for path in replay.save_frames(result.frames, gif=args.gif or None, png_dir=args.png_dir or None,
                                   overwrite=args.overwrite):
        print(f"wrote {path}")
    if args.npz:
        replay.save_transitions(result, args.npz, args.file, overwrite=args.overwrite)
        print(f"wrote {args.npz} ({result.steps} transitions: observations, actions, rewards, "
              f"terminated, truncated, lives, behavior_logits, global_frame, final_observation)")
    return 0


def _cmd_export(args) -> int:
    from hybridsim import export
    _given_paths(args, "file", "output")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be 1 or more, got {args.jobs}")
    if pathlib.Path(args.file).is_dir():
        return _export_run(args)
    if args.jobs != 1:
        raise ValueError(f"--jobs {args.jobs}: exports the rank files of a run directory side by side; "
                         f"{args.file} is one file")
    try:
        with export.record_stops():  # (one while the export is set up stops it before its first row)
            summary = export.export_dataset(args.file, args.output, env=args.env, compression=args.compression,
                                            overwrite=args.overwrite,
                                            report=lambda text: print(f"export: {text}", file=sys.stderr,
                                                                      flush=True))
    except export.ExportMismatch as exc:  # as replay: 1 for a log the emulator does not reproduce
        print(f"MISMATCH {exc}")
        print("the re-emulation does NOT reproduce the log")
        return 1
    print(_export_done(summary))
    print(f"wrote {args.output}")
    return 0


def _export_done(summary) -> str:
    return (f"re-emulated {summary['rows']:,} steps of {summary['environments']} environments "
            f"({summary['episodes_ended']} episode ends) in {summary['seconds']:.1f} s; every reward, "
            f"episode end, lives count and logged observation matches the log")


def _export_ended(at: str, written: list, pairs: list, output) -> None:
    print(f"the export ended{at}, with {len(written)} of {len(pairs)} datasets written into {output}",
          file=sys.stderr, flush=True)


def _export_run(args) -> int:
    """Every rank file of a run directory, one after another or `--jobs` at a time (each
    re-emulation steps its rank's environments with the run's threads). A rank whose log
    the emulator does not reproduce, or that cannot be exported (an asynchronous or damaged
    log), is reported and the others go on: status 1 if some did not match, 2 if some
    failed. A stop signal, a full disk or another write error ends the export there; the
    datasets written so far stay."""
    from hybridsim import export
    made = not pathlib.Path(args.output).exists()
    with export.record_stops():  # (a stop from here on ends it cleanly, between ranks too)
        try:
            return _export_ranks(args, export.run_exports(args.file, args.output, overwrite=args.overwrite))
        finally:
            if made:  # a folder it made and wrote nothing into (refused, stopped) goes again
                try:
                    pathlib.Path(args.output).rmdir()
                except OSError:
                    pass


def _export_ranks(args, pairs) -> int:
    from hybridsim import export
    jobs = min(args.jobs, len(pairs))
    options = dict(env=args.env, compression=args.compression, overwrite=args.overwrite)
    mismatched, failed, written, ended = [], [], [], []

    def take(path, out, outcome) -> bool:
        kind, detail = outcome
        if kind == "written":
            written.append(path.name)
            print(f"{path.name}: {_export_done(detail)}; wrote {out}", flush=True)
        elif kind == "mismatch":
            print(f"{path.name}: MISMATCH {detail}", flush=True)
            mismatched.append(path.name)
        elif kind == "failed":
            print(f"{path.name}: not exported: {detail}", flush=True)
            failed.append(path.name)
        else:  # "ended": a full disk; the next ranks would meet it too
            ended.append((path, detail))
        return bool(ended)

    at = ""  # the rank under way, one at a time
    try:
        if jobs > 1:
            export.export_in_parallel(pairs, jobs, take, **options)
        else:
            for path, out in pairs:
                at = f" at {path.name}"
                outcome = export.export_rank(path, out, **options)
                if outcome[0] == "stopped":
                    raise export.stop_exception(outcome[1], "no rank started after it, and the one "
                                                            "it stopped left nothing")
                if take(path, out, outcome):
                    break
    except BaseException:
        _export_ended(at, written, pairs, args.output)
        raise
    if ended:
        path, detail = ended[0]
        _export_ended(f" at {path.name}", written, pairs, args.output)
        raise RuntimeError(detail)
    print(f"wrote {len(written)} of {len(pairs)} datasets into {args.output}"
          + (f"; the re-emulation does NOT reproduce {', '.join(mismatched)}" if mismatched else "")
          + (f"; not exported: {', '.join(failed)}" if failed else ""))
    return 2 if failed else 1 if mismatched else 0


def _cmd_eval(args) -> int:
    from hybridsim import evaluate
    from hybridsim.scores import reference_scores
    _given_paths(args, "checkpoint")
    checkpoints = [kept for path in args.checkpoint for kept in _kept_or_itself(path)]
    if len(checkpoints) > 1 or checkpoints != args.checkpoint:  # a kept folder: a table for any count
        return _eval_several(args, checkpoints)
    r = _evaluate_one(args, args.checkpoint[0])
    if args.json:
        import json
        print(json.dumps(r, indent=2))
        return 0
    policy = ("uniformly random actions" if args.random
              else f"policy trained for {r['frames_trained']:,} frames")
    print(f"{r['game']} on {r['env']}: {r['episodes']} episodes, return {r['mean']:.2f} "
          f"+- {r['std']:.2f} (population std; {policy})")
    if r["human_normalized"] is not None:
        random_score, human_score = reference_scores()[r["game"]]
        protocol = "" if r["reference_protocol"] else f"; {_reference_protocol_words()}"
        print(f"human-normalized: {r['human_normalized']:.1%} (0% is a random agent's {random_score:g}, 100% "
              f"a human tester's {human_score:g}: the Atari-57 reference scores{protocol})")
    print(f"settings: {evaluate.describe_settings(r['settings'])}")
    return 0


def _reference_protocol_words() -> str:
    from hybridsim.scores import REFERENCE_SETTINGS
    return (f"measured with up to {REFERENCE_SETTINGS['noop_max']} no-ops, episodes cut at "
            f"{REFERENCE_SETTINGS['max_episode_frames']:,} frames and no sticky actions, unlike these settings")


def _evaluate_one(args, checkpoint) -> dict:
    from hybridsim import evaluate
    return evaluate.evaluate(checkpoint, episodes=args.episodes, env=args.env,
                             num_envs=args.num_envs, seed=args.seed, greedy=args.greedy,
                             random_policy=args.random, repeat_action_probability=args.sticky,
                             noop_max=args.noop_max, max_episode_frames=args.max_episode_frames)


def _kept_or_itself(path: str) -> list[str]:
    """A folder of checkpoints kept by train --keep-checkpoints (no checkpoint.pt of its own)
    as its checkpoints in the order of their frames; any other path as given."""
    from hybridsim.train import kept_checkpoints
    folder = pathlib.Path(path)
    if not folder.is_dir() or (folder / "checkpoint.pt").exists():
        return [path]
    kept = kept_checkpoints(folder)
    return [str(p) for p in kept] if kept else [path]


def _eval_several(args, checkpoints: list[str]) -> int:
    """eval of several checkpoints (the kept ones of a run: a curve of evaluation returns):
    each is read before any is played, so a damaged one stops the command before its work,
    then one row each, in the order given, all on the same seeds and settings."""
    import json

    from hybridsim import evaluate
    from hybridsim.train import has_nonfinite_weights, read_checkpoint
    games = []
    for path in checkpoints:
        state = read_checkpoint(evaluate.checkpoint_file(path), map_location="cpu")
        if not args.random and has_nonfinite_weights(state["model"]):  # as evaluate refuses it, before any plays
            raise ValueError(f"{path}: its network holds NaN or infinite weights (training diverged)")
        games.append(str(state["config"].get("game", "")))
    width = max(4, *map(len, games))
    if not args.json:
        print(f"{'game':{width}s} {'frames':>13s} {'episodes':>8s} {'return':>10s} {'std':>9s} {'human-norm.':>11s}  "
              f"checkpoint", flush=True)
    results = []
    try:
        for path in checkpoints:
            r = dict(_evaluate_one(args, path), checkpoint=str(path))
            results.append(r)
            if not args.json:
                normalized = "" if r["human_normalized"] is None else f"{r['human_normalized']:.1%}"
                print(f"{r['game']:{width}s} {r['frames_trained']:13,d} {r['episodes']:8d} {r['mean']:10.2f} "
                      f"{r['std']:9.2f} {normalized:>11s}  {path}", flush=True)
    finally:  # a later one's failure, Ctrl-C or a time limit: --json keeps the ones scored, as the table does
        if args.json and results:
            print(json.dumps(results, indent=2), flush=True)
    if args.json:
        return 0
    if all((r["game"], r["settings"]) == (results[0]["game"], results[0]["settings"]) for r in results):
        print(f"{results[0]['game']} on {results[0]['env']}; settings: "
              f"{evaluate.describe_settings(results[0]['settings'])}")
        if results[0]["human_normalized"] is not None and not results[0]["reference_protocol"]:
            print(f"(the human-normalized reference scores: {_reference_protocol_words()})")
    else:
        print(f"on {results[0]['env']}; the checkpoints differ in game or settings: --json gives each")
    return 0


def _cmd_games(args) -> int:
    from hybridsim import games_table
    rows = games_table.games()
    # cart: the mapper and TV: the standard the console detects (both stored in games.json
    # by tools/gen_games.py from the ROMs); settings: whether ALE has game settings for it.
    print(f"{'game':22s} {'md5':32s} {'cart':>10s} {'TV':>4s} {'actions':>7s} {'modes':>5s} "
          f"{'diffs':>5s}  settings")
    for g in rows:
        settings = "ALE" if g.get("ale_settings", True) else "none (no ALE settings)"
        print(f"{g['name']:22s} {g['md5']:32s} {g['mapper']:>10s} {g['tv']:>4s} "
              f"{len(g['minimal_actions']):7d} {len(g['modes']):5d} {len(g['difficulties']):5d}  "
              f"{settings}")
    print(f"{len(rows)} games")
    return 0


def _cmd_launchers(args) -> int:
    import shlex
    from hybridsim import launchers
    if args.dest is None:
        print(launchers.launch_dir())
        return 0
    _given_paths(args, "dest")
    folder, written, replaced = launchers.copy_launch_files(args.dest, overwrite=args.overwrite)
    kept = len(launchers.LAUNCH_FILES) - len(written)
    print(f"wrote {len(written)} launch files into {folder}"
          + (f" ({kept} already there, identical)" if kept else "")
          + (f"; replaced {', '.join(replaced)}" if replaced else ""))
    home = shlex.quote(str(folder.parent))
    # this Python, and pip's MPICH installed for it (which its mpi4py goes with)
    interpreter = f"PYTHON={shlex.quote(sys.executable)}"
    mpiexec = launchers.python_mpiexec()
    if mpiexec:
        interpreter += f" MPIEXEC={shlex.quote(mpiexec)}"
    print("submit a Slurm job (mpi_launch/README.md lists their settings), e.g.\n"
          f"  HYBRIDSIM_DIR={home} {interpreter} GAME=pong LOG_DIR=runs/pong sbatch "
          f"{home}/mpi_launch/slurm/single_node.sbatch\n"
          "or launch the ranks yourself:\n"
          f"  {interpreter} bash {home}/mpi_launch/hybridsim-mpirun --ranks-per-node 2 -- "
          f"--game pong --log-dir runs/pong")
    return 0


def _cmd_info(args) -> int:
    import json
    from hybridsim import sysinfo
    sections = None
    if args.sections is not None:  # given, even empty ("" printed every section)
        sections = [n.strip() for n in args.sections.split(",") if n.strip()]
        if not sections:
            raise ValueError(f"--sections {args.sections!r} names no section; choose from "
                             f"{', '.join(sysinfo.SECTIONS)}")
    unknown = sorted(set(sections or ()) - set(sysinfo.SECTIONS))
    if unknown:
        raise ValueError(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(sysinfo.SECTIONS)}")
    if args.num_threads and not args.brief:
        raise ValueError("--num-threads sets the engine threads --brief shows; the report shows the machine's")
    if args.brief:
        if args.json or sections:
            raise ValueError("--brief prints one fixed line; it takes neither --json nor --sections")
        # one write of line and newline: the launcher merges the ranks' stdout, and print()
        # writes its end separately when stdout is unbuffered (PYTHONUNBUFFERED), so two
        # ranks' lines could interleave
        sys.stdout.write(sysinfo.brief(args.num_threads) + "\n")
        sys.stdout.flush()
        return 0
    report = sysinfo.collect(sections)
    print(json.dumps(report, indent=2) if args.json else sysinfo.format_report(report))
    return 0


_early_stops: list[int] = []  # stop signals that came before the trainer could take them


def _remember_early_stops() -> dict:
    """Slurm sends SIGUSR1 (--signal) before the time limit and SIGTERM on preemption:
    finish the iteration, write a checkpoint, exit with PREEMPTED_EXIT_CODE. One that
    comes while the trainer is built (arguments, environments, a GPU module compile)
    waits for it; by default it would end the rank with no checkpoint and no requeue.
    A second one (a start that hangs) ends it as before. Taken once MPI_Init has
    returned: a handled signal waits for the interpreter, which MPI_Init holds, so no
    signal could end a start hung there. Returns the handlers it replaced."""
    _early_stops.clear()

    def remember(signum, _frame):
        _early_stops.append(signum)
        signal.signal(signum, signal.SIG_DFL)
    return {sig: signal.signal(sig, remember) for sig in (signal.SIGUSR1, signal.SIGTERM)}


def _cmd_train(args) -> int:
    from hybridsim import dist
    from hybridsim.config import build_config
    from hybridsim.train import BudgetReached, TrainConfig, Trainer
    # (main() has taken the stop signals since MPI started: _remember_early_stops)
    # MPI first: a bad setting found on one rank then ends the whole job (main's
    # abort_job) instead of leaving the other ranks waiting for it in a collective.
    comm = dist.init_comm()
    _given_paths(args, "config")  # (build_config reads "" as no file)
    cfg = build_config(TrainConfig, args)
    unused = cfg.unused(set(vars(args)))  # the parser keeps only what the command line set
    if unused:
        raise ValueError(unused)
    try:
        trainer = Trainer(cfg, comm=comm)
    except ValueError as exc:
        raise ValueError(f"{exc}{_config_file_source(args, str(exc))}") from None
    if trainer.rank == 0 and getattr(args, "openmp_note", None):
        print(args.openmp_note, file=sys.stderr, flush=True)
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, trainer.request_stop)
    if _early_stops:
        trainer.request_stop()
    try:
        summary = trainer.train()
    except BudgetReached as done:  # every rank reads the same checkpoint: all end here
        if trainer.rank == 0:
            print(done, flush=True)
            if done.completed:
                print(done.completed, flush=True)
        return 0
    if summary["stopped"] == "storage":
        if summary["rank"] == 0:  # the report covers every rank
            _report_storage_stop(summary)
        return _after_report(trainer, STORAGE_EXIT_CODE)
    if summary["preempted"]:
        if summary["rank"] == 0:
            print(f"stopped by a signal at {summary['frames']:,} frames; checkpoint written to "
                  f"{summary['checkpoint']}; run again with --resume to continue")
        return _after_report(trainer, PREEMPTED_EXIT_CODE)
    if summary["rank"] != 0:  # rank 0 holds the run's episodes and reports for all
        return 0
    print(f"trained {summary['frames']:,} frames in {summary['updates']:,} updates; "
          f"{summary['episodes']} episodes, mean return of the last 100: "
          f"{summary['mean_return_100']:.2f}")
    if summary["episodes"] >= 2:
        first, last = summary["mean_return_first"], summary["mean_return_last"]
        print(f"mean return of the first {summary['window']} episodes {first:.2f}, of the last "
              f"{summary['window']} {last:.2f} ({last - first:+.2f})")
        if summary["human_normalized_last"] is not None:
            print(f"the last {summary['window']} as a human-normalized score: "
                  f"{summary['human_normalized_last']:.1%} (training episodes, with this run's "
                  f"sticky actions and exploration; `hybridsim eval` scores on the reference protocol)")
    print(f"checkpoint: {summary['checkpoint']}")
    print(f"metrics:    {summary['metrics']} (TensorBoard: {cfg.log_dir}/tensorboard)")
    print(f"curve:      {summary['curve']}")
    if summary["trajectories"]:
        print(f"trajectories: {summary['trajectories']} (hybridsim analyze {cfg.log_dir})")
    return 0


def _config_file_source(args, message: str) -> str:
    """Where a refused setting came from when the command line did not give it: an error
    about `lr` or `device` set by --config names the file and the way to override it."""
    from hybridsim.config import load_config_file
    if not getattr(args, "config", None):
        return ""
    name = message.split(" ", 1)[0]
    try:
        from_file = load_config_file(args.config)
    except (OSError, ValueError):
        return ""
    if name not in from_file or name in vars(args):
        return ""
    return (f" ({name} = {from_file[name]!r} comes from --config {args.config}; "
            f"--{name.replace('_', '-')} on the command line overrides it)")


def _after_report(trainer, code: int) -> int:
    """Every rank ends a stop together, once rank 0 has printed its report (run() then
    finalizes MPI, so the stop's status is not taken for a failure)."""
    sys.stdout.flush()
    sys.stderr.flush()
    trainer.comm.barrier()
    return code


def _report_storage_stop(summary: dict) -> None:
    """What a stop after a failed write saved, where, and how to go on (on stderr)."""
    log_dir = summary["log_dir"]
    lines = [f"hybridsim train: STOPPED at {summary['frames']:,} frames because a write into the "
             f"run directory failed:"]
    lines += [f"  {line}" for line in summary["storage_report"]]
    checkpoint = summary["final_checkpoint"]
    default = f"{log_dir}/checkpoint.pt"
    if checkpoint is None:
        lines.append(f"final checkpoint: could NOT be written anywhere; {default} (if present) is the "
                     f"last periodic one, from before the stop")
    elif pathlib.Path(checkpoint) == pathlib.Path(default):
        lines.append(f"final checkpoint: {checkpoint} ({summary['frames']:,} frames)")
    else:
        lines.append(f"final checkpoint: {checkpoint} ({summary['frames']:,} frames), outside "
                     f"{log_dir}, which is full; move it to {default} before --resume")
    if summary["trajectories_closed"]:
        lines.append(f"trajectory logs in {log_dir}: closed, every logged step is in them "
                     f"(hybridsim analyze {log_dir})")
    elif summary["trajectories_closed"] is False:
        lines.append(f"trajectory logs in {log_dir}: NOT all closed cleanly (above); they open in "
                     f"SWMR mode, as hybridsim analyze does, with every row up to their last flush")
    if summary["storage_disk_full"]:
        lines.append(f"free space under {log_dir}, then run the same command with --resume to continue")
    elif summary["storage_some_full"]:  # ranks that ran out of space, and others that failed otherwise
        lines.append(f"some writes failed for want of space and others not: free space under {log_dir} "
                     f"and cure the other cause (above), then run the same command with --resume to continue")
    else:  # a refused write (permissions) or an I/O error (a damaged file): room will not help
        lines.append("the failed write was not for want of space: cure its cause (above), then run "
                     "the same command with --resume to continue")
    print("\n".join(lines), file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    """argparse's, but in an MPI job of several ranks a usage error goes out as the job's
    other errors do (stderr waited on a few seconds, then the job ended): argparse's own
    print would block for ever on stderr on a hung file system, the other ranks waiting."""

    def error(self, message):
        if _in_mpi_job():
            _abort_mpi_job(2, f"{self.format_usage()}{self.prog}: error: {message}")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hybridsim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("bench", help="measure speed (results go in BENCHMARKS.md)")
    p.add_argument("--cpu", action="store_true", help="the 6507 core alone (default)")
    p.add_argument("--single", action="store_true",
                   help="one environment's act(): hybridsim vs ale-py, timed alternately")
    p.add_argument("--games", default="",
                   help="comma-separated games for --single / --vector / --train (default for --train: "
                        "the recipe's)")
    p.add_argument("--frames", type=int, default=20_000, help="frames per side for --single")
    p.add_argument("--sound", action="store_true",
                   help="--single: both sides with sound_obs on, reading each act's samples")
    p.add_argument("--screen-every", type=int, default=4,
                   help="--single: also time act() with getScreenRGB() after every N acts (4: "
                        "gymnasium's AtariEnv at frameskip 4; 0: act() alone)")
    p.add_argument("--vector", action="store_true",
                   help="AtariVectorEnv: hybridsim vs ale-py vs EnvPool, alternating, plus --scaling")
    p.add_argument("--num-envs", type=int, default=16, help="environments for --vector")
    p.add_argument("--threads", type=int, default=2, help="threads for --vector")
    p.add_argument("--batch-size", type=int, default=0,
                   help="--vector: below --num-envs, time async mode (send/recv, batches of this many)")
    p.add_argument("--thread-affinity-offset", type=int, default=-1,
                   help="--vector: pin every side's worker threads from this core on (-1: not pinned)")
    p.add_argument("--train", action="store_true",
                   help="the training loop end to end: a recipe trained on hybridsim's engine and on "
                        "ale-py's AtariVectorEnv, same learner and seed, alternating (each pair must "
                        "train the same network)")
    p.add_argument("--recipe", default="quickstart",
                   help="--train: a shipped recipe's name or a config file (default: %(default)s)")
    p.add_argument("--train-frames", type=int, default=40_000,
                   help="--train: frames per training run (default: %(default)s)")
    p.add_argument("--steps", type=int, default=200, help="timed steps per side and round (--vector)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (--vector, --train)")
    p.add_argument("--scaling", default="1,2", help="thread counts of the --vector scaling table ('' = none)")
    p.add_argument("--envpool-python", default=None,
                   help="interpreter with envpool installed (default: this one)")
    p.set_defaults(func=_cmd_bench, default_of=p.get_default)
    p = sub.add_parser("verify", help="compare hybridsim with ale-py frame by frame")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--games", default="", help="comma-separated game names")
    which.add_argument("--all", action="store_true",
                       help="every game ale-py has settings for (`hybridsim games`)")
    p.add_argument("--frames", type=int, default=2000, help="frames per game (default: 2000)")
    p.add_argument("--sticky", type=float, default=0.25, help="repeat_action_probability (default: 0.25, ALE v5's)")
    p.add_argument("--seed", type=int, default=0, help="random_seed and action-stream seed (default: 0)")
    p.add_argument("--reset-every", type=int, default=0, help="also reset_game every N frames (default: 0, never)")
    p.add_argument("--screen-every", type=int, default=1,
                   help="compare the screen every N frames (RAM, reward, lives every frame); "
                        "N > 1 also checks the frames hybridsim draws on demand (default: 1)")
    p.add_argument("--mode", type=int, default=None, help="game mode (setMode), default: the game's")
    p.add_argument("--difficulty", type=int, default=None, help="difficulty (setDifficulty)")
    p.add_argument("--sound", action="store_true",
                   help="load both with sound_obs and compare every act's sound samples too")
    p.add_argument("--jobs", type=int, default=1,
                   help="games compared at once, each in a process of its own (0: one per CPU "
                        "available; default: 1); the results print in game order")
    p.set_defaults(func=_cmd_verify)
    p = sub.add_parser("analyze", help="statistics and plots from a run's HDF5 trajectory logs")
    p.add_argument("target", help="a run directory or one traj_rank*.h5 / trajectories.h5 file")
    p.add_argument("--out", default=None, help="where summary.json and the PNGs go (default: the run "
                                               "directory; for one rank file, analysis-FILESTEM beside it)")
    p.add_argument("--json", action="store_true", help="print the JSON summary")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=_cmd_analyze)
    p = sub.add_parser("replay", help="re-emulate a logged episode, check it, render it")
    p.add_argument("file", help="a traj_rank*.h5 file")
    p.add_argument("--episode", type=int, required=True, help="row of the file's episodes table")
    p.add_argument("--env", default="run", choices=["run", "hybridsim", "ale-py"],
                   help="whose emulator replays: the run's backend (default), hybridsim's CPU "
                        "engine, or ale-py (checks the log against ALE itself)")
    p.add_argument("--gif", default=None, help="write the episode as an animated GIF (a new file)")
    p.add_argument("--overwrite", action="store_true", help="let --gif or --npz replace an existing file")
    p.add_argument("--png-dir", default=None, help="write the episode's frames as PNGs")
    p.add_argument("--npz", default=None,
                   help="write the episode's transitions as a new .npz for offline use: each step's "
                        "observation as the agent saw it (re-emulated), action, unclipped reward, "
                        "terminated, truncated, lives, behavior logits, frame, with the episode's env_id, "
                        "episode_id, return, game and the backend that replayed it; and the final "
                        "observation")
    p.set_defaults(func=_cmd_replay, default_of=p.get_default)
    p = sub.add_parser("export", help="re-emulate a rank's whole trajectory log into an offline "
                                      "dataset with every step's observation",
                       description="Re-emulate every environment of a traj_rankNNNNN.h5 file as one "
                       "batch and write OUTPUT: /observations [steps, envs, *obs_shape] (what the policy "
                       "saw at each step), the logged action, reward_raw, terminated, truncated, lives, "
                       "episode_id, global_frame, behavior_logits and cut_short (a resume restarted "
                       "the environment after that step), and /final_observations with /final_index "
                       "(row, column) for each step that ended an episode. Each reward, episode end, "
                       "lives count and logged observation is checked against the file; on a difference nothing "
                       "is written for that file (a run directory's other ranks go on; exit status 1). "
                       "Synchronous logs without gaps only.")
    p.add_argument("file", help="a traj_rank*.h5 file, or a run directory: each of its rank files in turn")
    p.add_argument("output", help="the dataset to write (a new .h5 file); for a run directory, the folder "
                                  "for its datasets (dataset_rankNNNNN.h5 for traj_rankNNNNN.h5)")
    p.add_argument("--env", default="run", choices=["run", "hybridsim", "ale-py"],
                   help="whose emulator re-emulates: the run's backend (default), hybridsim's CPU "
                        "engine, or ale-py")
    p.add_argument("--compression", default="lzf", choices=["lzf", "gzip", "none"],
                   help="of OUTPUT's datasets (gzip: readable by any HDF5 tool; lzf: faster, h5py)")
    p.add_argument("--overwrite", action="store_true", help="let OUTPUT replace an existing file")
    p.add_argument("--jobs", type=int, default=1,
                   help="for a run directory: rank files exported at a time, each in its own process "
                        "stepping the rank's environments with the run's --num-threads, at most 1/N of "
                        "the CPUs (default: 1)")
    p.set_defaults(func=_cmd_export)
    p = sub.add_parser("eval", help="score a checkpoint on hybridsim's or ale-py's environment",
                       description="Score a checkpoint's policy. The environment takes the "
                       "checkpoint's settings (frame skip, sticky actions, no-op starts, episode "
                       "frame limit, preprocessing) with episodic life off; --sticky, --noop-max "
                       "and --max-episode-frames override them. The result names them all.")
    p.add_argument("checkpoint", nargs="+",
                   help="a checkpoint.pt written by hybridsim train (or its run directory); several, "
                        "or RUN/checkpoints (those train --keep-checkpoints kept, in the order of their "
                        "frames): a row each, in the order given, on the same seeds (--json: a list of "
                        "the one-checkpoint objects, each with its path)")
    p.add_argument("--episodes", type=int, default=10, help="episodes to play (default: 10)")
    p.add_argument("--env", default="hybridsim", choices=["hybridsim", "ale-py"],
                   help="whose environment to play on (default: hybridsim)")
    p.add_argument("--num-envs", type=int, default=4,
                   help="environments played in parallel, at most --episodes (default: 4)")
    p.add_argument("--seed", type=int, default=12345,
                   help="environment and sampling seed, environment k gets seed + k (default: 12345)")
    p.add_argument("--sticky", type=float, default=None, metavar="P",
                   help="sticky action probability (default: the checkpoint's; ALE v5: 0.25)")
    p.add_argument("--noop-max", type=int, default=None,
                   help="up to this many no-ops at each reset (default: the checkpoint's)")
    p.add_argument("--max-episode-frames", type=int, default=None,
                   help="cut episodes at this many frames, 0: never (default: the checkpoint's)")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON: every episode's return and the settings")
    policy = p.add_mutually_exclusive_group()
    policy.add_argument("--greedy", action="store_true",
                        help="take the most likely action (default: sample from the policy)")
    policy.add_argument("--random", action="store_true",
                   help="play uniformly random actions instead (the level training starts from)")
    p.set_defaults(func=_cmd_eval)
    p = sub.add_parser("games", help="the supported games and their properties")
    p.set_defaults(func=_cmd_games)
    from hybridsim.config import add_dataclass_arguments
    from hybridsim.train_config import TrainConfig  # without torch: other commands start fast
    p = sub.add_parser("train", help="train an agent with V-trace (A2C+V-trace or IMPALA-style)",
                       epilog=TRAIN_EXIT_CODES)
    add_dataclass_arguments(p, TrainConfig)
    p.set_defaults(func=_cmd_train)
    p = sub.add_parser("launchers", help="copy the mpirun wrapper and Slurm templates out of the "
                                         "installed package (for a pip-installed hybridsim)")
    p.add_argument("dest", nargs="?", default=None,
                   help="the folder to hold mpi_launch/ (on a file system the nodes see); "
                        "without it, print where they are installed")
    p.add_argument("--overwrite", action="store_true",
                   help="replace files in DEST/mpi_launch/ that differ (a copy from another hybridsim "
                        "version, or edited); without it such a copy is refused")
    p.set_defaults(func=_cmd_launchers)
    p = sub.add_parser("info", help="what this process sees: build, cores and threads, packages, "
                                    "ROMs, MPI launcher, torch, GPUs")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--brief", action="store_true",
                   help="one line: rank, host, usable cores, threads, GPUs (hybridsim-mpirun --check)")
    p.add_argument("--num-threads", type=int, default=0,
                   help="with --brief: the engine threads train would start with this "
                        "--num-threads (default: 0, one per usable core)")
    p.add_argument("--sections", default=None,
                   help="comma-separated subset of hybridsim,host,packages,roms,launcher,torch,gpu")
    p.set_defaults(func=_cmd_info)
    return parser


def run(argv=None) -> int:
    """The command line's entry point (the `hybridsim` script, `python -m hybridsim`): main(),
    then, after a stop every rank took together (its statuses come only from _after_report),
    MPI_Finalize (dist.finalize_stopped_job). main() called in a process that goes on keeps MPI."""
    if argv is None and sys.argv[1:2] == ["train"]:  # the process ends with this command
        from hybridsim import trajlog
        trajlog.KEEP_UNFINISHED_WRITERS = True
    code = main(argv)
    if code in (PREEMPTED_EXIT_CODE, STORAGE_EXIT_CODE):
        from hybridsim import dist
        dist.finalize_stopped_job()
    try:  # what is still buffered, here rather than at exit, where Python would print a traceback
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        return _reader_gone()
    if "hybridsim.trajlog" in sys.modules:  # a trajectory file HDF5 could not close: no teardown
        sys.modules["hybridsim.trajlog"].end_process_if_unfinished(code)
    return code


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end was closed (`hybridsim games | head -2`):
    poll(2) reports POLLERR for such a write end."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or stdout is no file
        return False


def _reader_gone() -> int:
    """End quietly, as a program killed by SIGPIPE would (status 128 + 13): what remains for
    stdout goes nowhere, so Python's flush at exit raises nothing more."""
    import os
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def main(argv=None) -> int:
    argv_seen = list(sys.argv[1:] if argv is None else argv)
    training = argv_seen[:1] == ["train"]
    engine_command = bool(argv_seen) and argv_seen[0] in ENGINE_COMMANDS \
        or argv_seen[:1] == ["bench"] and "--train" in argv_seen  # timed as train runs
    openmp_note = _wait_passively_on_a_busy_machine() if engine_command else None
    _join_mpi_job_early(argv_seen)
    replaced = _remember_early_stops() if training else {}  # a stop from here on gets a checkpoint
    import warnings
    formatwarning = warnings.formatwarning
    warnings.formatwarning = functools.partial(_format_warning, argv_seen[:1], formatwarning)
    try:
        return _main(argv, openmp_note)
    finally:  # called in-process (tests, notebooks): the caller's handlers again
        warnings.formatwarning = formatwarning
        for sig, handler in replaced.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _format_warning(command, default, message, category, filename, lineno, line=None) -> str:
    """hybridsim's own warnings as one line, as its errors are: their text says what happened,
    the source line that raised them would not (other warnings as Python shows them, also
    numpy's or torch's raised on a line of hybridsim)."""
    from hybridsim import HybridsimWarning
    if not issubclass(category, HybridsimWarning):
        return default(message, category, filename, lineno, line)
    return f"hybridsim{''.join(' ' + c for c in command)}: warning: {message}\n"


def _main(argv, openmp_note) -> int:
    args = build_parser().parse_args(argv)  # a bad argument on one rank ends the job (_Parser)
    args.openmp_note = openmp_note
    if openmp_note and args.command != "train":  # train's rank 0 prints it, once per job
        print(openmp_note, file=sys.stderr, flush=True)
    try:
        return args.func(args)
    except (ValueError, RuntimeError, OSError, TypeError) as exc:
        if isinstance(exc, BrokenPipeError) and _stdout_reader_gone():
            return _reader_gone()
        _abort_mpi_job(2, f"hybridsim {args.command}: error: {exc}")
        return 2
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C: what to do next, not a traceback per rank
        from hybridsim import dist
        lines = []
        if exc.__context__ is not None:  # an error was on its way out when Ctrl-C came
            lines.append(f"hybridsim {args.command}: (while handling {type(exc.__context__).__name__}: "
                         f"{exc.__context__})")
        if args.command == "train" and dist.launcher_rank() in (None, 0):
            where = getattr(args, "log_dir", None) or "the run directory"
            lines.append(f"hybridsim train: interrupted (Ctrl-C); the same command with --resume "
                         f"continues from the last checkpoint in {where}, if one was written")
        elif args.command != "train":
            lines.append(f"hybridsim {args.command}: interrupted (Ctrl-C)")
        _abort_mpi_job(130, "\n".join(lines) if lines else None)
        # end as killed by SIGINT, as Python does: a shell loop around this command stops too
        import os
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:  # a bug, MemoryError: the traceback, and under MPI the whole job
        if _in_mpi_job():   # ends (mpi4py's runner does this, mpiexec alone not) and this
            import traceback  # rank with it: printed here, as Python would on the way out
            _abort_mpi_job(1, traceback.format_exc().rstrip("\n"))
        raise


BUSY_CPUS = 0.5  # of this process's CPUs' time taken by other work: then PASSIVE (below)


# commands whose work runs on OpenMP workers (hybridsim's engine, torch); not bench, whose
# timings must not change with what else the machine runs
ENGINE_COMMANDS = ("train", "eval", "replay", "export")


def _wait_passively_on_a_busy_machine() -> str | None:
    """OMP_WAIT_POLICY=PASSIVE when the CPUs this process may use are already busy with
    other work and the user has not chosen a policy; it must be set before torch or the
    engine loads libgomp. Spinning OpenMP workers (libgomp's default, 29% faster on a quiet
    2-core VM) take the busy processes' turns there: training ran at 320-480 frames/s
    spinning and 1,380-1,540 passive on a loaded one (BENCHMARKS.md). Results are the same
    either way. Measured on this process's own CPUs (a quarter second of /proc/stat), not
    by the load average, which counts the whole node: its other jobs' cores too."""
    import os
    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
        return None
    from hybridsim import sysinfo
    cpus = sorted(os.sched_getaffinity(0))
    busy = sysinfo.cpu_busy_fraction(cpus)
    if busy is None or busy < BUSY_CPUS:
        return None
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return (f"note: the {len(cpus)} CPUs this process may use ({sysinfo.cpu_list(cpus)}) are "
            f"{busy:.0%} busy with other work: OpenMP threads wait passively "
            f"(OMP_WAIT_POLICY=PASSIVE), as spinning ones would slow that work and this one; "
            f"set OMP_WAIT_POLICY to choose")


def _join_mpi_job_early(argv) -> None:
    """`train` under a launcher with several ranks starts MPI before reading its arguments:
    a rank that then stops (a bad argument only it sees: another hybridsim version, an
    edited config file) ends the whole job, where before MPI_Init it left the others
    waiting there forever (mpi4py aborts only once mpi4py.MPI is imported)."""
    import os
    import subprocess
    if not argv or argv[0] != "train" or os.environ.get("HYBRIDSIM_SINGLE_PROCESS") == "1":
        return
    from hybridsim import dist
    if dist.launched_ranks() > 1:
        watcher = _watch_mpi_init(argv)
        try:
            import mpi4py.MPI  # noqa: F401  (MPI_Init; a missing mpi4py is init_comm's error)
        except ImportError:
            pass
        finally:
            if watcher is not None:
                watcher.stdin.close()  # MPI_Init returned: the watcher exits
                try:
                    watcher.wait(timeout=5)
                except subprocess.TimeoutExpired:  # still starting (a slow file system)
                    watcher.kill()
                    watcher.wait()


# Run beside a rank while it is in MPI_Init, which holds the interpreter lock (no thread of
# ours runs there): ends the rank, and so the launcher's job, if it does not return in time.
_MPI_INIT_WATCHER = """
import os, select, signal, sys, threading
for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)  # a job-wide signal is for the rank; EOF ends this
parent, seconds, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if not select.select([sys.stdin], [], [], seconds)[0]:  # no EOF: still inside MPI_Init
    def say():
        sys.stderr.write(message + "\\n")
        sys.stderr.flush()
    speaker = threading.Thread(target=say, daemon=True)
    speaker.start()
    speaker.join(5)  # stderr closed, full or on a hung file system: the rank ends all the same
    os.kill(parent, signal.SIGKILL)
"""


def _train_options() -> list[str]:
    """`hybridsim train`'s long options (the parser makes one per TrainConfig field)."""
    import dataclasses

    from hybridsim.train_config import TrainConfig
    return ["--help"] + ["--" + f.name.replace("_", "-") for f in dataclasses.fields(TrainConfig)]


def _option_in(argv, option: str, options: list[str]):
    """The value argv gives `option` as argparse reads it: `--opt V` or `--opt=V`, an
    abbreviation that no other of `options` starts with, the last one given; or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, equals, given = arg.partition("=")
        if not (len(name) > 2 and option.startswith(name)):
            continue
        if name != option and any(o != option and o.startswith(name) for o in options):
            continue  # ambiguous: the parser refuses it
        value = given if equals else (argv[i + 1] if i + 1 < len(argv) else None)
    return value


CONFIG_READ_SECONDS = 5.0  # for --config's stall_timeout, before the MPI_Init watcher starts


def _stall_timeout_in(argv) -> float:
    """--stall-timeout as the command line gives it, else as its --config file (or recipe)
    does, else TrainConfig's default; the default also where it does not parse (the
    parser names that later), or where the file cannot be read within a few seconds (a
    hung file system: the watcher must start all the same)."""
    from hybridsim.train_config import TrainConfig
    options = _train_options()
    given = _option_in(argv, "--stall-timeout", options)
    config = _option_in(argv, "--config", options)
    if given is None and config:
        from hybridsim import dist
        from hybridsim.config import load_config_file
        found = []

        def read():
            try:
                found.append(load_config_file(config).get("stall_timeout"))
            except (OSError, ValueError):
                pass
        dist.run_within(read, CONFIG_READ_SECONDS, "hybridsim-config-read")
        given = found[0] if found else None
    try:
        return float(given) if given is not None and not isinstance(given, bool) else TrainConfig.stall_timeout
    except (TypeError, ValueError):
        return TrainConfig.stall_timeout


MPI_INIT_TIMEOUT_VARIABLE = "HYBRIDSIM_MPI_INIT_TIMEOUT"


def _watch_mpi_init(argv):
    """A process that ends this rank if MPI_Init has not returned within the start-up
    allowance, 3 x --stall-timeout but at least a minute (large jobs take a while to
    wire up), or $HYBRIDSIM_MPI_INIT_TIMEOUT seconds: a rank that never reaches MPI
    (stopped, or stuck importing Python from a hung file system) left the others in
    MPI_Init for ever. The launcher then ends the job. None where the limit is 0."""
    import os
    import socket
    import subprocess
    from hybridsim import dist
    given = os.environ.get(MPI_INIT_TIMEOUT_VARIABLE, "")
    try:
        seconds = float(given) if given else None
    except ValueError:  # not an error here: a rank that stops before MPI_Init hangs the rest
        print(f"warning: {MPI_INIT_TIMEOUT_VARIABLE}={given!r} is not a number of seconds (0: off); "
              f"using the default", file=sys.stderr)
        given, seconds = "", None
    if seconds is None:
        stall = _stall_timeout_in(argv)
        seconds = max(60.0, 3 * stall) if stall > 0 else 0.0
    if not (seconds > 0 and math.isfinite(seconds)):  # 0 or inf: no limit
        return None
    rank = dist.launcher_rank()
    limit = MPI_INIT_TIMEOUT_VARIABLE if given else "3 x --stall-timeout, at least 60 s,"
    message = (f"rank {'?' if rank is None else rank} ({socket.gethostname()}): MPI_Init has not "
               f"completed in {seconds:.0f} s: another rank has not joined (stopped, or stuck "
               f"before MPI, e.g. importing Python from a hung file system); ending the job "
               f"({limit} sets the limit)")
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _MPI_INIT_WATCHER, str(os.getpid()),
                                 str(seconds), message], stdin=subprocess.PIPE)
    except OSError as exc:  # no watcher: as before, only the batch limit ends such a hang
        print(f"warning: cannot start the MPI_Init watcher ({exc})", file=sys.stderr)
        return None


def _in_mpi_job() -> bool:
    """Whether this rank runs in an MPI job with others (dist, and so torch, only then)."""
    if "mpi4py.MPI" not in sys.modules:
        return False
    from hybridsim import dist
    return dist.in_job_of_several_ranks()


def _abort_mpi_job(code: int, message: str | None = None) -> None:
    """Print message to stderr; in an MPI job with other ranks, then end the job (they may
    wait for this rank in a collective), waiting at most a few seconds for stderr (a log
    on a hung file system must not keep the job from ending), and this rank: MPI_Abort
    may return before the launcher ends it (MPICH's hydra), and what followed printed
    the message again."""
    if not _in_mpi_job():
        if message is not None:
            print(message, file=sys.stderr, flush=True)
        return
    import os

    from hybridsim import dist
    dist.abort_job(code, message)
    os._exit(code)


if __name__ == "__main__":
    sys.exit(run())
