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
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import torch


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


class MPIComm:
    """Collectives over an mpi4py communicator."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._host_buffer = None

    def broadcast_parameters(self, model):
        with torch.no_grad():
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
        self.comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        buffer /= self.size
        averaged = self._host_buffer.to(flat.device, non_blocking=False)
        offset = 0
        for p, g in zip(model.parameters(), grads):
            n = g.numel()
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(averaged[offset:offset + n].view_as(p.grad))
            offset += n

    def allreduce_sum(self, value):
        from mpi4py import MPI
        return self.comm.allreduce(value, op=MPI.SUM)

    def bcast(self, value):
        return self.comm.bcast(value, root=0)

    def gather(self, value):
        return self.comm.gather(value, root=0)

    def parameters_in_sync(self, model) -> bool:
        """True on every rank when all ranks hold bit-identical parameters."""
        digest = 0
        for p in model.parameters():
            digest = zlib.crc32(p.detach().cpu().numpy().tobytes(), digest)
        digests = self.comm.allgather(digest)
        return all(d == digests[0] for d in digests)

    def barrier(self):
        self.comm.Barrier()


def init_comm():
    """MPIComm when running under an MPI launcher with more than one rank, else LocalComm."""
    launched = any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                              "MPI_LOCALRANKID", "SLURM_PROCID"))
    if not launched:
        return LocalComm()
    try:
        from mpi4py import MPI
    except ImportError:
        return LocalComm()
    comm = MPI.COMM_WORLD
    if comm.Get_size() == 1:
        return LocalComm()
    return MPIComm(comm)


def local_rank() -> int:
    """Rank within the node (GPU selection), from the launcher's environment."""
    for key in ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PMI_LOCAL_RANK"):
        if key in os.environ:
            return int(os.environ[key])
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
