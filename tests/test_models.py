import pytest

torch = pytest.importorskip("torch")
from hybridsim.models import build_model  # noqa: E402


@pytest.mark.parametrize("name", ["nature", "impala"])
def test_models_take_uint8_stacks_and_learn(name):
    torch.manual_seed(0)
    model = build_model(name, (4, 84, 84), num_actions=6)
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    logits, value = model(obs)
    assert logits.shape == (5, 6) and value.shape == (5,)
    # one optimisation step moves the value towards a target: gradients reach every layer
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss = ((value - 1.0) ** 2).mean() - logits.log_softmax(-1)[:, 0].mean()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    before = loss.item()
    opt.step()
    logits2, value2 = model(obs)
    after = (((value2 - 1.0) ** 2).mean() - logits2.log_softmax(-1)[:, 0].mean()).item()
    assert after < before


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model 'lstm'"):
        build_model("lstm", (4, 84, 84), 6)


def test_running_observation_norm_matches_a_brute_force_mean_and_variance():
    """After several batches the statistics equal those of all frames seen at once, with
    Baselines' prior (mean 0, variance 1, weight 1e-4) as a pseudo-sample; the output is
    (x - mean) / sqrt(var + 1e-8) clipped to [-10, 10]."""
    import numpy as np
    from hybridsim.models import RunningObservationNorm
    rng = np.random.default_rng(0)
    shape = (2, 5, 4)
    norm = RunningObservationNorm(shape)
    seen = []
    for n in (3, 1, 7, 2):
        batch = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        batch[:, 0, 0, 0] = 87  # a constant pixel: tiny variance, output clipped or zero
        seen.append(batch)
        norm.update(RunningObservationNorm.moments(torch.from_numpy(batch)))
    x = np.concatenate(seen).astype(np.float64)
    prior = 1e-4
    total = prior + len(x)
    mean = x.sum(0) / total
    var = (prior * (1.0 + mean ** 2) + ((x - mean) ** 2).sum(0)) / total
    np.testing.assert_allclose(norm.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), var, rtol=1e-9, atol=1e-12)
    assert float(norm.count) == total
    probe = rng.integers(0, 256, (4, *shape), dtype=np.uint8)
    want = np.clip((probe - mean) / np.sqrt(var + 1e-8), -10, 10)
    got = norm(torch.from_numpy(probe)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got).max() <= 10.0


def test_models_carry_their_input_statistics_in_the_state_dict():
    model = build_model("nature", (4, 84, 84), 6, obs_normalization="running")
    state = model.state_dict()
    assert {"normalize.mean", "normalize.var", "normalize.count"} <= set(state)
    assert "normalize.mean" not in build_model("nature", (4, 84, 84), 6).state_dict()
    with pytest.raises(ValueError, match="obs_normalization must be one of"):
        build_model("nature", (4, 84, 84), 6, obs_normalization="whiten")
