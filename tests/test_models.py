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


def _slow_lstm_core(cell, features, memory, actions, rewards, firsts, num_actions):
    """IMPALA's core written out per environment and step in float64: LSTM gates (PyTorch's
    order i, f, g, o) on [features, one-hot previous action, clipped previous reward], the
    state and those two inputs zero at an episode's first step."""
    import numpy as np
    w_ih, w_hh = cell.weight_ih.detach().double().numpy(), cell.weight_hh.detach().double().numpy()
    bias = (cell.bias_ih + cell.bias_hh).detach().double().numpy()
    H = cell.hidden_size
    S, B = features.shape[:2]
    sigmoid = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
    out = np.zeros((S, B, H))
    final = np.zeros((B, 2 * H))
    for b in range(B):
        h, c = memory[b, :H].astype(np.float64), memory[b, H:2 * H].astype(np.float64)
        prev_action, prev_reward, first = memory[b, 2 * H], memory[b, 2 * H + 1], memory[b, 2 * H + 2]
        for t in range(S):
            if t > 0:
                prev_action, prev_reward, first = actions[t - 1, b], rewards[t - 1, b], firsts[t - 1, b]
            one_hot = np.zeros(num_actions)
            if not first:
                one_hot[int(prev_action)] = 1.0
            reward = 0.0 if first else min(1.0, max(-1.0, float(prev_reward)))
            if first:
                h, c = np.zeros(H), np.zeros(H)
            x = np.concatenate([features[t, b].astype(np.float64), one_hot, [reward]])
            gates = w_ih @ x + w_hh @ h + bias
            i, f, g, o = sigmoid(gates[:H]), sigmoid(gates[H:2 * H]), np.tanh(gates[2 * H:3 * H]), sigmoid(gates[3 * H:])
            c = f * c + i * g
            h = o * np.tanh(c)
            out[t, b] = h
        final[b] = np.concatenate([h, c])
    return out, final


def test_the_recurrent_core_matches_a_slow_lstm_with_episode_resets():
    import numpy as np
    from hybridsim.models import RecurrentCore
    torch.manual_seed(1)
    S, B, F, A, H = 6, 3, 5, 4, 7
    core = RecurrentCore(F, A, H)
    rng = np.random.default_rng(2)
    features = rng.normal(0, 1, (S, B, F)).astype(np.float32)
    memory = rng.normal(0, 1, (B, core.memory_size)).astype(np.float32)
    memory[:, 2 * H] = [2, 0, 3]  # previous actions
    memory[:, 2 * H + 1] = [5.0, -0.25, 0.0]  # previous rewards (5 is clipped to 1)
    memory[:, 2 * H + 2] = [0, 1, 0]  # environment 1 starts an episode
    actions = rng.integers(0, A, (S - 1, B))
    rewards = rng.choice([0.0, 1.0, -3.0, 0.5], (S - 1, B)).astype(np.float32)
    firsts = np.zeros((S - 1, B), np.float32)
    firsts[1, 0] = firsts[3, 2] = firsts[0, 1] = 1.0
    out, state = core(torch.from_numpy(features), torch.from_numpy(memory), torch.from_numpy(actions),
                      torch.from_numpy(rewards), torch.from_numpy(firsts))
    want_out, want_state = _slow_lstm_core(core.cell, features, memory, actions, rewards, firsts, A)
    np.testing.assert_allclose(out.detach().numpy(), want_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.detach().numpy(), want_state, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["nature", "impala"])
def test_an_unrolled_trajectory_equals_the_steps_an_actor_takes_one_at_a_time(name):
    """What the learner computes (one unroll over the trajectory from its first memory)
    equals what the actor computed step by step, its memory advanced by note_step."""
    import numpy as np
    from hybridsim.models import note_step
    torch.manual_seed(0)
    model = build_model(name, (4, 84, 84), 6, use_lstm=True)
    S, B = 5, 3
    rng = np.random.default_rng(4)
    obs = torch.from_numpy(rng.integers(0, 256, (S, B, 4, 84, 84), dtype=np.uint8))
    actions = rng.integers(0, 6, (S - 1, B))
    rewards = rng.choice([0.0, 2.0, -1.0], (S - 1, B)).astype(np.float32)
    dones = np.zeros((S - 1, B), bool)
    dones[2, 1] = dones[0, 2] = True
    memory = model.initial_memory(B)
    start = memory.clone()
    stepwise = []
    with torch.no_grad():
        for t in range(S):
            logits, values, state = model.unroll(obs[t:t + 1], memory)
            stepwise.append((logits[0], values[0]))
            memory[:, :state.shape[1]] = state
            if t < S - 1:
                note_step(memory, slice(None), actions[t], rewards[t], dones[t])
        logits, values, state = model.unroll(obs, start, torch.from_numpy(actions),
                                             torch.from_numpy(rewards), torch.from_numpy(dones))
    for t, (step_logits, step_values) in enumerate(stepwise):
        torch.testing.assert_close(logits[t], step_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values[t], step_values, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state, memory[:, :state.shape[1]], rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="call unroll"):
        model(obs[0])


def test_the_recurrent_option_adds_a_core_of_the_trunks_width():
    """Without use_lstm the network has no core (its checkpoints load as before)."""
    plain = build_model("nature", (4, 84, 84), 6)
    assert plain.memory_size == 0 and plain.initial_memory(2) is None
    assert not any(k.startswith("core.") for k in plain.state_dict())
    for name, width in (("nature", 512), ("impala", 256)):
        recurrent = build_model(name, (4, 84, 84), 6, use_lstm=True)
        assert recurrent.memory_size == 2 * 256 + 3
        assert recurrent.core.cell.input_size == width + 6 + 1
        assert recurrent.policy.in_features == recurrent.core.cell.hidden_size == 256
        assert set(recurrent.state_dict()) - set(build_model(name, (4, 84, 84), 6).state_dict()) == {
            "core.cell.weight_ih", "core.cell.weight_hh", "core.cell.bias_ih", "core.cell.bias_hh"}
        first = recurrent.initial_memory(3)
        assert first.shape == (3, 2 * 256 + 3) and (first[:, -1] == 1).all() and (first[:, :-1] == 0).all()


def test_the_resnet_runs_channels_last_on_a_cpu_with_the_nchw_values():
    """to_device keeps the IMPALA ResNet's CPU convolutions channels-last (faster there):
    logits, values and every gradient equal those of the same network in NCHW, and the
    paths that flatten weights and gradients (checkpoint digest, MPI broadcast and
    all-reduce) see the same values in either layout."""
    import copy
    from hybridsim.models import to_device
    torch.manual_seed(0)
    nchw = build_model("impala", (4, 84, 84), num_actions=6, use_lstm=True)
    fast = to_device(copy.deepcopy(nchw), "cpu")
    convs = [m.weight for m in fast.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
                         for w in convs)
    assert all(m.weight.is_contiguous() for m in to_device(build_model("nature", (4, 84, 84), 6), "cpu")
               .modules() if isinstance(m, torch.nn.Conv2d))  # no faster that way: left NCHW
    obs = torch.randint(0, 256, (3, 5, 4, 84, 84), dtype=torch.uint8)
    outputs = []
    for model in (nchw, fast):
        logits, values, state = model.unroll(obs, model.initial_memory(5), torch.ones(2, 5),
                                             torch.ones(2, 5), torch.zeros(2, 5))
        (logits.logsumexp(-1).sum() + values.sum() + state.sum()).backward()
        outputs.append([logits, values, state, *(p.grad for p in model.parameters())])
    for reference, got in zip(*outputs):
        torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-5)
    from hybridsim.train import checkpoint_digest
    assert checkpoint_digest({"model": fast.state_dict()}) == checkpoint_digest(
        {"model": {k: v.contiguous() for k, v in fast.state_dict().items()}})
    MPI = pytest.importorskip("mpi4py.MPI")
    from hybridsim import dist
    comm = dist.MPIComm(MPI.COMM_SELF)
    before = [(p.detach().clone(), p.grad.clone()) for p in fast.parameters()]
    comm.broadcast_parameters(fast)
    comm.allreduce_gradients(fast)
    for p, (value, grad) in zip(fast.parameters(), before):
        assert torch.equal(p, value) and torch.equal(p.grad, grad)


@pytest.mark.parametrize("optimizer_name", ["rmsprop_tf", "adam"])
def test_optimizer_state_from_the_other_layout_takes_the_parameters_layout(optimizer_name):
    """An NCHW run's optimizer state resumed into a channels-last ResNet (or the reverse)
    loads with its own strides; match_optimizer_state_layout gives every state tensor its
    parameter's layout with the same values, so the next update equals the other layout's."""
    import copy
    from hybridsim.models import match_optimizer_state_layout, to_device
    from hybridsim.optim import RMSpropTF

    def make(model):
        if optimizer_name == "adam":
            return torch.optim.Adam(model.parameters(), lr=1e-3)
        return RMSpropTF(model.parameters(), lr=1e-3, alpha=0.99, eps=0.01)

    torch.manual_seed(1)
    nchw = build_model("impala", (4, 84, 84), num_actions=6)
    fast = to_device(copy.deepcopy(nchw), "cpu")
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)

    def step(model, optimizer):
        optimizer.zero_grad()
        logits, values = model(obs)[:2]
        (logits.logsumexp(-1).sum() + values.sum()).backward()
        optimizer.step()

    def load_matched(source, model):
        target = make(model)
        target.load_state_dict(copy.deepcopy(source.state_dict()))
        params = [p for group in target.param_groups for p in group["params"]]
        assert any(torch.is_tensor(v) and v.shape == p.shape and v.stride() != p.stride()
                   for p in params for v in target.state[p].values()), "nothing in the other layout"
        before = {p: {k: v.clone() for k, v in target.state[p].items()} for p in params}
        match_optimizer_state_layout(target)
        for p in params:
            for key, value in target.state[p].items():
                assert torch.equal(value, before[p][key])
                assert value.shape != p.shape or value.stride() == p.stride()
        return target

    nchw_optimizer = make(nchw)
    step(nchw, nchw_optimizer)
    fast.load_state_dict(nchw.state_dict())
    fast_optimizer = load_matched(nchw_optimizer, fast)
    load_matched(fast_optimizer, copy.deepcopy(nchw))  # the reverse: channels-last state, NCHW network
    step(fast, fast_optimizer)
    step(nchw, nchw_optimizer)
    for a, b in zip(nchw.parameters(), fast.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
