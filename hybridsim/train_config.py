"""`hybridsim train`'s settings and its environments, without torch.

The command line is built from TrainConfig, so this module imports nothing heavy: `hybridsim
games`, `analyze`, `verify` and `replay` start without loading torch (about 2.5 s).
"""
from __future__ import annotations

import dataclasses
import math
import os

OPTIMIZERS = ("rmsprop_tf", "rmsprop", "adam")
OBS_NORMALIZATIONS = ("scale", "running")
ALLREDUCE_CHOICES = ("auto", "mpi", "nccl", "gloo")
LOG_COMPRESSIONS = ("lzf", "gzip", "none")
IMPALA_ORDERS = ("submission", "completion")
MAX_FRAME_SKIP = 3600  # 60 s of NTSC frames
NO_EPISODE_LIMIT = 2**31 - 1  # max_episode_frames 0: the vector envs' largest limit (a C int)
OBSERVATION_SHAPE = (4, 84, 84)  # the training observation: a stack of 4 grayscale 84x84 frames
OBSERVATION_BYTES = math.prod(OBSERVATION_SHAPE)


@dataclasses.dataclass
class TrainConfig:
    game: str = "pong"
    """Game to train on: an ale-py ROM name such as pong, breakout or space_invaders."""
    backend: str = "cpu"
    """Environment backend: cpu (hybridsim's batched engine), gpu, hybrid, or ale-py (ale-py's AtariVectorEnv, a reference)."""
    num_envs: int = 16
    """Number of environments stepped together (per rank)."""
    total_frames: int = 2_000_000
    """Training budget in emulator frames (agent steps x frame_skip), summed over environments."""
    log_dir: str = "runs/pong"
    """Run directory: checkpoints, metrics.csv, TensorBoard events, learning_curve.png, trajectories."""
    seed: int = 1
    """Seed of the model, the action sampler and the environments (environment i gets seed + i, as in ale-py's and gymnasium's vector envs, so runs seeded s and s + 1 share all but one environment seed: space independent runs' seeds by more than the job's environments on all ranks, e.g. 1000, 2000, 3000 for under 1,000)."""
    config: str = ""
    """Optional TOML or JSON file with any of these settings, or a shipped recipe's name (quickstart, pong-cpu, pong-h200); the command line overrides it."""
    resume: bool = False
    """Continue from log_dir/checkpoint.pt (same config) instead of starting afresh."""
    schedule: str = "a2c"
    """a2c (synchronous, minibatches of environments updated in turn) or impala (asynchronous: the learner acts on each batch of env_batch_size environments while the others step)."""
    model: str = "nature"
    """Network: nature (Mnih et al. 2015) or impala (Espeholt et al. 2018 ResNet)."""
    use_lstm: bool = False
    """Add IMPALA's recurrent core after the network's trunk: an LSTM of 256 units fed the trunk's features, the previous action and the previous reward clipped to [-1, 1], its state zero at each episode start (Espeholt et al. 2018, fig. 3). The learner unrolls it over each trajectory from the state the actor had; checkpoints carry every environment's state. Pair it with the default optimizer, rmsprop_tf (with torch's rmsprop it did not learn Kung-Fu Master in 400k frames: BENCHMARKS.md)."""
    obs_normalization: str = "scale"
    """Network input: scale (frames / 255) or running (per-pixel running mean and variance, clipped to +-10: Baselines' VecNormalize, CuLE's --normalize; the statistics learn from every update's batch, summed over ranks)."""
    num_steps: int = 5
    """Rollout length T per update (a2c) or trajectory length (impala)."""
    num_minibatches: int = 1
    """a2c: groups of environments updated one after another from one rollout (CuLE's schedule; later groups learn from a slightly stale policy, corrected by V-trace). 1 is Baselines' A2C, one update of all num_envs x num_steps transitions."""
    env_batch_size: int = 0
    """impala: environments returned per asynchronous step (0 = num_envs / 2)."""
    impala_order: str = "submission"
    """impala: which environments a batch holds. submission: those sent longest ago, so a seed gives the same run with any --num-threads (the same --torch-threads; --backend ale-py allows it with --num-threads 1 only); completion: the first to finish (EnvPool's and ale-py's rule), never waiting for a slow one, but with more than one worker thread the batches, and so the run, differ run to run."""
    learner_batch: int = 8
    """impala: trajectories per learner update."""
    optimizer: str = "rmsprop_tf"
    """rmsprop_tf (RMSprop as TensorFlow 1 and Baselines' A2C: mean square starting at 1, eps inside the root; hybridsim/optim.py says why), rmsprop (torch.optim.RMSprop) or adam."""
    lr: float = 0.00065
    """Initial learning rate (CuLE's A2C default), decayed linearly to 0 when lr_decay is on."""
    lr_decay: bool = True
    """Decay the learning rate linearly to zero over total_frames."""
    rmsprop_alpha: float = 0.99
    """RMSprop smoothing constant."""
    eps: float = 1e-5
    """Optimizer epsilon."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm to this value."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus."""
    value_coef: float = 0.5
    """Weight of the baseline loss 0.5 (vs - V)^2 (torchbeast's form; CuLE weighs (vs - V)^2 itself, so its 0.5 is 1.0 here)."""
    gamma: float = 0.99
    """Discount factor."""
    clip_rho: float = 1.0
    """V-trace rho-bar (truncation of the temporal-difference importance weight)."""
    clip_pg_rho: float = 1.0
    """V-trace truncation of the policy-gradient importance weight."""
    vtrace_lambda: float = 1.0
    """V-trace lambda (trace cutting)."""
    reward_clip: bool = True
    """Clip rewards to [-1, 1] for learning (logged returns stay raw)."""
    frame_skip: int = 4
    """Emulator frames per agent step."""
    repeat_action_probability: float = 0.0
    """Sticky-action probability (ALE's v5 environments use 0.25)."""
    noop_max: int = 30
    """Up to this many no-op actions after each reset."""
    episodic_life: bool = False
    """End the episode when a life is lost, resetting the game (ale-py's AtariVectorEnv episodic_life), so the agent only sees its first life; life_loss_terminal is the DQN variant that plays on. Eval plays whole games."""
    life_loss_terminal: bool = False
    """The DQN variant of episodic life: a lost life is a terminal for the learner (no bootstrapping across it, a recurrent core's memory starts afresh) while the game plays on, so the agent sees every life (Mnih et al. 2015; ale-py's life_loss_info, from its `lives`: fewer than before and more than 0). Episode returns, the trajectory logs and eval stay whole games."""
    max_episode_frames: int = 108_000
    """Truncate episodes after this many emulator frames (0: never; ALE's vector envs would cut every episode after one step)."""
    bootstrap_truncation: bool = False
    """Where the time limit (max_episode_frames) cuts an episode, the learner's return goes on past the cut: its reward there takes gamma x V(final observation), by the acting network (Pardo et al. 2018, "Time Limits in Reinforcement Learning"). Off: the cut ends the return as a terminal does, as in torchbeast."""
    device: str = "auto"
    """Torch device for the learner: auto, cpu, cuda or cuda:K (auto and cuda: with several GPUs visible, local rank L takes GPU L mod count)."""
    cuda_deterministic: bool = True
    """A CUDA learner uses deterministic cuDNN/cuBLAS kernels, so a seed gives the same weights run to run (false: cuDNN may pick faster, non-deterministic ones)."""
    gpu_emulate: bool = False
    """gpu and hybrid backends: run the CUDA kernels as host code, one thread at a time (no GPU needed; slow, for checking a setup)."""
    num_threads: int = 0
    """Environment worker threads (0 = all cores available to this process)."""
    torch_threads: int = 0
    """Threads for the learner's CPU math (0 = the cores available to this process). Sums round differently with another count: the same seed gives the same weights with the same count."""
    checkpoint_every: int = 500_000
    """Write a checkpoint every this many frames (and always at the end)."""
    keep_checkpoints: bool = False
    """Keep every checkpoint written in log_dir as checkpoints/frames_N.pt (N: the run's frames then, in 12 digits, e.g. frames_000000400000.pt), for `hybridsim eval` of earlier points; checkpoint.pt stays the latest. Each costs the room of one checkpoint."""
    log_every: float = 5.0
    """Seconds between progress lines and metric rows (wall time, so the frames of the rows differ run to run; 0: a row every update)."""
    log_trajectories: bool = True
    """Write per-step HDF5 trajectory logs (actions, rewards, values, logits) into log_dir."""
    log_observations: bool = False
    """Also log observations (every obs_stride steps, for each rank's first environment) into the trajectory files."""
    obs_stride: int = 100
    """Step interval between logged observations."""
    log_compression: str = "lzf"
    """Trajectory file compression: lzf (fast; readable by h5py, other HDF5 readers need its filter plugin), gzip (slower, readable by any HDF5 tool: h5dump, MATLAB, HDF5.jl) or none."""
    log_flush_seconds: float = 30.0
    """Longest time trajectory rows wait in memory (a kill -9 loses at most this much of the log); they are appended sooner, at most every 2 s, whenever a whole chunk of 256 steps is ready."""
    sync_check_every: int = 100
    """Updates between checks that all MPI ranks hold identical parameters."""
    stall_timeout: float = 600.0
    """MPI: end the job when training makes no progress for this many seconds (a hung or stopped rank blocks the others in a collective; three times as long before the first update, for start-up); a stop signal that cannot be acted on within 60 s ends it too. 0 turns both off."""
    allreduce: str = "mpi"
    """Gradient averaging across ranks: mpi (mpi4py, staged through host memory), nccl or gloo (torch.distributed bootstrapped from the MPI ranks; MPI if it cannot start), auto (nccl for a CUDA learner, else mpi)."""
    disk_reserve: bool = True
    """Hold a file in log_dir (room for two trajectory flushes, and on rank 0 a checkpoint besides) and delete it when the disk fills, so the final checkpoint and the last trajectory rows still fit."""
    fallback_dir: str = ""
    """Where the final checkpoint goes when log_dir's file system is full (default: the system temporary directory, if it is on another file system)."""

    def rollout_width(self) -> int:
        """Trajectories in one update: the environments (a2c) or learner_batch (impala)."""
        return self.num_envs if self.schedule == "a2c" else self.learner_batch

    def rollout_observation_bytes(self) -> int:
        """The uint8 observations of one update's rollout, num_steps + 1 per trajectory."""
        return (self.num_steps + 1) * self.rollout_width() * OBSERVATION_BYTES

    def unused(self, given) -> str | None:
        """A message for the first of the settings in `given` (those set on the command line)
        that these settings leave unused, such as --learner-batch under the a2c schedule:
        the run would silently ignore it. None when all apply. (A recipe file may carry
        settings for another schedule; only the command line is held to this.)"""
        logging_off = "--log-trajectories is false"
        rules = [
            (self.schedule != "impala", ("env_batch_size", "learner_batch", "impala_order"),
             f"applies to --schedule impala, not {self.schedule}"),
            (self.schedule != "a2c", ("num_minibatches",), f"applies to --schedule a2c, not {self.schedule}"),
            (self.backend not in ("gpu", "hybrid"), ("gpu_emulate",),
             f"applies to --backend gpu or hybrid, not {self.backend}"),
            (not self.log_trajectories, ("log_observations", "log_compression", "log_flush_seconds", "obs_stride"),
             f"applies to trajectory logs, and {logging_off}"),
            (not self.log_observations, ("obs_stride",), "applies with --log-observations, which is off"),
        ]
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for applies_not, names, why in rules:
            for name in names:  # a default spelled out (a wrapper's --gpu-emulate false) changes nothing
                if applies_not and name in given and getattr(self, name) != defaults[name]:
                    return f"--{name.replace('_', '-')} {why}"
        return None

    def environment_checks(self) -> list[tuple[bool, str]]:
        """(ok, message) for the settings that make the environments: shared by validate()
        and by `hybridsim eval`, which builds new environments from a checkpoint's config."""
        from hybridsim.vector import MAX_NOOP_MAX  # here, not at import: the command line starts fast
        return [
            (self.num_envs >= 1, f"num_envs must be >= 1, got {self.num_envs}"),
            (self.num_envs < 2**20, f"num_envs must be < 2**20 per rank, got {self.num_envs}"),
            (self.frame_skip >= 1, f"frame_skip must be >= 1, got {self.frame_skip}"),
            # one agent step runs frame_skip frames with no check of the budget or a stop
            # signal in between: a typo like 40000 would overshoot by hours
            (self.frame_skip <= MAX_FRAME_SKIP,
             f"frame_skip must be <= {MAX_FRAME_SKIP} (one minute of play per action), "
             f"got {self.frame_skip}"),
            (0 <= self.repeat_action_probability <= 1,
             f"repeat_action_probability must be in [0, 1], got {self.repeat_action_probability}"),
            (self.noop_max >= 0, f"noop_max must be >= 0, got {self.noop_max}"),
            (self.noop_max <= MAX_NOOP_MAX,
             f"noop_max must be <= {MAX_NOOP_MAX:,} (30 minutes of frames; a reset runs its no-ops "
             f"without a stop check), got {self.noop_max}"),
            (0 <= self.max_episode_frames <= NO_EPISODE_LIMIT,
             f"max_episode_frames must be in 0..{NO_EPISODE_LIMIT} (0: no limit), got {self.max_episode_frames}"),
            (self.backend in ("cpu", "gpu", "hybrid", "ale-py"),
             f"backend must be cpu, gpu, hybrid or ale-py, got {self.backend!r}"),
            (0 <= self.seed and self.seed + self.num_envs <= 2**31,
             f"seed must be in [0, 2**31 - num_envs] (environment i gets seed + i, a C int in ALE), "
             f"got {self.seed}"),
        ]

    def validate_environment(self):
        _raise_first_failure(self.environment_checks())

    def validate(self):
        checks = self.environment_checks() + [
            (self.total_frames >= 1, f"total_frames must be >= 1, got {self.total_frames}"),
            (self.schedule in ("a2c", "impala"), f"schedule must be a2c or impala, got {self.schedule!r}"),
            (self.num_steps >= 1, f"num_steps must be >= 1, got {self.num_steps}"),
            (self.optimizer in OPTIMIZERS, f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"),
            (self.obs_normalization in OBS_NORMALIZATIONS,
             f"obs_normalization must be one of {', '.join(OBS_NORMALIZATIONS)}, got {self.obs_normalization!r}"),
            (self.backend not in ("gpu", "hybrid") or self.schedule == "a2c",
             f"backend {self.backend!r} steps all environments together: use schedule a2c"),
            (self.allreduce in ALLREDUCE_CHOICES,
             f"allreduce must be one of {', '.join(ALLREDUCE_CHOICES)}, got {self.allreduce!r}"),
        ]
        finite = math.isfinite
        checks += [
            (finite(self.lr) and self.lr > 0, f"lr must be a finite number > 0, got {self.lr}"),
            (finite(self.eps) and self.eps > 0, f"eps must be a finite number > 0, got {self.eps}"),
            (0 <= self.rmsprop_alpha < 1, f"rmsprop_alpha must be in [0, 1), got {self.rmsprop_alpha}"),
            (self.max_grad_norm > 0, f"max_grad_norm must be > 0 (inf: no clipping), got {self.max_grad_norm}"),
            (finite(self.entropy_coef) and self.entropy_coef >= 0,
             f"entropy_coef must be a finite number >= 0, got {self.entropy_coef}"),
            (finite(self.value_coef) and self.value_coef >= 0,
             f"value_coef must be a finite number >= 0, got {self.value_coef}"),
            (0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}"),
            (self.clip_rho > 0, f"clip_rho must be > 0 (inf: no clipping), got {self.clip_rho}"),
            (self.clip_pg_rho > 0, f"clip_pg_rho must be > 0 (inf: no clipping), got {self.clip_pg_rho}"),
            (0 <= self.vtrace_lambda <= 1, f"vtrace_lambda must be in [0, 1], got {self.vtrace_lambda}"),
            (self.num_minibatches >= 1, f"num_minibatches must be >= 1, got {self.num_minibatches}"),
            (self.learner_batch >= 1, f"learner_batch must be >= 1, got {self.learner_batch}"),
            (self.env_batch_size >= 0, f"env_batch_size must be >= 0 (0: num_envs / 2), got {self.env_batch_size}"),
            (self.impala_order in IMPALA_ORDERS,
             f"impala_order must be one of {', '.join(IMPALA_ORDERS)}, got {self.impala_order!r}"),
            (self.checkpoint_every >= 1, f"checkpoint_every must be >= 1 frame, got {self.checkpoint_every}"),
            (finite(self.log_every) and self.log_every >= 0,
             f"log_every must be a finite number of seconds >= 0 (0: every update), got {self.log_every}"),
            (finite(self.log_flush_seconds) and self.log_flush_seconds > 0,
             f"log_flush_seconds must be a finite number > 0, got {self.log_flush_seconds}"),
            (1 <= self.obs_stride < 2**63, f"obs_stride must be in 1..2**63-1 (an HDF5 int64), got {self.obs_stride}"),
            (self.log_compression in LOG_COMPRESSIONS,
             f"log_compression must be one of {', '.join(LOG_COMPRESSIONS)}, got {self.log_compression!r}"),
            (self.sync_check_every >= 1, f"sync_check_every must be >= 1, got {self.sync_check_every}"),
            (self.stall_timeout >= 0, f"stall_timeout must be >= 0 seconds (0: off), got {self.stall_timeout}"),
            (self.num_threads >= 0, f"num_threads must be >= 0 (0: all cores), got {self.num_threads}"),
            (self.torch_threads >= 0, f"torch_threads must be >= 0 (0: all cores), got {self.torch_threads}"),
            # torch segfaults at 99,999 threads and crawls at 5,000: more than the machine's
            # CPUs is a typo (its affinity is no bound: OMP_PROC_BIND pins the main thread
            # to one core once torch loads libgomp)
            (self.torch_threads <= (os.cpu_count() or 1),
             f"torch_threads must be <= the {os.cpu_count() or 1} CPUs of this machine "
             f"(0: the cores this process may use), got {self.torch_threads}"),
        ]
        checks.append((bool(str(self.log_dir).strip()),
                       f"log_dir must name a directory, got {self.log_dir!r}"))
        checks.append((_utf8(str(self.log_dir)),  # TensorBoard's writer and h5py attributes need it
                       f"log_dir must be a UTF-8 path, got {self.log_dir!r}"))

        checks.append((not (self.episodic_life and self.life_loss_terminal),
                       "episodic_life and life_loss_terminal: choose one (episodic_life resets the "
                       "game at the first lost life, so no life is lost while the game plays on)"))
        if self.schedule == "impala":
            checks.append((self.env_batch_size <= self.num_envs,
                           f"env_batch_size ({self.env_batch_size}) must be <= num_envs "
                           f"({self.num_envs}): a batch is some of this rank's environments"))
            # ale-py's vector env returns the first to finish; one worker finishes them in order
            checks.append((self.backend != "ale-py" or self.impala_order == "completion"
                           or self.num_threads == 1,
                           f"--backend ale-py returns the environments that finish first: with "
                           f"impala_order submission (the default) it needs --num-threads 1, got "
                           f"{self.num_threads}{' (all cores)' if self.num_threads == 0 else ''}; "
                           f"or choose --impala-order completion"))
        if self.schedule == "a2c" and self.num_minibatches >= 1:
            checks.append((self.num_envs % self.num_minibatches == 0,
                           f"num_envs ({self.num_envs}) must be divisible by num_minibatches "
                           f"({self.num_minibatches})"))
        _raise_first_failure(checks)
        from hybridsim.roms import rom_path
        rom_path(self.game)  # an unknown game: FileNotFoundError listing the installed ROMs
        if self.backend == "ale-py":
            from hybridsim.games_table import require_ale_py_loadable
            require_ale_py_loadable(self.game, "--backend ale-py")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8, as surrogates (os.fsdecode)
        return False
    return True


def life_lost(lives, lives_before):
    """Which steps lost a life with the game playing on: fewer lives than before the step,
    and more than 0 (the last one ends the game). ale-py's rule for life_loss_info."""
    return (lives < lives_before) & (lives > 0)


def _raise_first_failure(checks: list[tuple[bool, str]]):
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def make_vector_env(cfg: TrainConfig, seed: int, batch_size: int = 0, learner_device=None):
    """The vector environment for a backend; all speak gymnasium's VectorEnv API plus send/recv.
    The gpu and hybrid backends hand a CUDA learner their batches as torch tensors on the
    device (DLPack, no copy), and a CPU learner numpy arrays."""
    kwargs = dict(game=cfg.game, num_envs=cfg.num_envs, batch_size=batch_size,
                  frameskip=cfg.frame_skip, repeat_action_probability=cfg.repeat_action_probability,
                  noop_max=cfg.noop_max, episodic_life=bool(cfg.episodic_life), reward_clipping=False,
                  max_num_frames_per_episode=cfg.max_episode_frames or NO_EPISODE_LIMIT,
                  num_threads=cfg.num_threads,
                  autoreset_mode="SameStep")
    if batch_size not in (0, cfg.num_envs) and cfg.backend != "ale-py":
        kwargs["async_order"] = cfg.impala_order
    if cfg.backend == "ale-py":
        from ale_py.vector_env import AtariVectorEnv

        from hybridsim.games_table import require_ale_py_loadable
        require_ale_py_loadable(cfg.game, "an ale-py environment")
        return AtariVectorEnv(**kwargs)
    try:
        from hybridsim.vector import AtariVectorEnv  # the batched engine
    except ImportError:
        raise ValueError(f"backend {cfg.backend!r} needs hybridsim's batched engine, which this "
                         f"build does not have yet; use --backend ale-py") from None
    if cfg.backend in ("gpu", "hybrid"):
        on_gpu = learner_device is not None and learner_device.type == "cuda" and not cfg.gpu_emulate
        kwargs["gpu_options"] = {"output": "torch" if on_gpu else "numpy", "emulate": cfg.gpu_emulate}
        if on_gpu:
            index = learner_device.index
            if index is None:
                import torch  # a CUDA learner has imported it already
                index = torch.cuda.current_device()
            kwargs["device"] = index
    return AtariVectorEnv(backend=cfg.backend, **kwargs)
