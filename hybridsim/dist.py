"""Data-parallel training across MPI ranks (one rank per GPU, or per CPU socket).

Each rank owns a disjoint block of environments (global env ids rank*N .. rank*N+N-1,
seeded seed + env id); parameters are broadcast from rank 0 at start; gradients are
averaged every update with one Allreduce on a flat buffer; rank 0 writes checkpoints and
merged metrics. All collectives happen at the same points of every rank's loop (once per
update and once per iteration), so ranks stay in lockstep. Launch with
`mpirun -n K python -m mpi4py -m hybridsim train ...`: `-m mpi4py` makes an uncaught
exception on any rank abort the whole job instead of leaving the others waiting.

`LocalComm` is the single-process stand-in with the same methods, so the trainer has no
special cases; mpi4py is optional.

Gradients can instead be averaged by torch.distributed (`TorchDistComm`, `--allreduce`
nccl or gloo): its process group is bootstrapped from the MPI ranks (rank 0 picks an
address and port and broadcasts them over MPI; no launcher variables needed), NCCL
all-reduces CUDA tensors in place without the host staging, gloo does the same on CPU.
Every other collective (frame counts, stop flags, metrics) stays on MPI. If the process
group cannot be set up, training warns and keeps the MPI path.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import sysconfig
import threading
import time
import zlib

import numpy as np
import torch

from hybridsim.train_config import ALLREDUCE_CHOICES


def _scatter_gradients(model, grads, averaged) -> None:
    """Copy the averaged flat buffer back into each parameter's .grad, in order."""
    offset = 0
    for p, g in zip(model.parameters(), grads):
        n = g.numel()
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        p.grad.copy_(averaged[offset:offset + n].view_as(p.grad))
        offset += n


class LocalComm:
    rank = 0
    size = 1

    def broadcast_parameters(self, model):
        pass

    def allreduce_gradients(self, model):
        pass

    def allreduce_sum(self, value):
        return value

    def bcast(self, value):
        return value

    def gather(self, value):
        return [value]

    def parameters_in_sync(self, model) -> bool:
        return True

    def barrier(self):
        pass


def _flat_grads(model) -> list[torch.Tensor]:
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


class CollectiveTracker:
    """Which collective this rank's main thread is inside (None: none), for the watchdog's
    report of where each rank is when a job stalls; and the communicator the watchdogs
    talk over, a duplicate of training's so their messages never match a collective's
    (None unless MPI runs with MPI_THREAD_MULTIPLE: the watchdog thread sends while the
    main thread may be inside a collective). Shared by an MPIComm and the TorchDistComm
    built from it."""

    def __init__(self, comm):
        from mpi4py import MPI
        self.current: str | None = None
        # Dup is collective: every rank takes it, or none (ranks may get different levels)
        multiple = comm.allreduce(int(MPI.Query_thread() == MPI.THREAD_MULTIPLE), op=MPI.MIN)
        self.report_comm = comm.Dup() if multiple else None

    @contextlib.contextmanager
    def inside(self, name: str):
        outer, self.current = self.current, name
        try:
            yield
        finally:
            self.current = outer


class MPIComm:
    """Collectives over an mpi4py communicator."""

    gradient_path = "mpi (mpi4py Allreduce through host memory)"

    def __init__(self, comm, tracker: CollectiveTracker | None = None):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.tracker = tracker if tracker is not None else CollectiveTracker(comm)  # collective: Dup
        self._host_buffer = None

    def broadcast_parameters(self, model):
        with torch.no_grad(), self.tracker.inside("the parameter broadcast"):
            for tensor in list(model.parameters()) + list(model.buffers()):
                host = tensor.detach().cpu().numpy().copy()
                self.comm.Bcast(host, root=0)
                tensor.copy_(torch.from_numpy(host))

    def allreduce_gradients(self, model):
        """Average gradients: flatten, stage through (pinned) host memory, one Allreduce."""
        from mpi4py import MPI
        grads = _flat_grads(model)
        flat = torch.cat([g.reshape(-1) for g in grads]).float()
        if self._host_buffer is None or self._host_buffer.numel() != flat.numel():
            pin = flat.is_cuda
            self._host_buffer = torch.empty(flat.numel(), dtype=torch.float32, pin_memory=pin)
        self._host_buffer.copy_(flat)
        buffer = self._host_buffer.numpy()
        with self.tracker.inside("the gradient all-reduce"):
            self.comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        buffer /= self.size
        averaged = self._host_buffer.to(flat.device, non_blocking=False)
        _scatter_gradients(model, grads, averaged)

    def allreduce_sum(self, value):
        from mpi4py import MPI
        with self.tracker.inside("an all-reduce"):
            return self.comm.allreduce(value, op=MPI.SUM)

    def bcast(self, value):
        with self.tracker.inside("a broadcast from rank 0"):
            return self.comm.bcast(value, root=0)

    def gather(self, value):
        with self.tracker.inside("a gather to rank 0"):
            return self.comm.gather(value, root=0)

    def allgather(self, value):
        with self.tracker.inside("an all-gather"):
            return self.comm.allgather(value)

    def parameters_in_sync(self, model) -> bool:
        """True on every rank when all ranks hold bit-identical parameters and buffers (the
        running input statistics)."""
        digest = 0
        for p in [*model.parameters(), *model.buffers()]:
            digest = zlib.crc32(p.detach().cpu().numpy().tobytes(), digest)
        digests = self.allgather(digest)
        return all(d == digests[0] for d in digests)

    def barrier(self):
        with self.tracker.inside("a barrier"):
            self.comm.Barrier()


class TorchDistComm(MPIComm):
    """MPIComm whose parameter broadcast and gradient allreduce go through torch.distributed."""

    def __init__(self, comm, backend: str, device: torch.device, timeout_s: float = 300.0,
                 tracker: CollectiveTracker | None = None):
        super().__init__(comm, tracker)
        import datetime
        import socket
        import torch.distributed as tdist
        self.backend = backend
        self.device = device
        self.gradient_path = f"{backend} (torch.distributed, bootstrapped over MPI)"
        hosts = self.allgather(socket.gethostname())
        timeout = datetime.timedelta(seconds=timeout_s)
        address = problem = store = None
        if self.rank == 0:
            host = os.environ.get("HYBRIDSIM_DIST_ADDR")
            if not host and len(set(hosts)) == 1:
                host = "127.0.0.1"
            elif not host:  # an address of rank 0's host the others can reach: not loopback
                found = [info[4][0] for info in socket.getaddrinfo(hosts[0], None, socket.AF_INET)
                         if not info[4][0].startswith("127.")]
                host = found[0] if found else None
                if host is None:
                    problem = (f"{hosts[0]} resolves only to loopback addresses; set "
                               f"HYBRIDSIM_DIST_ADDR to an address of it the other nodes reach")
            if host:
                # port 0: the store binds a free port itself (a port probed first and bound
                # later could be taken in between)
                try:
                    store = tdist.TCPStore(host, 0, self.size, is_master=True, timeout=timeout,
                                           wait_for_workers=False)
                    address = (host, store.port)
                except (RuntimeError, OSError) as exc:
                    problem = f"rank 0 could not open the torch.distributed store on {host}: {exc}"
        address, problem = self.bcast((address, problem))
        if problem:
            raise ValueError(problem)
        if store is None:
            store = tdist.TCPStore(address[0], address[1], self.size, is_master=False, timeout=timeout)
        self._store = store
        tdist.init_process_group(backend, store=store, rank=self.rank, world_size=self.size,
                                 timeout=timeout)
        self._tdist = tdist
        # NCCL builds its communicator at the first collective, not in init_process_group: a
        # setup it refuses must fail here, where the caller can still fall back to MPI.
        try:
            probe = torch.ones(1, device=self._tensor_device())
            tdist.all_reduce(probe, op=tdist.ReduceOp.SUM)
            total = float(probe.item())
        except Exception as exc:
            self.close()
            raise RuntimeError(f"the first {backend} allreduce failed: {exc}") from exc
        if total != self.size:
            self.close()
            raise RuntimeError(f"the first {backend} allreduce summed {total} over {self.size} ranks")

    def _tensor_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")

    def _wait_for_nccl(self) -> None:
        """NCCL's collectives return before they are done: wait here, inside the tracked
        collective, so that a wait for a missing rank is reported as one."""
        if self.backend == "nccl":
            torch.cuda.current_stream(self.device).synchronize()

    def broadcast_parameters(self, model):
        with torch.no_grad(), self.tracker.inside("the parameter broadcast"):
            for tensor in list(model.parameters()) + list(model.buffers()):
                staged = tensor.detach().to(self._tensor_device()).contiguous()
                self._tdist.broadcast(staged, src=0)
                tensor.copy_(staged)
            self._wait_for_nccl()

    def allreduce_gradients(self, model):
        """Average gradients: one flat buffer, one all_reduce on the backend's device."""
        grads = _flat_grads(model)
        flat = torch.cat([g.reshape(-1).float() for g in grads]).to(self._tensor_device())
        with self.tracker.inside("the gradient all-reduce"):
            self._tdist.all_reduce(flat, op=self._tdist.ReduceOp.SUM)
            self._wait_for_nccl()
        flat /= self.size
        averaged = flat.to(grads[0].device) if grads else flat
        _scatter_gradients(model, grads, averaged)

    def close(self):
        if self._tdist.is_initialized():
            self._tdist.destroy_process_group()


def gradient_backend(requested: str, device: torch.device) -> str:
    """The gradient path to use: auto means nccl for CUDA learners (when torch has NCCL),
    else mpi. (Training's default is mpi until NCCL has been measured against it on GPUs.)"""
    if requested not in ALLREDUCE_CHOICES:
        raise ValueError(f"allreduce must be one of {', '.join(ALLREDUCE_CHOICES)}, got {requested!r}")
    if requested != "auto":
        return requested
    import torch.distributed as tdist
    if device.type == "cuda" and tdist.is_available() and tdist.is_nccl_available():
        return "nccl"
    return "mpi"


def _gpu_identity(device: torch.device):
    """(host, GPU uuid) of a CUDA device, None for other devices."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    import socket
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    # without a uuid, the index as this process's CUDA_VISIBLE_DEVICES numbers it
    return socket.gethostname(), str(uuid) if uuid else f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')}/{index}"


def ranks_sharing_a_gpu(identities) -> list[list[int]]:
    """Groups of ranks (by position in `identities`) whose (host, GPU) identity is the same."""
    ranks: dict = {}
    for rank, ident in enumerate(identities):
        if ident is not None:
            ranks.setdefault(tuple(ident), []).append(rank)
    return [r for r in ranks.values() if len(r) > 1]


def with_gradient_backend(comm, requested: str, device: torch.device):
    """`comm`, or a TorchDistComm over the same MPI ranks when nccl/gloo is asked for (or
    auto picks nccl); if torch.distributed cannot start, a warning and `comm` unchanged."""
    if not isinstance(comm, MPIComm) or isinstance(comm, TorchDistComm):
        return comm
    backend = gradient_backend(requested, device)
    if backend == "mpi":
        return comm
    import sys
    import torch.distributed as tdist
    problem = None
    if not tdist.is_available():
        problem = "this torch build has no torch.distributed"
    elif backend == "nccl" and (device.type != "cuda" or not tdist.is_nccl_available()):
        problem = f"nccl needs a CUDA learner and a torch built with NCCL (device {device})"
    if backend == "nccl":  # collective: every rank gathers, whatever it found above
        shared = ranks_sharing_a_gpu(comm.allgather(_gpu_identity(device)))
        if shared and problem is None:
            problem = (f"nccl needs a GPU per rank, and ranks {', '.join(map(str, shared[0]))} share one "
                       f"(more ranks on a node than GPUs)")
    # every rank takes the same decision (init_process_group is collective: a rank that
    # skipped it would leave the others waiting)
    new = None
    if comm.allreduce_sum(0 if problem else 1) == comm.size:
        try:
            with comm.tracker.inside("torch.distributed's set-up"):  # its store waits for all ranks
                new = TorchDistComm(comm.comm, backend, device, tracker=comm.tracker)
        except (RuntimeError, OSError, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if comm.allreduce_sum(1 if new is not None else 0) == comm.size:
            return new
        if new is not None:
            new.close()
    if comm.rank == 0:
        print(f"warning: gradient allreduce over {backend} unavailable "
              f"({problem or 'it failed on another rank'}); using MPI", file=sys.stderr)
    return comm


# the launcher's global rank of this process: MPICH/Intel MPI, Open MPI, PMIx, MVAPICH, srun
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")


def launcher_rank() -> int | None:
    """This process's rank as its launcher numbered it, without starting MPI (None: no launcher)."""
    for key in RANK_VARIABLES:
        value = os.environ.get(key, "")
        if value.isdigit():
            return int(value)
    return None


def launched_ranks() -> int:
    """How many processes the launcher says it started (1 when it says nothing): mpiexec's
    PMI_SIZE (MPICH, Intel MPI), OMPI_COMM_WORLD_SIZE (Open MPI) or MV2_COMM_WORLD_SIZE
    (MVAPICH's mpirun_rsh), else the tasks of an srun step (not of the batch script, which
    runs once)."""
    for key in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    step = os.environ.get("SLURM_STEP_ID", "")
    if step.isdigit() and int(step) < 0xFFFFFF00 and os.environ.get("SLURM_STEP_NUM_TASKS", "").isdigit():
        return int(os.environ["SLURM_STEP_NUM_TASKS"])
    return 1


def init_comm():
    """MPIComm when running under an MPI launcher with more than one rank, else LocalComm.
    A launcher that started several processes that MPI does not connect (no mpi4py, or an
    mpi4py built for another MPI, or srun without --mpi) is an error: each process would
    train alone as rank 0 and all would write the same files. HYBRIDSIM_SINGLE_PROCESS=1
    says that is meant (independent runs per task, each with its own --log-dir)."""
    if os.environ.get("HYBRIDSIM_SINGLE_PROCESS") == "1":
        return LocalComm()
    launched = any(k in os.environ for k in RANK_VARIABLES + ("MPI_LOCALRANKID",))
    if not launched:
        return LocalComm()
    expected = launched_ranks()
    try:
        from mpi4py import MPI
    except ImportError:
        if expected > 1:
            raise RuntimeError(f"the launcher started {expected} processes but mpi4py is not "
                               f"installed, so they cannot train together: pip install mpi4py "
                               f"(hybridsim[mpi]); for independent runs per task, each with its "
                               f"own --log-dir, set HYBRIDSIM_SINGLE_PROCESS=1") from None
        return LocalComm()
    comm = MPI.COMM_WORLD
    if comm.Get_size() != expected and expected > 1:
        raise RuntimeError(f"the launcher started {expected} processes but MPI connects "
                           f"{comm.Get_size()}: mpi4py's MPI library is not the launcher's "
                           f"(`python -m mpi4py --mpi-library`), or srun lacks --mpi=pmi2/pmix; "
                           f"for independent runs per task set HYBRIDSIM_SINGLE_PROCESS=1")
    if comm.Get_size() == 1:
        return LocalComm()
    return MPIComm(comm)


def abort_job(code: int, message: str | None = None) -> None:
    """Say `message` on stderr (say_within), then end the whole MPI job (MPI_Abort) when
    this process runs in one with other ranks; return otherwise. A rank that stops on an
    error calls it so the others, which may be waiting for it in a collective, do not hang."""
    say_within(message)
    if not in_job_of_several_ranks():
        return
    time.sleep(1.0)  # the launcher forwards output asynchronously: let the message reach it
    sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(code)


def finalize_stopped_job() -> None:
    """MPI_Finalize now, in a process that ends a run with a non-zero status every rank took
    together (a stop by signal, a failed write: cli.run): mpi4py's runner would turn that
    status into MPI_Abort at exit, reported by MPICH as "Abort(3) on node 0 ..." per rank,
    by Open MPI as MPI_ABORT and by srun as a cancelled step, as if the stop had failed.
    Open MPI's mpirun still says a process "returned a non-zero exit code" (true) and that
    it ended the job (all ranks are past this by then). Nothing may use MPI afterwards."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()


def in_job_of_several_ranks() -> bool:
    """Whether MPI runs, with other ranks (MPI_Abort would end them too)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return (mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()
            and mpi.COMM_WORLD.Get_size() > 1)


def run_within(work, seconds: float, name: str) -> bool:
    """Run work() on a daemon thread and wait for it at most `seconds`: whether it
    finished. For I/O that a hung file system can block for ever."""
    worker = threading.Thread(target=work, name=name, daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


OUTPUT_WAIT_SECONDS = 5.0
_output_hung = threading.Event()  # a say_within did not finish: later ones do not wait again


def say_within(message: str | None, seconds: float = OUTPUT_WAIT_SECONDS) -> None:
    """Print message (if any) to stderr and flush stdout and stderr, waiting at most
    `seconds` in all: a stream on a hung file system, or a pipe nobody reads, must not
    keep a rank that is ending the job from ending it."""
    if _output_hung.is_set():
        return  # the streams' locks are held by the writer still waiting

    def say():
        if message is not None:
            print(message, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    if not run_within(say, seconds, "hybridsim-say"):
        _output_hung.set()


# the watchdogs' messages on CollectiveTracker.report_comm
_ASK_TAG, _REPORT_TAG, _STALLED_TAG = 1, 2, 3
REPORT_WAIT_SECONDS = 10.0  # rank 0 waits this long for the ranks' answers
RANK0_GRACE_SECONDS = 20.0  # and another rank this much longer for rank 0 to end the job


_STDLIB = sysconfig.get_paths()["stdlib"].replace(os.sep, "/") + "/"


def _library_code(path: str) -> bool:
    """A frame of Python's standard library or of an installed package other than hybridsim."""
    return "/hybridsim/" not in path and (path.startswith(_STDLIB) or "-packages/" in path)


def main_thread_location(depth: int = 3) -> str:
    """Where the main thread is: its innermost frame, then the next `depth` - 1 that are
    not library code (torch's wrappers, contextlib), innermost first. From the frame
    objects alone: no source file is read (traceback's linecache would, and block the
    watchdog on the hung file system it is to report)."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    parts = []
    while frame is not None and len(parts) < depth:
        code = frame.f_code
        path = code.co_filename.replace(os.sep, "/")
        if not parts or not _library_code(path):
            at = path.rfind("/hybridsim/")
            parts.append(f"{path[at + 1:] if at >= 0 else os.path.basename(path)}:{frame.f_lineno} "
                         f"in {code.co_name}")
        frame = frame.f_back
    return " < ".join(parts) or "unknown"


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5' (sorted ranks)."""
    spans = []
    for rank in ranks:
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def describe_stall(reports: dict, size: int) -> list[str]:
    """Lines saying where each rank is, from the watchdogs' answers (rank -> (collective or
    None, location)); ranks that did not answer are listed as such, and the last line names
    the ranks the job waits on."""
    groups: dict = {}
    for rank in range(size):
        if rank not in reports:
            key = f"no answer in {REPORT_WAIT_SECONDS:.0f} s (stopped, gone, or stuck where Python cannot run)"
        else:
            collective, where = reports[rank]
            key = f"waiting in {collective}, at {where}" if collective else f"not in a collective, at {where}"
        groups.setdefault(key, []).append(rank)
    lines = [f"  {'ranks' if len(r) > 1 else 'rank'} {rank_ranges(r)}: {key}" for key, r in groups.items()]
    culprits = [r for r in range(size) if r not in reports or not reports[r][0]]
    if culprits:
        lines.append(f"  the job waits on {'ranks' if len(culprits) > 1 else 'rank'} {rank_ranges(culprits)}")
    else:
        lines.append("  every rank is inside a collective: they are not all in the same one, "
                     "or the MPI transport itself is stuck")
    return lines


class ProgressWatchdog:
    """Ends an MPI job whose training stopped making progress. A rank blocked in a
    collective (another rank hung: stopped, deadlocked, stuck in I/O) never returns to
    Python, so neither its own checks nor its signal handlers run; this thread does.

    beat() after every iteration. With no beat for `stall_seconds`, or for `grace_seconds`
    after a stop signal (SIGUSR1/SIGTERM: the loop would have stopped by then, had it not
    been blocked), it ends the job (MPI_Abort, exit status 2). The signals are seen
    through signal.set_wakeup_fd: the interpreter's C-level handler writes their number
    there even while the main thread is blocked in C.

    Given the MPIComm (`comm`), rank 0's watchdog first asks every rank's watchdog where
    its main thread is (inside which collective, at which line) and prints that, naming
    the ranks the others wait on; a watchdog on another rank that sees the stall tells
    rank 0's, and ends the job itself only if rank 0 does not (rank 0 hung)."""

    def __init__(self, rank: int, stall_seconds: float, grace_seconds: float = 60.0,
                 signals=(signal.SIGUSR1, signal.SIGTERM), what: str = "starting",
                 first_beat_extra_seconds: float = 0.0, comm: MPIComm | None = None):
        self.rank, self.stall_seconds, self.grace_seconds = rank, stall_seconds, grace_seconds
        # a wait any rank may do before its first beat (a resume waiting for a killed
        # job's trajectory file to go quiet), while the others wait in a collective
        self.first_beat_extra_seconds = first_beat_extra_seconds
        self.signals = {int(s) for s in signals}
        self.tracker = getattr(comm, "tracker", None)
        self.channel = self.tracker.report_comm if self.tracker is not None else None
        self.size = getattr(comm, "size", 1)
        self._sends = []  # requests of messages sent without waiting: their buffers live as long
        self.last_beat = time.monotonic()
        self.beats = 0  # before the first, the start-up (kernel compiles, loads) may take longer
        self.stop_handled = False  # the loop acted on a stop: only the stall limit applies now
        self.frames, self.what = 0, ""  # where the last beat was
        self.before_first_beat = what
        self._stop = threading.Event()
        self._read_fd = self._write_fd = None
        self._old_wakeup = -1
        self._thread = threading.Thread(target=self._watch, name="hybridsim-watchdog", daemon=True)

    def start(self):
        try:
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            self._read_fd, self._write_fd = r, w
        except ValueError:  # not the main thread: stalls are still watched, signals not
            pass
        self._thread.start()
        return self

    def beat(self, frames: int, what: str = "") -> None:
        """Progress at `frames` (formatted only if the job is ended: this runs every iteration)."""
        self.last_beat = time.monotonic()
        self.beats += 1
        self.frames, self.what = frames, what

    def _last(self) -> str:
        if self.beats == 0:
            return self.before_first_beat
        return f"{self.what} at {self.frames:,} frames" if self.what else f"{self.frames:,} frames"

    def stop_acknowledged(self) -> None:
        """The loop saw the stop and is finishing (final checkpoint, logs): from now on only
        the stall limit applies, however long finishing takes."""
        self.stop_handled = True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._write_fd is not None:
            try:
                signal.set_wakeup_fd(self._old_wakeup)
            except ValueError:
                pass
            os.close(self._read_fd)
            os.close(self._write_fd)

    def _signalled(self, timeout: float) -> bool:
        if self._read_fd is None:
            self._stop.wait(timeout)
            return False
        import select
        ready, _, _ = select.select([self._read_fd], [], [], timeout)
        return bool(ready) and any(b in self.signals for b in os.read(self._read_fd, 64))

    def _watch(self):
        signalled_at = None
        while not self._stop.is_set():
            if self._signalled(1.0) and signalled_at is None:
                signalled_at = time.monotonic()
            if self.stall_seconds <= 0:
                continue  # the watchdog is off
            self._serve()
            now = time.monotonic()
            extra = self.first_beat_extra_seconds if self.beats == 0 else 0.0
            limit = self.stall_seconds * (3 if self.beats == 0 else 1) + extra
            if (signalled_at is not None and not self.stop_handled
                    and now - max(signalled_at, self.last_beat) > self.grace_seconds + extra):
                self._abort(f"a stop signal came {now - signalled_at:.0f} s ago and training has not "
                            f"moved since (last: {self._last()})",
                            f"{self.grace_seconds:.0f} s after a stop signal is the limit")
            elif now - self.last_beat > limit:
                self._abort(f"no training progress for {now - self.last_beat:.0f} s (last: {self._last()})")

    def _where(self) -> tuple:
        return self.tracker.current, main_thread_location()

    def _here(self) -> str:
        collective, where = self._where()
        return f"this rank: {'waiting in ' + collective if collective else 'not in a collective'}, at {where}"

    def _channel_failed(self, exc: Exception) -> str:
        """The watchdogs' messages failed (an MPI error): from now on each rank speaks for itself."""
        self.channel = None
        return f"the watchdogs' messages failed ({type(exc).__name__}: {exc})"

    def _serve(self) -> None:
        """The other watchdogs' messages: on rank 0, a rank's word that it saw a stall ends
        the job; elsewhere, rank 0's question gets where this rank is."""
        if self.channel is None:
            return
        from mpi4py import MPI
        status = MPI.Status()
        stalled = None
        try:
            if self.rank == 0:
                if self.channel.Iprobe(source=MPI.ANY_SOURCE, tag=_STALLED_TAG, status=status):
                    stalled = (status.Get_source(), self.channel.recv(source=status.Get_source(), tag=_STALLED_TAG))
            elif self.channel.Iprobe(source=0, tag=_ASK_TAG):
                self.channel.recv(source=0, tag=_ASK_TAG)
                self.channel.send(self._where(), dest=0, tag=_REPORT_TAG)
        except Exception as exc:
            print(f"warning: rank {self.rank}: {self._channel_failed(exc)}", file=sys.stderr, flush=True)
        if stalled is not None:
            self._abort(f"rank {stalled[0]} reports {stalled[1]}")

    def _gather_where(self) -> dict:
        """Every rank's answer to where it is (on rank 0), within REPORT_WAIT_SECONDS."""
        from mpi4py import MPI
        for rank in range(1, self.size):  # never waited for: a stopped rank never receives
            self._sends.append(self.channel.isend(None, dest=rank, tag=_ASK_TAG))
        reports = {0: self._where()}
        status = MPI.Status()
        deadline = time.monotonic() + REPORT_WAIT_SECONDS
        while len(reports) < self.size and time.monotonic() < deadline and not self._stop.is_set():
            if self.channel.Iprobe(source=MPI.ANY_SOURCE, tag=_REPORT_TAG, status=status):
                reports[status.Get_source()] = self.channel.recv(source=status.Get_source(), tag=_REPORT_TAG)
            else:
                time.sleep(0.05)
        return reports

    def _rank0_did_not_end_the_job(self, why: str) -> bool:
        """Tell rank 0's watchdog of the stall, answer its question, and wait for it to end
        the job; True if it has not after REPORT_WAIT_SECONDS + RANK0_GRACE_SECONDS."""
        self._sends.append(self.channel.isend(why, dest=0, tag=_STALLED_TAG))
        deadline = time.monotonic() + REPORT_WAIT_SECONDS + RANK0_GRACE_SECONDS
        while time.monotonic() < deadline and not self._stop.wait(0.2):
            self._serve()
        return time.monotonic() >= deadline

    def _abort(self, why: str, limit: str = "--stall-timeout sets the limit") -> None:
        if self._stop.is_set():
            return
        seen = time.monotonic()
        ending = f"ending the job ({limit})"
        message = None
        try:
            if self.channel is not None and self.rank == 0:
                lines = describe_stall(self._gather_where(), self.size)
                message = "\n".join([f"rank 0: {why}: {ending}. Where each rank is:", *lines])
            elif self.channel is not None:  # rank 0 reports for all; this rank ends the job if it does not
                if not self._rank0_did_not_end_the_job(why):
                    return  # closed: the run went on to its end
                message = (f"rank {self.rank}: {why} ({self._here()}); rank 0 did not end the job in the "
                           f"{time.monotonic() - seen:.0f} s since it was told, so it is likely the one hung; "
                           f"{ending}")
        except Exception as exc:
            why = f"{why}; {self._channel_failed(exc)}"
        if self._stop.is_set():
            return  # closed while the ranks were asked: the run went on to its end
        if message is None:  # each rank can say only where it is itself
            collective = self.tracker.current if self.tracker is not None else None
            here = f" ({self._here()})" if self.tracker is not None else ""
            blame = "another rank is hung or gone; " if collective or self.tracker is None else ""
            message = f"rank {self.rank}: {why}{here}: {blame}{ending}"
        abort_job(2, message)
        self._stop.set()  # not under MPI with other ranks: nothing to end


# MPICH/Intel MPI (hydra), Open MPI, MVAPICH, Cray PMI, then srun: under mpiexec inside a
# batch job every rank inherits the batch step's SLURM_LOCALID=0, so it comes last (the
# same order as mpi_launch/rank_env.sh)
LOCAL_RANK_VARIABLES = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK", "SLURM_LOCALID")


def local_rank() -> int:
    """Rank within the node (GPU selection), from the launcher's environment."""
    for key in LOCAL_RANK_VARIABLES:
        value = os.environ.get(key, "")
        if value:
            if not value.isdigit():
                raise RuntimeError(f"{key}={value!r} from the MPI launcher is not a local rank")
            return int(value)
    return 0


def env_block(rank: int, num_envs_per_rank: int) -> np.ndarray:
    """Global ids of the environments a rank owns."""
    return np.arange(rank * num_envs_per_rank, (rank + 1) * num_envs_per_rank)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele, Lea, Flood, OOPSLA 2014), vectorised over uint64."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def counter_uniforms(seed: int, env_ids: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1) that depend only on (seed, global env id, per-env counter).

    Action sampling uses these so an environment draws the same numbers whichever rank
    owns it and however the batch is split.
    """
    with np.errstate(over="ignore"):
        key = _splitmix64(np.uint64(seed) ^ (np.asarray(env_ids, np.uint64) * _GOLDEN))
        bits = _splitmix64(key + np.asarray(counters, np.uint64))
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
