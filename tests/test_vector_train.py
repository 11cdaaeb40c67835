"""The training loop on hybridsim's own engine (backend cpu), sync and async, with a resume."""
import pytest

pytest.importorskip("torch")

from hybridsim.train import TrainConfig, Trainer  # noqa: E402


@pytest.mark.parametrize("schedule", ["impala"])  # async engine + set_state; a2c is the sync path
def test_train_on_the_cpu_engine_and_resume(tmp_path, schedule):
    base = dict(game="pong", backend="cpu", num_envs=4, num_minibatches=2, total_frames=800,
                log_dir=str(tmp_path), num_threads=1, torch_threads=1, log_every=0.0,
                checkpoint_every=400, noop_max=5, schedule=schedule, env_batch_size=2, learner_batch=2)
    summary = Trainer(TrainConfig(**base)).train()
    assert summary["frames"] >= 800 and summary["updates"] > 0
    resumed = Trainer(TrainConfig(**dict(base, total_frames=1600, resume=True))).train()
    assert resumed["frames"] >= 1600
