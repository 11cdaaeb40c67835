"""Trainer.learn against a loss written out by hand on the slow NumPy V-trace.

The training tests compare runs with each other, which a wrong sign or a discount that
ignores episode ends passes on both sides. Here one update on a fixed batch must give the
gradients of the IMPALA loss (Espeholt et al. 2018, sec. 4): policy gradient with the
V-trace advantages, half the squared error to v_s, minus the entropy bonus, where the
discount is gamma except 0 after an episode end and rewards are clipped to [-1, 1]. A
recurrent network's outputs in the reference come from the actor's one-step-at-a-time
path, so the learner's unroll must feed each step the right memory, action and reward.
"""
import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from test_vtrace import slow_vtrace  # noqa: E402

from hybridsim.train import TrainConfig, Trainer  # noqa: E402

T, B = 5, 4


def _batch(rng, obs_shape, num_actions):
    return dict(
        obs=rng.integers(0, 256, (T + 1, B, *obs_shape), dtype=np.uint8),
        actions=rng.integers(0, num_actions, (T, B)).astype(np.int64),
        behavior_logits=rng.normal(0, 1, (T, B, num_actions)).astype(np.float32),
        rewards=rng.choice([0.0, 1.0, -1.0, 7.0, -30.0, 0.5], size=(T, B)).astype(np.float32),
        dones=(rng.random((T, B)) < 0.3).astype(np.uint8),
    )


def _stepwise_outputs(model, batch, memory):
    """A recurrent network's logits and values as an actor computes them, one step at a
    time from the trajectory's first memory, the memory advanced by each step's action,
    reward and episode end."""
    from hybridsim.models import note_step
    memory = memory.clone()
    logits, values = [], []
    for t in range(T + 1):
        step_logits, step_values, state = model.unroll(torch.from_numpy(batch["obs"][t:t + 1]), memory)
        logits.append(step_logits[0])
        values.append(step_values[0])
        memory = memory.clone()
        memory[:, :state.shape[1]] = state
        if t < T:
            note_step(memory, slice(None), batch["actions"][t], batch["rewards"][t], batch["dones"][t])
    return torch.stack(logits), torch.stack(values)


def _reference_loss(model, cfg, batch, memory=None):
    """The loss, term by term, with v_s and the advantages from slow_vtrace (float64)."""
    obs = torch.from_numpy(batch["obs"])
    if memory is None:
        logits, values = model(obs.reshape(-1, *obs.shape[2:]))
        logits = logits.reshape(T + 1, B, -1)[:T]
        values = values.reshape(T + 1, B)
    else:
        logits, values = _stepwise_outputs(model, batch, memory)
        logits = logits[:T]
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    actions = torch.from_numpy(batch["actions"])
    taken = log_probs.gather(-1, actions[..., None])[..., 0]
    behavior = torch.log_softmax(torch.from_numpy(batch["behavior_logits"]).double(), dim=-1)
    log_rhos = (taken - behavior.gather(-1, actions[..., None])[..., 0]).detach().numpy()
    rewards = batch["rewards"].astype(np.float64)
    if cfg.reward_clip:
        rewards = np.clip(rewards, -1.0, 1.0)
    if batch.get("truncation_values") is not None:  # a time-limit cut's return goes on
        rewards = rewards + cfg.gamma * batch["truncation_values"]
    discounts = np.where(batch["dones"] == 1, 0.0, cfg.gamma)
    v = values.double().detach().numpy()
    vs, advantages = slow_vtrace(log_rhos, discounts, rewards, v[:T], v[T], cfg.clip_rho,
                                 cfg.clip_pg_rho, cfg.vtrace_lambda)
    policy = -(taken * torch.from_numpy(advantages)).mean()
    baseline = 0.5 * ((torch.from_numpy(vs) - values[:T].double()) ** 2).mean()
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    loss = policy + cfg.value_coef * baseline - cfg.entropy_coef * entropy
    return loss, {"losses/policy": policy.item(), "losses/baseline": baseline.item(),
                  "losses/entropy": entropy.item()}


@pytest.mark.parametrize("overrides", [
    dict(),
    dict(reward_clip=False, gamma=0.9, clip_rho=2.0, clip_pg_rho=0.5, vtrace_lambda=0.8,
         entropy_coef=0.1, value_coef=1.0),
    dict(use_lstm=True),
    dict(use_lstm=True, model="impala", reward_clip=False),
    dict(bootstrap_truncation=True),
    dict(bootstrap_truncation=True, use_lstm=True, reward_clip=False),
])
def test_one_update_has_the_gradients_of_the_impala_loss(tmp_path, overrides):
    cfg = TrainConfig(game="pong", backend="cpu", num_envs=B, num_minibatches=1, num_threads=1,
                      torch_threads=1, log_dir=str(tmp_path), log_trajectories=False,
                      max_grad_norm=math.inf, **overrides)
    trainer = Trainer(cfg)
    try:
        torch.manual_seed(3)  # a network whose outputs are not all alike
        with torch.no_grad():
            for p in trainer.model.parameters():
                p.normal_(0, 0.05)
        before = copy.deepcopy(trainer.model)
        batch = _batch(np.random.default_rng(7), trainer.obs_shape, trainer.num_actions)
        assert batch["dones"].any() and (np.abs(batch["rewards"]) > 1).any()
        if cfg.bootstrap_truncation:  # some episode ends were time-limit cuts
            cuts = batch["dones"].astype(bool) & (np.random.default_rng(9).random((T, B)) < 0.7)
            assert cuts.any()
            batch["truncation_values"] = np.where(cuts, np.random.default_rng(10).normal(0, 3, (T, B)),
                                                  0).astype(np.float32)
        memory = None
        if cfg.use_lstm:  # a memory in mid-episode for some trajectories, at a start for others
            memory = trainer.model.initial_memory(B)
            memory[:2] = torch.from_numpy(np.random.default_rng(8).normal(0, 0.5, (2, memory.shape[1])))
            memory[:2, -3:] = torch.tensor([[1.0, 3.0, 0.0], [2.0, -1.0, 0.0]])
        trainer.learn(**batch, memory=memory)
        loss, terms = _reference_loss(before, cfg, batch, memory)
        loss.backward()
        for (name, got), want in zip(trainer.model.named_parameters(), before.parameters()):
            scale = float(want.grad.abs().max()) + 1e-12
            np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-3,
                                       atol=1e-4 * scale, err_msg=name)
        for key, value in terms.items():
            assert trainer.last_losses[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    finally:
        trainer.close()


def test_gradients_are_clipped_to_max_grad_norm(tmp_path):
    cfg = TrainConfig(game="pong", backend="cpu", num_envs=B, num_minibatches=1, num_threads=1,
                      torch_threads=1, log_dir=str(tmp_path), log_trajectories=False,
                      max_grad_norm=1e-3)
    trainer = Trainer(cfg)
    try:
        batch = _batch(np.random.default_rng(8), trainer.obs_shape, trainer.num_actions)
        trainer.learn(**batch)
        norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in trainer.model.parameters()))
        assert trainer.last_losses["losses/grad_norm"] > 1e-3  # the norm before clipping
        assert norm == pytest.approx(1e-3, rel=1e-3)
    finally:
        trainer.close()
