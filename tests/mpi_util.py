"""Finding the MPI launcher for the tests that start ranks."""
import pathlib
import shutil
import sys
import textwrap

import pytest


def mpiexec_or_skip() -> str:
    """The mpiexec beside this Python (pip's mpich puts it there), else PATH's; skip without one."""
    exe = (shutil.which("mpiexec", path=str(pathlib.Path(sys.executable).parent))
           or shutil.which("mpiexec"))
    if exe is None:
        pytest.skip("no mpiexec (pip install mpi4py mpich)")
    return exe


# A training run whose rank 1 fails at its third update: `python -m mpi4py SCRIPT kill|exception
# LOG_DIR` under a launcher with 2 ranks.
FAULT_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from hybridsim.train import TrainConfig, Trainer
    mode, log_dir = sys.argv[1], sys.argv[2]
    cfg = TrainConfig(game="pong", backend="ale-py", num_envs=2, num_minibatches=1,
                      total_frames=10**7, log_dir=log_dir, num_threads=1, torch_threads=1,
                      log_trajectories=False, log_every=1000.0)
    trainer = Trainer(cfg)
    learn = trainer.learn
    def faulty_learn(*args):
        learn(*args)
        if trainer.rank == 1 and trainer.updates == 3:
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("injected failure on rank 1")
    trainer.learn = faulty_learn
    trainer.train()
""")
