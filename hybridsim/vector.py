"""hybridsim.AtariVectorEnv: a drop-in for ale_py.vector_env.AtariVectorEnv (ale-py 0.12.1).

    AtariVectorEnv(game, num_envs, *, backend="cpu", num_threads=0, batch_size=0,
                   <every other keyword of ale_py.vector_env.AtariVectorEnv, same defaults>,
                   resize_interpolation="area", device=0, gpu_options=None)

backend="gpu" runs every environment on CUDA device `device` (hybridsim/gpu.py, CuPy);
backend="hybrid" splits them between this CPU engine and the GPU (hybridsim/hybrid.py).
Both are synchronous (batch_size == num_envs) and return device arrays (torch tensors
through DLPack by default); docs/GPU.md. gpu_options: design ("split" | "fused" | "split_shared"),
block, emulate (host-emulated kernels, no GPU), output ("torch" | "cupy" | "numpy"),
cubin; hybrid: cpu_envs (the split; default measured), cpu_threads, calibrate_steps,
rebalance_steps (re-split once from the hybrid's own first steps), copy_chunks (the CPU
part's chunks, each copied to the device while the next steps).

resize_interpolation="linear" resizes as cv2.INTER_LINEAR (bit for bit) instead of
ale-py's INTER_AREA.

Environment i is seeded with seed + i on reset(seed=seed); with noop_max=0 and
repeat_action_probability=0 every observation, reward, termination, truncation and info
value equals ale-py's for the same actions (tests/test_vector.py).

Synchronous mode (batch_size == num_envs): step() is one call into the engine
(hybridsim._vector, cuda/vector_env.h), an OpenMP loop over environments with the GIL
released. Asynchronous mode (batch_size < num_envs), as EnvPool and ale-py have it:
send(actions, env_ids=None) queues steps for worker threads; recv() returns the first
batch_size environments to finish, info["env_id"] saying which. Without env_ids, send's
actions go to the environments of the last recv (ale-py's rule). With more than one worker
thread that order changes run to run; async_order="submission" returns instead the
batch_size environments sent longest ago (waiting for them if others finish first), so a
seed gives the same batches with any number of threads.

get_state() / set_state(state) snapshot every environment (consoles, RNGs, raw frames,
frame stacks) as bytes, so a run resumes exactly.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import pathlib
import threading
import warnings
import zipfile
from typing import Any

import numpy as np
from gymnasium import error as gym_error
from gymnasium.spaces import Box, Discrete
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from hybridsim import HybridsimWarning

BACKENDS = ("cpu", "gpu", "hybrid")
ASYNC_ORDERS = ("completion", "submission")
STATE_MAGIC = b"HSVEC2"  # format 2: a digest of the payload follows the fingerprint
_STATE_MAGIC_V1 = b"HSVEC1"
_DIGEST_BYTES = 32  # blake2b-128, hex
_SEED_LIMIT = 2**31  # ale-py passes seeds through a C++ int
# A reset runs its no-ops in one engine call, with no stop check in between: more than ALE's
# default episode cap of frames (30 minutes of play) is a typo that would hang the reset.
MAX_NOOP_MAX = 108_000
# A snapshot's per-environment arrays: name in the state -> the engine's attribute (every
# engine, CPU, GPU and hybrid, holds them under these names).
SNAPSHOT_ARRAYS = dict(env="env_mem", state="state_mem", frames="frame_mem", raw="raw_mem", stack="stack_mem")


def snapshot_layout(engine) -> dict:
    """name -> (shape, dtype) of an engine's snapshot arrays (numpy or cupy), without copies."""
    return {name: (tuple(getattr(engine, attr).shape), np.dtype(getattr(engine, attr).dtype))
            for name, attr in SNAPSHOT_ARRAYS.items()}


class _FromHere:
    """A seekable file over a BytesIO from its current position on: a zip written through it
    records offsets from its own first byte, as np.savez's do (zipfile would count from the
    BytesIO's start, past get_state's header)."""

    def __init__(self, buf: io.BytesIO):
        self.buf, self.start = buf, buf.tell()

    def write(self, data) -> int:
        return self.buf.write(data)

    def tell(self) -> int:
        return self.buf.tell() - self.start

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.buf.seek(offset + self.start if whence == 0 else offset, whence) - self.start

    def flush(self) -> None:
        pass


class _StoredArray:
    """A snapshot array left in the state's .npz until it is used: its shape and dtype come
    from the .npy header; np.asarray (or an assignment into an engine array) reads it. So
    set_state holds one of the big arrays (frames, raw frames, stacks) at a time."""

    def __init__(self, npz, name: str):
        self._npz, self._name = npz, name
        fmt = np.lib.format
        with npz.zip.open(name + ".npy") as fh:
            version = fmt.read_magic(fh)
            read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
            if read is None:  # get_state writes 1.0 (2.0 for a huge header)
                raise ValueError(f"array {name!r}: .npy format {version}")
            self.shape, _, self.dtype = read(fh)
            data_bytes = npz.zip.getinfo(name + ".npy").file_size - fh.tell()
        if self.dtype.hasobject or data_bytes != int(np.prod(self.shape)) * self.dtype.itemsize:
            # found now, not part-way through set_state's loading
            raise ValueError(f"array {name!r}: its data does not fit its header {self.dtype} {self.shape}")

    def __array__(self, dtype=None, copy=None):
        array = self._npz[self._name]
        return array if dtype is None else array.astype(dtype, copy=False)


def state_bytes(state, what: str = "state") -> bytes:
    """get_state()'s bytes from bytes, bytearray, memoryview or a uint8 array; anything else
    is refused by name (bytes(n) of an int would make n zero bytes: 2**40 of them)."""
    if isinstance(state, np.ndarray) and state.dtype == np.uint8:
        return state.tobytes()
    if not isinstance(state, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be the bytes get_state() returned, got {type(state).__name__}")
    return bytes(state)


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_DIGEST_BYTES // 2).hexdigest().encode()


def resolve_num_threads(num_threads: int, batch_size: int) -> int:
    """Worker threads for a batch: 0 means one per available core (cgroup/affinity aware),
    never more than the batch has environments; ale-py's rule."""
    if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)):
        raise ValueError(f"num_threads must be an int >= 0 (0: one per core), got {num_threads!r}")
    if num_threads < 0:
        raise ValueError(f"num_threads must be >= 0 (0: one per core), got {num_threads}")
    if num_threads >= _SEED_LIMIT:  # ale-py passes it as a C int (and refuses 2**70)
        raise ValueError(f"num_threads must be < 2**31 (0: one per core), got {num_threads}")
    from hybridsim.sysinfo import cores_to_use
    wanted = len(cores_to_use()) if num_threads == 0 else int(num_threads)
    return max(1, min(wanted, batch_size))


def worker_cores(offset: int, num_threads: int) -> list[int]:
    """The core worker t is pinned to: ale-py's rule, core offset + t wrapping around, but
    counted among the cores this process may run on (under Slurm or taskset, offset 0 is
    the first core of the allocation, not core 0 of the machine)."""
    from hybridsim.sysinfo import cores_to_use
    usable = cores_to_use()
    return [usable[(offset + t) % len(usable)] for t in range(num_threads)]


def check_action_indices(actions, n: int, num_actions: int) -> np.ndarray:
    """Host actions as int32[n] indices into the action set, or a ValueError naming the problem."""
    a = np.asarray(actions)
    if a.dtype.kind not in "iu":
        raise ValueError(f"actions must be an integer array (any int or uint dtype), got dtype {a.dtype}")
    if a.shape != (n,):
        raise ValueError(f"actions must have shape {(n,)}, got {a.shape}")
    if n and (a.min() < 0 or a.max() >= num_actions):
        bad = a[(a < 0) | (a >= num_actions)][0]
        raise ValueError(f"actions must be in 0..{num_actions - 1} (the action set has "
                         f"{num_actions} actions), got {bad}")
    return np.ascontiguousarray(a, dtype=np.int32)


def _engine_call(method):
    """Run `method` one thread at a time, with the GPU engine's device current. Threads
    sharing an environment (a checkpoint thread's get_state beside the acting thread's
    step) take turns: the engine releases the GIL, and two calls in it at once stepped or
    copied the same consoles together. A call from inside another on the same thread (a
    signal handler's) is refused: it took the steps the interrupted call was collecting.
    CuPy allocates and launches on the current device, which need not be the
    environment's (device=1 in a process left on 0)."""
    name = method.__name__

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        me = threading.get_ident()
        if self._turn_holder == me:
            raise RuntimeError(f"AtariVectorEnv.{name}() called while this thread is inside another call of "
                               f"the same environment (from a signal handler?); set a flag there and call "
                               f"{name}() after the call under way returns")
        with self._turn:
            self._turn_holder = me
            try:
                with self._device_scope():
                    return method(self, *args, **kwargs)
            finally:
                self._turn_holder = None
    return call


def is_real(value) -> bool:
    """A Python or numpy int or float: not a bool, a string or an array (float() would take
    '0.25' and np.array(0.25), which ale-py refuses or fails on)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _check_real(name: str, value, exc=TypeError) -> float:
    """A float setting given as a number (is_real)."""
    if not is_real(value):
        raise exc(f"{name} must be a number (int or float), got {value!r}")
    return float(value)


def _check_flag(name: str, value) -> bool:
    """A bool setting: True/False (numpy bools too); anything else is an error, not truthiness."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r}")


def _continuous_action_table() -> np.ndarray:
    """map_action_idx[h + 1, v + 1, fire] -> ALE action id, as ale_py.env.AtariEnv maps a
    (horizontal, vertical, fire) triple (h: -1 left, 1 right; v: -1 down, 1 up)."""
    from hybridsim.actions import Action
    table = np.zeros((3, 3, 2), dtype=np.int32)
    for h in (-1, 0, 1):
        for v in (-1, 0, 1):
            for f in (0, 1):
                name = {1: "UP", -1: "DOWN", 0: ""}[v] + {1: "RIGHT", -1: "LEFT", 0: ""}[h]
                name += "FIRE" if f else ""
                table[h + 1, v + 1, f] = Action[name or "NOOP"].value
    return table


def _game_and_rom(game: str | None, rom_file) -> tuple[str, pathlib.Path, tuple[dict, bytes, str]]:
    """(snake_case game name, ROM path, games_table.identify_rom of it): the installed ROM of
    `game`, or `rom_file` known as ALE knows a ROM (by its md5, else by its file stem), which
    `game`, if given, must name. The file is read here only: each load reuses its bytes."""
    from hybridsim import games_table
    from hybridsim.roms import rom_path, snake_case
    if rom_file is None:
        name = snake_case(game)
        path = rom_path(name)
    elif not isinstance(rom_file, (str, bytes, os.PathLike)):
        raise TypeError(f"rom_file must be a ROM file's path (str, bytes or os.PathLike), got {rom_file!r}")
    else:
        path = pathlib.Path(os.fsdecode(rom_file))
    identified = games_table.identify_rom(path)
    if rom_file is not None and game is not None and snake_case(game) != identified[0]["name"]:
        raise ValueError(f"rom_file {path} is the {identified[0]['name']!r} ROM, but game={game!r}; "
                         f"give the game it is, or game=None")
    return (name if rom_file is None else identified[0]["name"]), path, identified


class AtariVectorEnv(VectorEnv):
    """Batched Atari environments on hybridsim's engine (see the module docstring)."""

    _observation_space = None
    _action_space = None

    def __init__(
        self,
        game: str,
        num_envs: int,
        *,
        backend: str = "cpu",
        batch_size: int = 0,
        num_threads: int = 0,
        async_order: str = "completion",
        thread_affinity_offset: int = -1,
        max_num_frames_per_episode: int = 108000,
        repeat_action_probability: float = 0.0,
        full_action_space: bool = False,
        continuous: bool = False,
        continuous_action_threshold: float = 0.5,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        img_height: int = 84,
        img_width: int = 84,
        grayscale: bool = True,
        stack_num: int = 4,
        frameskip: int = 4,
        maxpool: bool = True,
        noop_max: int = 30,
        episodic_life: bool = False,
        life_loss_info: bool = False,
        reward_clipping: bool = True,
        use_fire_reset: bool = True,
        resize_interpolation: str = "area",
        device: int = 0,
        gpu_options: dict | None = None,
        rom_file: str | os.PathLike | None = None,
    ):
        self._turn, self._turn_holder = threading.Lock(), None  # _engine_call's
        self._device_scope = contextlib.nullcontext  # the GPU engine's, once it is built
        if not isinstance(game, str) and not (game is None and rom_file is not None):
            raise TypeError(f"game must be a game's name, such as 'pong', got {game!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend != "cpu" and batch_size not in (0, num_envs):
            raise ValueError(f"backend={backend!r} is synchronous: batch_size must be 0 or num_envs, "
                             f"got {batch_size!r}")
        if async_order not in ASYNC_ORDERS:
            raise ValueError(f"async_order must be one of {ASYNC_ORDERS}, got {async_order!r}")
        # ale-py raises gymnasium's error for a bad frameskip; keep its exception type.
        if type(frameskip) is not int:
            raise gym_error.Error(f"Invalid frameskip type: {type(frameskip)}.")
        if frameskip <= 0:
            raise gym_error.Error(f"Invalid frameskip of {frameskip}, frameskip must be positive.")
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
                or not 1 <= num_envs < 2**31:  # the engine counts environments in a C int
            raise ValueError(f"num_envs must be an int in 1..2**31-1, got {num_envs!r}")
        num_envs = int(num_envs)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or not 0 <= batch_size <= num_envs:
            raise ValueError(f"batch_size must be an int in 0..num_envs={num_envs} (0: num_envs), "
                             f"got {batch_size!r}")
        for name, value, low in (("stack_num", stack_num, 1), ("img_height", img_height, 1),
                                 ("img_width", img_width, 1), ("noop_max", noop_max, 0),
                                 ("max_num_frames_per_episode", max_num_frames_per_episode, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
            if value >= _SEED_LIMIT:  # the engine keeps them in C ints
                raise ValueError(f"{name} must be < 2**31, got {value!r}")
        if noop_max > MAX_NOOP_MAX:
            raise ValueError(f"noop_max must be <= {MAX_NOOP_MAX:,} (30 minutes of frames; a reset runs "
                             f"its no-ops without a stop check), got {noop_max!r}")
        flags = dict(full_action_space=full_action_space, continuous=continuous, grayscale=grayscale,
                     maxpool=maxpool, episodic_life=episodic_life, life_loss_info=life_loss_info,
                     reward_clipping=reward_clipping, use_fire_reset=use_fire_reset)
        for name, value in flags.items():
            _check_flag(name, value)
        channels = 1 if grayscale else 3
        obs_bytes = int(stack_num) * int(img_height) * int(img_width) * channels
        if obs_bytes >= _SEED_LIMIT:
            raise ValueError(f"one observation (stack_num x img_height x img_width x channels = "
                             f"{obs_bytes:,} bytes) must be under 2 GiB")
        continuous_action_threshold = _check_real("continuous_action_threshold",
                                                  continuous_action_threshold, ValueError)
        if not np.isfinite(continuous_action_threshold):  # every comparison with NaN is false
            raise ValueError(f"continuous_action_threshold must be finite, got {continuous_action_threshold}")
        if not 0.0 <= _check_real("repeat_action_probability", repeat_action_probability) <= 1.0:
            raise ValueError(f"repeat_action_probability must be in [0, 1], got {repeat_action_probability}")
        # not applied here (a warning says so), but checked as ale-py's C++ int argument is
        if isinstance(thread_affinity_offset, (bool, np.bool_)) \
                or not isinstance(thread_affinity_offset, (int, np.integer)):
            raise TypeError(f"thread_affinity_offset must be an int (-1: no affinity), "
                            f"got {thread_affinity_offset!r}")
        if not -_SEED_LIMIT <= thread_affinity_offset < _SEED_LIMIT:
            raise ValueError(f"thread_affinity_offset must be in [-2**31, 2**31) (-1: no affinity), "
                             f"got {thread_affinity_offset!r}")
        if thread_affinity_offset >= 0 and backend != "cpu":
            why = ("the gpu backend has no CPU workers" if backend == "gpu" else
                   "the hybrid backend's CPU part runs on OpenMP's threads (OMP_PROC_BIND and OMP_PLACES place them)")
            warnings.warn(f"thread_affinity_offset={int(thread_affinity_offset)} is not applied: it pins "
                          f"backend='cpu' workers; {why}", HybridsimWarning, stacklevel=2)
        interpolations = {"area": 3, "linear": 1}  # cv2.INTER_AREA / INTER_LINEAR codes
        if resize_interpolation not in interpolations:
            raise ValueError(f"resize_interpolation must be 'area' (ale-py's, the default) or 'linear', "
                             f"got {resize_interpolation!r}")
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(f"autoreset_mode must be one of {[m.value for m in AutoresetMode]} "
                             f"(NEXT_STEP or SAME_STEP supported), got {autoreset_mode!r}") from None
        if self.autoreset_mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode must be NEXT_STEP or SAME_STEP, got {self.autoreset_mode}")

        from hybridsim import _vector

        self.game, self._rom_path, self._rom_identified = _game_and_rom(game, rom_file)
        self.num_envs = num_envs
        self.batch_size = num_envs if batch_size == 0 else int(batch_size)
        self.num_threads = resolve_num_threads(num_threads, self.batch_size)
        self._async_order = async_order
        self.backend = backend
        self.continuous = bool(continuous)
        self.continuous_action_threshold = float(continuous_action_threshold)
        self.grayscale = bool(grayscale)
        self._repeat_action_probability = float(repeat_action_probability)
        self._config = dict(
            game=self.game, num_envs=num_envs, batch_size=self.batch_size, frameskip=frameskip,
            stack_num=int(stack_num), img_height=int(img_height), img_width=int(img_width),
            grayscale=bool(grayscale), maxpool=bool(maxpool), noop_max=int(noop_max),
            use_fire_reset=bool(use_fire_reset), episodic_life=bool(episodic_life),
            life_loss_info=bool(life_loss_info), reward_clipping=bool(reward_clipping),
            max_num_frames_per_episode=int(max_num_frames_per_episode),
            repeat_action_probability=self._repeat_action_probability,
            full_action_space=bool(full_action_space or continuous),
            autoreset_mode=self.autoreset_mode.value, resize_interpolation=resize_interpolation)

        # The state right after ALE's loadROM, copied into environments on seeded resets.
        template = self._load(0)
        ale = self._template_ale
        actions = ale.getLegalActionSet() if (full_action_space or continuous) else ale.getMinimalActionSet()
        from hybridsim.actions import as_action_id
        self.action_set = np.array([as_action_id(a) for a in actions], dtype=np.int32)
        fire_reset = bool(use_fire_reset) and 1 in self.action_set
        # continuous actions map to ALE action ids, which the engine reads as positions in
        # its set: all 18, as ale-py's AtariEnv acts on them (skiing's legal set has 9)
        self._engine_action_set = np.arange(18, dtype=np.int32) if continuous else self.action_set
        height = ale.getScreenDims()[0]
        engine_args = (self._rom_bytes, template[0], template[1], template[2], num_envs)
        engine_kwargs = dict(
            num_threads=self.num_threads, frame_skip=frameskip, stack_num=int(stack_num),
            img_height=int(img_height), img_width=int(img_width), grayscale=bool(grayscale),
            maxpool=bool(maxpool), noop_max=int(noop_max), fire_reset=fire_reset,
            episodic_life=bool(episodic_life), life_loss_info=bool(life_loss_info),
            reward_clipping=bool(reward_clipping), max_episode_steps=int(max_num_frames_per_episode),
            same_step=self.autoreset_mode == AutoresetMode.SAME_STEP,
            action_set=self._engine_action_set,
            raw_height=height, pal=ale._emu.tv_standard == "PAL",
            interpolation=interpolations[resize_interpolation])
        self.device = device
        self._xp = np
        self._deliver = None
        if gpu_options is not None and not isinstance(gpu_options, dict):
            raise ValueError(f"gpu_options must be a dict, got {type(gpu_options).__name__}")
        if backend == "cpu":
            if gpu_options:
                raise ValueError(f"gpu_options {sorted(gpu_options)} apply to backend='gpu' or "
                                 f"'hybrid', not backend='cpu'")
            self._engine = _vector.VectorEngine(*engine_args, **engine_kwargs)
        else:
            from hybridsim.gpu import make_vector_engine
            self._engine, self._xp, self._deliver = make_vector_engine(
                backend, engine_args, engine_kwargs, device=device, options=gpu_options)
            self._device_scope = self._engine.dev.scope
        with self._device_scope():
            self._template_copyable = self._check_template(template)

        obs_shape = (int(stack_num), int(img_height), int(img_width)) + (() if grayscale else (3,))
        self.single_observation_space = Box(low=0, high=255, shape=obs_shape, dtype=np.uint8)
        if self.continuous:
            self.single_action_space = Box(low=np.array([0.0, -np.pi, 0.0], dtype=np.float32),
                                           high=np.array([1.0, np.pi, 1.0], dtype=np.float32),
                                           dtype=np.float32, shape=(3,))
        else:
            self.single_action_space = Discrete(len(self.action_set))
        self.map_action_idx = _continuous_action_table()  # ale-py sets it in both modes
        self.metadata = dict(self.metadata, autoreset_mode=self.autoreset_mode)
        self._obs_shape = obs_shape
        self._async = self.batch_size < num_envs
        self._all_ids = np.arange(num_envs, dtype=np.int32)
        self._in_flight = np.zeros(num_envs, dtype=bool)  # sent, result not yet returned
        self._ready: list[int] = []  # async: finished (taken from the pool), not yet returned
        self._sent: list[int] = []  # async_order "submission": sent, not yet returned, in order
        self._last_ids: np.ndarray | None = None  # env ids of the last result, in order
        self._pending: tuple | None = None  # sync mode: actions sent, not yet received
        self._ones = np.ones(num_envs, dtype=np.float32)
        self._no_force = np.zeros(num_envs, dtype=np.uint8)
        # ale-py builds each environment with a random ALE seed; so do we (seed=None resets).
        entropy = np.random.SeedSequence().generate_state(num_envs, dtype=np.uint32) % _SEED_LIMIT
        with self._device_scope():
            self._reseed(self._all_ids, entropy.astype(np.int64))
        # Pinned workers step both modes, as in ale-py (unpinned synchronous steps run on
        # OpenMP threads, which the caller's thread would be one of).
        self.worker_cores = (worker_cores(int(thread_affinity_offset), self.num_threads)
                             if backend == "cpu" and thread_affinity_offset >= 0 else None)
        if self._async or self.worker_cores is not None:
            errors = self._engine.pool_start(self.num_threads, self.worker_cores,
                                             steps_sync=not self._async)
            failed = [f"worker {t} to core {core}: {os.strerror(int(err))}"
                      for t, (core, err) in enumerate(zip(self.worker_cores or (), errors)) if err]
            if failed:
                warnings.warn(f"thread_affinity_offset={int(thread_affinity_offset)}: could not pin "
                              f"{'; '.join(failed)} (those keep the caller's affinity)", HybridsimWarning,
                              stacklevel=2)

    @property
    def ale(self):
        """ale-py's `.ale`: this environment driven through ALEVectorInterface's calls
        (reset(env_ids, seeds), send(action_ids, paddle_strengths), recv())."""
        from hybridsim.ale_vector import ALEVectorInterface
        return ALEVectorInterface._of(self)

    @property
    def async_order(self) -> str:
        """"completion" or "submission" (read-only: the bookkeeping of one is not the other's)."""
        return self._async_order

    # The batched spaces hold low/high arrays of the whole batch (560 MB for 10,000 84x84x4
    # observations): built on first use only.
    @property
    def observation_space(self):
        if self._observation_space is None:
            self._observation_space = batch_space(self.single_observation_space, self.batch_size)
        return self._observation_space

    @observation_space.setter
    def observation_space(self, value):
        self._observation_space = value

    @property
    def action_space(self):
        if self._action_space is None:
            self._action_space = batch_space(self.single_action_space, self.batch_size)
        return self._action_space

    @action_space.setter
    def action_space(self, value):
        self._action_space = value

    # ----- loading and seeding -------------------------------------------------------------
    def _load(self, seed: int):
        """(AleEnv bytes, frames, shown) after ALE's loadROM with this random_seed and the
        reset_game that follows it in every seeded reset."""
        from hybridsim.ale import ALEInterface
        ale = ALEInterface()
        ale._warn_on_other_image = False
        ale.setInt("random_seed", int(seed))
        ale.setFloat("repeat_action_probability", self._repeat_action_probability)
        ale._load_identified(self._rom_path, *self._rom_identified)
        self._template_ale = ale
        if not hasattr(self, "_rom_bytes"):  # the cartridge image the emulator maps
            from hybridsim import games_table
            from hybridsim.console_props import emulator_kwargs
            problem = games_table.rom_mismatch(self.game, self._rom_path, ale._md5)
            if problem:  # runs (ALE accepts it by name too), but say so
                warnings.warn(f"{problem}; hybridsim runs it with those settings anyway",
                              HybridsimWarning, stacklevel=3)
            self._rom_bytes = emulator_kwargs(ale._entry, ale._rom, md5=ale._md5)[0]
        ale.reset_game()
        return ale._emu.raw_state()

    def _check_template(self, template) -> bool:
        """True when a copy of the seed-0 load and reset, reseeded, is byte for byte a load
        and reset with another seed (neither draws from the environment RNG)."""
        other = self._load(12345)
        self._engine.reseed(np.array([0], np.int32), np.array([12345]))
        if self.backend != "cpu":
            env, frames, shown = self._engine.env_row_host(0)
            return (bytes(env) == other[0] and shown == other[2]
                    and np.array_equal(frames, np.asarray(other[1]).reshape(2, -1)))
        same = (bytes(self._engine.env_mem[0]) == other[0]
                and np.array_equal(self._engine.frame_mem[0], np.asarray(other[1]).reshape(2, -1))
                and int(self._engine.shown()[0]) == other[2])
        return same

    def _reseed(self, env_ids: np.ndarray, seeds: np.ndarray) -> None:
        """ALE's loadROM for env_ids with seeds (>= 0; negative: keep the environment)."""
        keep = seeds >= 0
        env_ids, seeds = env_ids[keep], seeds[keep]
        if len(env_ids) == 0:
            return
        if self._template_copyable:
            self._engine.reseed(env_ids.astype(np.int32), seeds)
        else:  # the load draws from the environment RNG: load each one
            for env, seed in zip(env_ids, seeds):
                state, frames, shown = self._load(int(seed))
                self._engine.set_loaded(int(env), state, frames, shown, int(seed))

    # ----- output arrays -------------------------------------------------------------------
    def _outputs(self, rows: int, final: bool):
        xp = self._xp  # numpy, or the GPU backends' device array module
        obs = xp.empty((rows,) + self._obs_shape, dtype=np.uint8)
        return dict(obs=obs,
                    final_obs=xp.zeros_like(obs) if final else None,
                    reward=xp.empty(rows, dtype=np.int32),
                    terminated=xp.empty(rows, dtype=np.bool_),
                    truncated=xp.empty(rows, dtype=np.bool_),
                    lives=xp.empty(rows, dtype=np.int32),
                    frame_number=xp.empty(rows, dtype=np.int32),
                    episode_frame_number=xp.empty(rows, dtype=np.int32),
                    has_final=xp.zeros(rows, dtype=np.uint8) if final else None)

    def _run(self, ids, force, actions, strengths, out):
        self._engine.run(ids, force, actions, strengths, out["obs"], out["final_obs"], out["reward"],
                         out["terminated"].view(np.uint8), out["truncated"].view(np.uint8),
                         out["lives"], out["frame_number"], out["episode_frame_number"],
                         out["has_final"])

    @staticmethod
    def _info(ids, out) -> dict[str, np.ndarray]:
        return {"env_id": np.asarray(ids, dtype=np.int32), "lives": out["lives"],
                "frame_number": out["frame_number"], "episode_frame_number": out["episode_frame_number"]}

    def _gather_stage(self, ids: np.ndarray):
        e = self._engine
        out = dict(obs=e.stage_obs[ids].reshape((len(ids),) + self._obs_shape),
                   reward=e.stage_reward[ids], terminated=e.stage_terminated[ids].view(np.bool_),
                   truncated=e.stage_truncated[ids].view(np.bool_), lives=e.stage_lives[ids],
                   frame_number=e.stage_frame[ids], episode_frame_number=e.stage_episode_frame[ids])
        if e.stage_final is not None:
            out["final_obs"] = e.stage_final[ids].reshape((len(ids),) + self._obs_shape)
            out["has_final"] = e.stage_has_final[ids]
        return out

    # ----- gymnasium API -------------------------------------------------------------------
    @_engine_call
    def reset(self, *, seed: int | np.ndarray | None = None, options: dict[str, Any] | None = None):
        """Reset the environments (all, or options["reset_mask"]); seed: an int gives
        environment k of those reset seed + k, an array one seed each, None keeps seeds."""
        self._check_open("reset")
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if options is None or "reset_mask" not in options:
            indices = self._all_ids
        else:
            mask = options["reset_mask"]
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
                raise TypeError(f"`reset_mask` must be a boolean numpy array, got {type(mask)} "
                                f"with dtype {getattr(mask, 'dtype', None)}")
            if mask.shape != (self.num_envs,):
                raise ValueError(f"`reset_mask` must have shape {(self.num_envs,)}, got {mask.shape}")
            indices = np.flatnonzero(mask).astype(np.int32)
        partial = len(indices) != self.num_envs
        if partial and self._last_ids is None:
            raise RuntimeError(f"The first reset() must reset every environment (got {len(indices)} "
                               f"of {self.num_envs})")
        if partial and self._async:
            raise ValueError(f"Partial reset is not supported in async mode (batch_size="
                             f"{self.batch_size} < num_envs={self.num_envs})")
        if seed is None:
            seeds = np.full(len(indices), -1, dtype=np.int64)  # -1: keep the environment's seed
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            if not -_SEED_LIMIT <= int(seed) <= _SEED_LIMIT - len(indices):
                raise ValueError(f"seed must be in [-2**31, 2**31 - {len(indices)}] (environment k gets "
                                 f"seed + k; ale-py passes seeds as a C int), got {seed}")
            seeds = np.arange(int(seed), int(seed) + len(indices), dtype=np.int64)
        elif isinstance(seed, np.ndarray):
            if seed.shape != (len(indices),):
                raise ValueError(f"`seed` must have one entry per sub-environment being reset, expected "
                                 f"shape {(len(indices),)}, got {seed.shape}")
            if seed.dtype.kind not in "iu":
                raise TypeError(f"`seed` array must hold integers, got dtype {seed.dtype}")
            if len(seed) and (int(seed.min()) < -_SEED_LIMIT or int(seed.max()) >= _SEED_LIMIT):
                bad = seed[(seed < -_SEED_LIMIT) | (seed >= _SEED_LIMIT)][0]
                raise ValueError(f"seeds must be in [-2**31, 2**31) (ale-py passes them as a C int), got {bad}")
            seeds = seed.astype(np.int64)
        else:
            raise TypeError(f"seed must be None, an int or an integer numpy array, got {type(seed).__name__}")
        # ale-py: a negative seed keeps that environment's current seed, as None does.
        seeds = np.where(seeds < 0, -1, seeds)
        self._drain()
        self._pending = None
        self._reseed(indices, seeds)
        n = len(indices)
        force = np.ones(n, dtype=np.uint8)
        zeros = np.zeros(n, dtype=np.int32)
        if self._async:
            self._submit(indices, force, zeros, self._ones[:n])
            ids, out = self._recv_async()
            return out["obs"], self._info(ids, out)
        out = self._outputs(self.num_envs, False)
        if partial:  # the others report their current state, as in ale-py
            part = self._outputs(n, False)
            self._run(indices, force, zeros, self._ones[:n], part)
            rest = np.setdiff1d(self._all_ids, indices).astype(np.int32)
            cur = self._outputs(len(rest), False)
            self._engine.write_current(rest, cur["obs"], cur["reward"], cur["terminated"].view(np.uint8),
                                       cur["truncated"].view(np.uint8), cur["lives"], cur["frame_number"],
                                       cur["episode_frame_number"])
            put_i, put_r = self._xp.asarray(indices), self._xp.asarray(rest)
            for key in ("obs", "lives", "frame_number", "episode_frame_number"):
                out[key][put_i] = part[key]
                out[key][put_r] = cur[key]
        else:
            self._run(indices, force, zeros, self._ones, out)
        self._last_ids = self._all_ids
        if self._deliver is not None:
            return self._deliver(out["obs"]), self._deliver(self._info(self._all_ids, out))
        return out["obs"], self._info(self._all_ids, out)

    def _check_actions(self, actions, n: int):
        """(action indices int32[n], paddle strengths float32[n]) or a ValueError."""
        if self.continuous:
            if self.backend != "cpu" and not isinstance(actions, (np.ndarray, list, tuple)):
                actions = self._engine.dev.to_host(actions)  # (n, 3) floats: read on the host
            a = np.asarray(actions)
            if a.dtype != np.float32 or a.shape != (n, 3):
                raise ValueError(f"continuous actions must be a float32 array of shape {(n, 3)}, "
                                 f"got {a.dtype} {a.shape}")
            if not np.isfinite(a).all():
                raise ValueError("continuous actions must be finite (NaN or inf found)")
            x = a[:, 0] * np.cos(a[:, 1])
            y = a[:, 0] * np.sin(a[:, 1])
            t = self.continuous_action_threshold
            h = -(x < -t).astype(np.int32) + (x > t).astype(np.int32) + 1
            v = -(y < -t).astype(np.int32) + (y > t).astype(np.int32) + 1
            f = (a[:, 2] > t).astype(np.int32)
            return (np.ascontiguousarray(self.map_action_idx[h, v, f], dtype=np.int32),
                    np.ascontiguousarray(a[:, 0], dtype=np.float32))
        if self.backend != "cpu" and not isinstance(actions, (np.ndarray, list, tuple)):
            return self._engine.check_actions(actions, n, len(self.action_set)), self._ones[:n]
        return check_action_indices(actions, n, len(self.action_set)), self._ones[:n]

    @_engine_call
    def step(self, actions):
        """Step every environment of the batch: (obs, rewards, terminations, truncations, info)."""
        self._check_open("step")
        self._send(actions)
        return self._recv()

    @_engine_call
    def send(self, actions, env_ids=None) -> None:
        """Queue one step for env_ids (default: the environments of the last result)."""
        self._send(actions, env_ids)

    @_engine_call
    def recv(self):
        """The next batch_size results: (obs, rewards, terminations, truncations, info)."""
        return self._recv()

    @_engine_call
    def _send_with_strengths(self, actions, paddle_strengths) -> None:
        """ALEVectorInterface.send: action indices and a paddle strength each, for the
        environments of the last result."""
        self._send(actions, strengths=paddle_strengths)

    def _send(self, actions, env_ids=None, strengths=None) -> None:
        self._check_open("send")
        if self._last_ids is None:
            raise RuntimeError("send() called before reset()")
        if env_ids is None:
            ids = self._last_ids
        else:
            ids = np.asarray(env_ids)
            if ids.size == 0 and ids.ndim == 1:  # [] holds no ints but is a fine empty list
                ids = ids.astype(np.int32)
            if ids.dtype.kind not in "iu" or ids.ndim != 1:
                raise ValueError(f"env_ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
            if len(ids) and (ids.min() < 0 or ids.max() >= self.num_envs):
                raise ValueError(f"env_ids must be in 0..{self.num_envs - 1}, got {ids}")
            if len(np.unique(ids)) != len(ids):
                raise ValueError(f"env_ids must not repeat an environment, got {ids}")
            ids = ids.astype(np.int32)
        if strengths is None:
            acts, strengths = self._check_actions(actions, len(ids))
        else:  # ALEVectorInterface's ids index the engine's set (all 18 with continuous=True)
            acts = check_action_indices(actions, len(ids), len(self._engine_action_set))
            strengths = np.asarray(strengths)
            if strengths.shape != (len(ids),) or strengths.dtype.kind not in "iuf":
                raise ValueError(f"paddle_strengths must be {len(ids)} numbers, one per action, "
                                 f"got {strengths.dtype} {strengths.shape}")
            if np.isnan(strengths).any():  # ALE casts it to an int: NaN is undefined (inf saturates)
                raise ValueError("paddle_strengths must not be NaN")
            strengths = np.ascontiguousarray(strengths, dtype=np.float32)
        if not self._async:
            if env_ids is not None and not np.array_equal(ids, self._all_ids):
                raise ValueError(f"in sync mode (batch_size == num_envs) env_ids must be all "
                                 f"environments 0..{self.num_envs - 1} in order, got {ids}")
            if self._pending is not None:
                raise ValueError("send() twice without recv(): the environments are not waiting")
            self._pending = (acts, strengths)
            return
        busy = ids[self._in_flight[ids]]
        if len(busy) and env_ids is None:  # the last result's environments, sent already
            raise ValueError(f"send() twice without recv(): environments {busy.tolist()} are still "
                             f"running (pass env_ids to send others)")
        if len(busy):
            raise ValueError(f"env_ids must be environments waiting for an action (received, not sent "
                             f"since); these are still running: {busy.tolist()}")
        self._submit(ids, self._no_force[: len(ids)], acts, strengths)

    def _recv(self):
        self._check_open("recv")
        if self._last_ids is None:  # the async check below would ask for send(), which refuses too
            raise RuntimeError("recv() called before reset()")
        if self._async:
            ids, out = self._recv_async()
        else:
            if self._pending is None:
                raise ValueError("recv() without send(): no environment is running")
            acts, strengths = self._pending
            self._pending = None
            out = self._outputs(self.num_envs, self.autoreset_mode == AutoresetMode.SAME_STEP)
            self._run(self._all_ids, self._no_force, acts, strengths, out)
            ids = self._all_ids
        info = self._info(ids, out)
        if out.get("final_obs") is not None and bool((out["terminated"] | out["truncated"]).any()):
            info["final_obs"] = out["final_obs"]
        if self._deliver is not None:
            return tuple(self._deliver(x) for x in (out["obs"], out["reward"], out["terminated"],
                                                    out["truncated"], info))
        return out["obs"], out["reward"], out["terminated"], out["truncated"], info

    def _recv_async(self):
        running = int(self._in_flight.sum())
        if running < self.batch_size:
            raise ValueError(f"recv() needs batch_size={self.batch_size} environments running, "
                             f"only {running} are: send() actions first")
        if self.async_order == "submission":
            ids = self._take_oldest()
        else:
            take = min(len(self._ready), self.batch_size)
            ids = np.array(self._ready[:take], dtype=np.int32)
            del self._ready[:take]
            if take < self.batch_size:
                ids = np.concatenate([ids, self._pool_wait(self.batch_size - take)])
        self._in_flight[ids] = False
        self._last_ids = ids
        return ids, self._gather_stage(ids)

    def _submit(self, ids, force, actions, strengths) -> None:
        self._engine.pool_submit(ids, force, actions, strengths)
        self._in_flight[ids] = True
        if self.async_order == "submission":
            self._sent.extend(ids.tolist())

    def _pool_wait(self, n: int) -> np.ndarray:
        """The next n finished environments; an error, not a hang, when fewer are running
        (ids lost to an exception, e.g. Ctrl-C, between the pool and this object)."""
        running = self._engine.pool_in_flight()
        if n > running:
            raise RuntimeError(f"AtariVectorEnv lost track of its running steps: waiting for {n} "
                               f"results with {running} running; call reset()")
        return self._engine.pool_wait(n)

    def _take_oldest(self) -> np.ndarray:
        """The batch_size environments sent longest ago, once all of them have finished."""
        oldest = np.array(self._sent[: self.batch_size], dtype=np.int32)
        is_oldest = np.zeros(self.num_envs, dtype=bool)
        is_oldest[oldest] = True
        missing = len(oldest) - int(np.count_nonzero(is_oldest[np.array(self._ready, dtype=np.int32)]))
        while missing:
            # everything finished so far in one call, and otherwise no more completions than
            # the oldest still need (a slow one behind many fast ones costs one call, not many)
            done = self._pool_wait(max(missing, self._engine.pool_ready()))
            self._ready.extend(done.tolist())
            missing -= int(np.count_nonzero(is_oldest[done]))
        del self._sent[: self.batch_size]
        self._ready = [k for k in self._ready if not is_oldest[k]]
        return oldest

    def _check_open(self, call: str) -> None:
        if self.closed:
            raise RuntimeError(f"{call}() on a closed AtariVectorEnv")

    def _settle(self) -> None:
        """Async: wait for every running step; their results stay staged, in order."""
        if self._async:
            in_pool = self._engine.pool_in_flight()  # the pool's count, right even after an interrupt
            if in_pool:
                self._ready.extend(int(k) for k in self._pool_wait(in_pool))
            if self.async_order == "submission":  # get_state saves them in the order sent
                self._ready = list(self._sent)

    def _drain(self) -> None:
        """Wait for (and drop) every step still running in async mode."""
        self._settle()
        self._ready.clear()
        self._sent.clear()
        self._in_flight[:] = False

    def xla(self):
        """ale-py's JAX interface (its engine registered as XLA FFI targets) has no
        counterpart here: a clear error instead of an AttributeError."""
        raise NotImplementedError("hybridsim.AtariVectorEnv has no JAX/XLA interface (ale-py's xla() registers "
                                  "its C++ engine as XLA FFI targets); step it from Python, or through "
                                  "jax.pure_callback")

    # ----- snapshots -----------------------------------------------------------------------
    def _fingerprint(self, num_envs: int | None = None) -> str:
        """This environment's game, settings and build; num_envs: those of a synchronous
        one with as many environments (compose_state's sources)."""
        config = self._config if num_envs is None else dict(self._config, num_envs=num_envs, batch_size=num_envs)
        cfg = json.dumps(config, sort_keys=True) + repr(
            (len(self._engine.template_state), self._engine.obs_bytes))
        return hashlib.md5(cfg.encode() + self._rom_bytes).hexdigest()

    @_engine_call
    def get_state(self) -> bytes:
        """Every environment's state (consoles, RNGs, raw frames, frame stacks and, in async
        mode, results not yet received) as bytes. Async mode waits for running steps."""
        self._check_open("get_state")
        if self._pending is not None:
            raise ValueError("get_state() between send() and recv(): call recv() first")
        self._settle()
        e = self._engine
        e.materialize()
        arrays = dict(**self._snapshot_sources(), shown=e.shown(),
                      last_ids=np.array([] if self._last_ids is None else self._last_ids, np.int32),
                      started=np.array(self._last_ids is not None),
                      in_flight=self._in_flight, ready=np.array(self._ready, np.int32))
        if self._async:
            for name in self._STAGE:
                if getattr(e, name) is not None:
                    arrays[name] = getattr(e, name)
        return self._encode_state(arrays)

    def _snapshot_sources(self) -> dict:
        """The engine's snapshot arrays: the CPU engine's own, or functions making a device
        array's host copy when _encode_state comes to it (one copy at a time: at 256K
        environments the five arrays are ~50 GB)."""
        e = self._engine
        if self.backend == "cpu":
            return {name: getattr(e, attr) for name, attr in SNAPSHOT_ARRAYS.items()}
        return {name: functools.partial(e.host_array, name) for name in SNAPSHOT_ARRAYS}

    def _snapshot_layout(self) -> dict:
        """name -> (shape, dtype) of the engine's snapshot arrays, without copies."""
        return self._engine.snapshot_layout() if self.backend == "hybrid" else snapshot_layout(self._engine)

    def _encode_state(self, arrays: dict) -> bytes:
        """MAGIC, fingerprint, digest and an .npz payload (np.savez's bytes) written in one
        buffer, each array as its turn comes (a function is called then): the state's
        bytes plus one array's host copy at most, where np.savez and joining the header
        held the payload two or three times."""
        head = STATE_MAGIC + self._fingerprint().encode()
        buf = io.BytesIO()
        buf.write(head + b"\0" * _DIGEST_BYTES)
        with zipfile.ZipFile(_FromHere(buf), mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as npz:
            for name, value in arrays.items():
                array = np.asanyarray(value() if callable(value) else value)
                with npz.open(name + ".npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, array, allow_pickle=False)
                del array
        with buf.getbuffer() as view:
            start = len(head) + _DIGEST_BYTES
            view[len(head):start] = _digest(view[start:])
        return buf.getvalue()  # the buffer's own bytes, not a copy (no views left)

    @_engine_call
    def compose_state(self, parts) -> bytes:
        """A state for this environment made of environments taken from other snapshots,
        for set_state(). parts: (state, ids) pairs, each state get_state()'s bytes of a
        synchronous AtariVectorEnv with this one's game and settings and any num_envs, ids
        the environments taken from it, in order; num_envs in all. After set_state each
        environment goes on exactly as it would have in its source (same console, RNGs,
        frame stack and episode counters), on any backend. This environment must be
        synchronous too. Used, for example, to replay a long run's stretches side by side."""
        self._check_open("compose_state")
        if self._async:
            raise ValueError("compose_state needs a synchronous AtariVectorEnv (batch_size == num_envs)")
        try:
            parts = list(parts)
        except TypeError:
            raise TypeError(f"compose_state: parts must be a list of (state, ids) pairs, got "
                            f"{type(parts).__name__}") from None
        checked = []  # the ids' kinds and their total first: 10**6 ids of one row were
        for index, part in enumerate(parts):  # copied (89 GiB) before the total was checked
            try:
                state, ids = part
            except (TypeError, ValueError):
                raise TypeError(f"compose_state: part {index} must be a (state, ids) pair") from None
            ids = np.asarray(ids)
            if ids.size == 0:  # np.asarray([]) is float64: an index array must be integers
                ids = ids.astype(np.intp)
            if ids.ndim != 1 or ids.dtype.kind not in "iu":
                raise ValueError(f"compose_state: part {index}'s ids must be a 1-D list of environment indices")
            checked.append((state_bytes(state, f"compose_state: part {index}'s state"), ids))
        total = sum(len(ids) for _, ids in checked)
        if total != self.num_envs:
            raise ValueError(f"compose_state: the parts take {total} environments, this "
                             f"AtariVectorEnv has {self.num_envs}")
        names = ("env", "state", "frames", "raw", "stack", "shown")
        taken = {name: [] for name in names}
        for index, (state, ids) in enumerate(checked):
            data = self._decode_state(state, any_size=True)
            if not bool(data["started"]):
                raise ValueError(f"compose_state: part {index}'s state was saved before its first reset")
            n = len(data["env"])
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise ValueError(f"compose_state: part {index}'s ids must be a 1-D list of "
                                 f"environments in 0..{n - 1}")
            for name in names:
                taken[name].append(data[name][ids])
        arrays = {name: np.concatenate(rows) for name, rows in taken.items()}
        arrays.update(last_ids=np.arange(self.num_envs, dtype=np.int32), started=np.array(True),
                      in_flight=np.zeros(self.num_envs, bool), ready=np.array([], np.int32))
        return self._encode_state(arrays)

    def __copy__(self):
        # a shallow copy shares the engine, as copy.copy of ale-py's AtariVectorEnv shares
        # its C++ object (__reduce_ex__ below would refuse it)
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    def __reduce_ex__(self, protocol):
        # The engine is a C extension object; the snapshot is get_state()'s bytes.
        raise TypeError("cannot pickle hybridsim.vector.AtariVectorEnv: save get_state() and "
                        "restore it with set_state() on an AtariVectorEnv made with the same arguments")

    _STAGE = ("stage_obs", "stage_final", "stage_reward", "stage_terminated", "stage_truncated",
              "stage_lives", "stage_frame", "stage_episode_frame", "stage_has_final")

    @_engine_call
    def set_state(self, state: bytes):
        """Restore get_state()'s bytes (same game and settings). Returns (obs, info) of the
        last result's environments as they stand, to carry on with send()/step()."""
        self._check_open("set_state")
        data = self._decode_state(state_bytes(state), stored=("frames", "raw", "stack"))
        self._drain()
        self._pending = None
        e = self._engine
        if self.backend != "cpu":
            e.load_arrays(data)
        else:
            for name, attr in SNAPSHOT_ARRAYS.items():
                getattr(e, attr)[...] = data[name]
        e.set_shown(data["shown"])
        e.forget_undrawn()
        if self._async:
            for name in self._STAGE:
                if getattr(e, name) is not None:
                    getattr(e, name)[...] = data[name]
            self._in_flight[:] = data["in_flight"]
            self._ready = [int(k) for k in data["ready"]]
            # every step running at get_state had finished; "submission" returns them in the
            # order saved, which a submission-order env saves in the order sent
            self._sent = list(self._ready) if self.async_order == "submission" else []
        if not bool(data["started"]):
            self._last_ids = None
            return None, {}
        ids = data["last_ids"].astype(np.int32)
        self._last_ids = ids
        out = self._outputs(len(ids), False)
        self._engine.write_current(ids, out["obs"], out["reward"], out["terminated"].view(np.uint8),
                                   out["truncated"].view(np.uint8), out["lives"], out["frame_number"],
                                   out["episode_frame_number"])
        if self._deliver is not None:
            return self._deliver(out["obs"]), self._deliver(self._info(ids, out))
        return out["obs"], self._info(ids, out)

    def _decode_state(self, state: bytes, any_size: bool = False, stored=()) -> dict[str, np.ndarray]:
        """get_state()'s arrays, checked before anything is overwritten: the magic, this
        environment's fingerprint, the payload's digest (a truncated or corrupted state is
        refused; format 1, before digests, is still read) and every array's dtype, shape
        and indices. The console bytes themselves are trusted once the digest matches.
        any_size: a synchronous environment's state with any num_envs (compose_state).
        stored: names left in the payload until used (_StoredArray), for set_state."""
        magic = state[:len(STATE_MAGIC)]
        if magic not in (STATE_MAGIC, _STATE_MAGIC_V1):
            raise ValueError(f"not a hybridsim AtariVectorEnv state (expected it to start with {STATE_MAGIC!r})")
        head = len(STATE_MAGIC) + 32
        other_settings = "the state was saved by an AtariVectorEnv with another game, settings or build"
        if not any_size and state[len(STATE_MAGIC):head] != self._fingerprint().encode():
            raise ValueError(other_settings)
        start = head + _DIGEST_BYTES if magic == STATE_MAGIC else head  # the payload's
        if magic == STATE_MAGIC:
            with memoryview(state) as view:  # no copy of the payload (tens of GB at 256K environments)
                altered = _digest(view[start:]) != state[head:start]
            if altered:
                raise ValueError(f"corrupted AtariVectorEnv state: its digest does not match its "
                                 f"{len(state) - start:,} bytes (truncated or altered)")
        try:
            source = io.BytesIO(state)  # shares the bytes; zipfile skips the header
            source.seek(start)
            npz = np.load(source, allow_pickle=False)  # closed with its last _StoredArray
            if stored and npz.zip.testzip() is not None:  # each member's CRC, read in chunks
                raise ValueError("a member's CRC does not match its data")
            data = {name: _StoredArray(npz, name) if name in stored else npz[name] for name in npz.files}
        except Exception as exc:  # zipfile, numpy format and pickle refusals alike
            raise ValueError(f"corrupted AtariVectorEnv state: {type(exc).__name__}: {exc}") from None
        e = self._engine
        n = self.num_envs
        if any_size:
            n = len(data["env"]) if getattr(data.get("env"), "ndim", 0) == 2 else 0
            if not n or state[len(STATE_MAGIC):head] != self._fingerprint(n).encode():
                raise ValueError(other_settings + " (or a batch_size below its num_envs)")
        expected = dict(self._snapshot_layout())  # name -> (shape, dtype)
        shown = np.asarray(e.shown())
        expected.update(shown=(shown.shape, shown.dtype), started=((), np.dtype(bool)),
                        in_flight=(self._in_flight.shape, self._in_flight.dtype))
        if self._async and not any_size:
            expected.update({name: (np.shape(getattr(e, name)), np.asarray(getattr(e, name)).dtype)
                             for name in self._STAGE if getattr(e, name) is not None})
        for name, (shape, dtype) in expected.items():
            got = data.get(name)
            shape = tuple(shape) if name == "started" else (n,) + tuple(shape[1:])
            if got is None or got.dtype != dtype or got.shape != shape:
                raise ValueError(f"corrupted AtariVectorEnv state: array {name!r} is "
                                 f"{'missing' if got is None else f'{got.dtype} {got.shape}'}, expected "
                                 f"{dtype} {shape}")
        if not np.isin(data["shown"], (0, 1)).all():
            raise ValueError("corrupted AtariVectorEnv state: 'shown' must hold 0 or 1 per environment")
        for name in ("last_ids", "ready"):
            ids = data.get(name)
            if ids is None or ids.dtype.kind not in "iu" or ids.ndim != 1 or len(ids) > n \
                    or (len(ids) and (ids.min() < 0 or ids.max() >= n)) or len(np.unique(ids)) != len(ids):
                raise ValueError(f"corrupted AtariVectorEnv state: {name!r} must be distinct "
                                 f"environment ids in 0..{n - 1}")
        batch = self.batch_size if self._async and not any_size else n
        if bool(data["started"]) and len(data["last_ids"]) != batch:
            raise ValueError("corrupted AtariVectorEnv state: 'last_ids' must hold one batch")
        if not np.array_equal(np.sort(data["ready"]), np.flatnonzero(data["in_flight"])):
            # get_state settles every running step: in flight means finished and staged
            raise ValueError("corrupted AtariVectorEnv state: 'ready' must list exactly the "
                             "environments in flight")
        # The digest is unkeyed: a crafted payload passes it, so the rows' fields that the
        # emulator indexes with are checked too (cuda/ale_env.h env_state_check).
        from hybridsim import _vector
        reference = np.asarray(e.env_mem[0]) if self.backend == "cpu" else e.env_row_host(0)[0]
        bad = _vector.check_state_rows(data["env"], data["state"], reference, self._config["stack_num"])
        if bad is not None:
            row, part, text = bad
            raise ValueError(f"corrupted AtariVectorEnv state: environment {row}: state field "
                             f"{'' if part == 'env' else 'vector.'}{text}")
        return data

    # ----- misc ----------------------------------------------------------------------------
    @_engine_call
    def close_extras(self, **kwargs) -> None:
        if "_in_flight" not in self.__dict__:  # __init__ failed before a step could be sent
            return
        self._drain()
        if self.backend == "cpu":
            self._engine.pool_stop()  # join the worker threads, as ale-py's close() does

    def __repr__(self) -> str:
        if self.backend != "cpu":
            return (f"hybridsim.AtariVectorEnv({self.game!r}, num_envs={self.num_envs}, "
                    f"backend={self.backend!r}, device={self.device!r}, engine={self._engine!r})")
        return (f"hybridsim.AtariVectorEnv({self.game!r}, num_envs={self.num_envs}, "
                f"batch_size={self.batch_size}, num_threads={self.num_threads}, backend={self.backend!r})")
