"""hybridsim.optim.RMSpropTF against a plain NumPy loop of TensorFlow 1's RMSProp update."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hybridsim.optim import RMSpropTF  # noqa: E402


def numpy_rmsprop_tf(param, grads, lr, alpha, eps):
    param = param.astype(np.float64).copy()
    mean_square = np.ones_like(param)  # TF's slot starts at 1
    for g in grads:
        mean_square = alpha * mean_square + (1 - alpha) * g * g
        param = param - lr * g / np.sqrt(mean_square + eps)
    return param


def test_matches_the_tensorflow_update_rule():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 4)).astype(np.float32)
    grads = [rng.normal(scale=s, size=(3, 4)).astype(np.float32) for s in (1e-4, 1.0, 3.0, 1e-2, 0.5)]
    p = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = RMSpropTF([p], lr=0.01, alpha=0.9, eps=1e-3)
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    expect = numpy_rmsprop_tf(start, grads, 0.01, 0.9, 1e-3)
    np.testing.assert_allclose(p.detach().numpy(), expect, rtol=1e-5, atol=1e-7)


def test_small_gradients_move_little_at_first_unlike_torch_rmsprop():
    # the reason it exists: torch's RMSprop turns a tiny consistent gradient into ~10 x lr
    for cls, bound in ((RMSpropTF, 2e-6), (torch.optim.RMSprop, None)):
        p = torch.nn.Parameter(torch.zeros(100))
        opt = cls([p], lr=1e-3, alpha=0.99, eps=1e-5)
        for _ in range(10):
            p.grad = torch.full((100,), 1e-4)
            opt.step()
        moved = p.detach().abs().max().item()
        if bound is not None:
            assert moved < bound
        else:
            assert moved > 1e-2


def test_state_round_trips_through_a_checkpoint():
    p = torch.nn.Parameter(torch.ones(5))
    opt = RMSpropTF([p], lr=0.1)
    p.grad = torch.arange(5.0)
    opt.step()
    q = torch.nn.Parameter(p.detach().clone())
    restored = RMSpropTF([q], lr=0.1)
    restored.load_state_dict(copy.deepcopy(opt.state_dict()))  # as torch.save/load would
    for o, param in ((opt, p), (restored, q)):
        param.grad = torch.full((5,), 0.5)
        o.step()
    assert torch.equal(p, q)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="alpha"):
        RMSpropTF([torch.nn.Parameter(torch.zeros(1))], alpha=1.5)
