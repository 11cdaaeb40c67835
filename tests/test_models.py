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
