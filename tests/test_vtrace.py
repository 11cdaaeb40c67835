"""V-trace against a deliberately slow NumPy evaluation of the paper's definitions.

The reference sums eq. (1) of Espeholt et al. (2018) term by term, with explicit products
of discounts and truncated traces, instead of the backward recursion the fast path uses.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hybridsim import vtrace  # noqa: E402


def slow_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar, lam):
    T, B = log_rhos.shape
    rhos = np.exp(log_rhos)
    vs = np.zeros((T, B))
    for b in range(B):
        v_ext = np.append(values[:, b], bootstrap[b])
        for s in range(T):
            total = values[s, b]
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):  # prod over i of gamma_i * c_i
                    weight *= discounts[i, b] * lam * min(1.0, rhos[i, b])
                rho_t = rhos[t, b] if rho_bar is None else min(rho_bar, rhos[t, b])
                delta = rho_t * (rewards[t, b] + discounts[t, b] * v_ext[t + 1] - v_ext[t])
                total += weight * delta
            vs[s, b] = total
    vs_next = np.concatenate([vs[1:], bootstrap[None]], axis=0)
    pg_rhos = rhos if pg_rho_bar is None else np.minimum(pg_rho_bar, rhos)
    advantages = pg_rhos * (rewards + discounts * vs_next - values)
    return vs, advantages


def random_batch(rng, T, B):
    return dict(
        log_rhos=rng.normal(0, 1.0, (T, B)),
        discounts=rng.choice([0.0, 0.99, 0.9], size=(T, B), p=[0.1, 0.6, 0.3]),
        rewards=rng.normal(0, 2.0, (T, B)),
        values=rng.normal(0, 1.0, (T, B)),
        bootstrap=rng.normal(0, 1.0, (B,)),
    )


CASES = [
    # T, B, rho_bar, pg_rho_bar, lambda
    (5, 3, 1.0, 1.0, 1.0),
    (7, 2, 2.0, 0.5, 1.0),
    (6, 4, 1.0, 1.0, 0.9),
    (1, 5, 1.0, 1.0, 1.0),
    (8, 1, 0.7, 1.5, 0.5),
    (4, 2, None, None, 1.0),
    (20, 3, 1.0, 1.0, 0.95),
]


@pytest.mark.parametrize("T,B,rho_bar,pg_rho_bar,lam", CASES)
def test_from_importance_weights_matches_slow_reference(T, B, rho_bar, pg_rho_bar, lam):
    rng = np.random.default_rng(T * 100 + B)
    d = random_batch(rng, T, B)
    want_vs, want_adv = slow_vtrace(d["log_rhos"], d["discounts"], d["rewards"], d["values"],
                                    d["bootstrap"], rho_bar, pg_rho_bar, lam)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}
    got = vtrace.from_importance_weights(t["log_rhos"], t["discounts"], t["rewards"], t["values"],
                                         t["bootstrap"], clip_rho_threshold=rho_bar,
                                         clip_pg_rho_threshold=pg_rho_bar, lambda_=lam)
    np.testing.assert_allclose(got.vs.numpy(), want_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want_adv, rtol=1e-10, atol=1e-10)


def test_on_policy_vtrace_is_the_n_step_return():
    """With pi = mu and no clipping active, v_s is the discounted n-step bootstrapped return."""
    rng = np.random.default_rng(1)
    T, B = 6, 2
    d = random_batch(rng, T, B)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}
    got = vtrace.from_importance_weights(torch.zeros(T, B, dtype=torch.float64), t["discounts"],
                                         t["rewards"], t["values"], t["bootstrap"])
    ret = d["bootstrap"].copy()
    expected = np.zeros((T, B))
    for s in range(T - 1, -1, -1):
        ret = d["rewards"][s] + d["discounts"][s] * ret
        expected[s] = ret
    np.testing.assert_allclose(got.vs.numpy(), expected, rtol=1e-10)


def test_from_logits_matches_importance_weights_and_keeps_policy_gradient():
    rng = np.random.default_rng(2)
    T, B, A = 5, 3, 4
    d = random_batch(rng, T, B)
    behavior = torch.tensor(rng.normal(size=(T, B, A)))
    target = torch.tensor(rng.normal(size=(T, B, A)), requires_grad=True)
    actions = torch.tensor(rng.integers(0, A, size=(T, B)))
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}
    out = vtrace.from_logits(behavior, target, actions, t["discounts"], t["rewards"],
                             t["values"], t["bootstrap"], clip_rho_threshold=1.5, lambda_=0.9)
    log_pi = torch.log_softmax(target.detach(), -1).gather(-1, actions[..., None])[..., 0]
    log_mu = torch.log_softmax(behavior, -1).gather(-1, actions[..., None])[..., 0]
    np.testing.assert_allclose(out.log_rhos.numpy(), (log_pi - log_mu).numpy(), rtol=1e-12)
    want_vs, want_adv = slow_vtrace((log_pi - log_mu).numpy(), d["discounts"], d["rewards"],
                                    d["values"], d["bootstrap"], 1.5, 1.0, 0.9)
    np.testing.assert_allclose(out.vs.numpy(), want_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), want_adv, rtol=1e-10, atol=1e-10)
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad
    assert out.target_action_log_probs.requires_grad
    (out.target_action_log_probs * out.pg_advantages).sum().backward()
    assert target.grad is not None and torch.count_nonzero(target.grad) > 0


def test_shape_errors_name_the_problem():
    z = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="bootstrap_value must be"):
        vtrace.from_importance_weights(z, z, z, z, torch.zeros(3))
    with pytest.raises(ValueError, match="rewards must have shape"):
        vtrace.from_importance_weights(z, z, torch.zeros(4, 3), z, torch.zeros(2))
    with pytest.raises(ValueError, match="actions must be"):
        vtrace.from_logits(torch.zeros(4, 2, 3), torch.zeros(4, 2, 3), torch.zeros(4, 3), z, z, z,
                           torch.zeros(2))
