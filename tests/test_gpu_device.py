"""backend="gpu" and backend="hybrid" on a real CUDA device (CuPy): bit-exact with the CPU
backend, observations on the device and handed to torch without a copy. Skips (with the
reason) where CuPy or a device is missing; scripts/device_check.sh runs it on the
device machine."""
import numpy as np
import pytest

from hybridsim import AtariVectorEnv
from hybridsim.gpu import cupy_unavailable_reason

REASON = cupy_unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"needs CuPy and a CUDA device: {REASON}")

from test_gpu_emulated import GAMES, _compare, _pair, to_numpy  # noqa: E402

# A step costs the device one environment's frame loop whatever the batch (one thread per
# environment): about 230 ms for breakout at frame skip 4 on the H200 (BENCHMARKS.md, 1K
# environments), so these tests run few steps; scripts/device_check.sh gives them ~2
# minutes. 40 steps of breakout under episodic life see 36 episode ends (32 envs, seed 7).
STEPS_BREAKOUT = 40


@pytest.mark.parametrize("design", ["split", "fused", "split_shared"])
@pytest.mark.parametrize("game,kw", GAMES, ids=[g for g, _ in GAMES])
def test_gpu_equals_cpu(game, kw, design):
    cpu, gpu = _pair(game, 64, "gpu", dict(design=design), emulate=False, repeat_action_probability=0.25,
                     noop_max=30, **kw)
    assert _compare(cpu, gpu, steps=400) >= 2
    assert cpu.get_state() == gpu.get_state()


@pytest.mark.parametrize("design", ["split", "fused"])
def test_gpu_same_step_rgb(design):
    cpu, gpu = _pair("breakout", 32, "gpu", dict(design=design), emulate=False, autoreset_mode="SameStep",
                     episodic_life=True, grayscale=False, maxpool=False, repeat_action_probability=0.25)
    assert _compare(cpu, gpu, steps=STEPS_BREAKOUT) >= 2


def test_gpu_observations_are_torch_on_the_device_zero_copy():
    import torch
    env = AtariVectorEnv("pong", 8, backend="gpu", device=0)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.is_cuda and obs.dtype == torch.uint8
    assert tuple(obs.shape) == (8, 4, 84, 84)
    obs, rew, term, trunc, info = env.step(torch.zeros(8, dtype=torch.int64, device="cuda"))
    assert rew.is_cuda and term.dtype == torch.bool and info["lives"].is_cuda
    # zero-copy: the cupy output buffer and the tensor share memory
    cp_env = AtariVectorEnv("pong", 8, backend="gpu", gpu_options=dict(output="cupy"))
    o, _ = cp_env.reset(seed=0)
    t = __import__("torch").from_dlpack(o)
    assert t.data_ptr() == o.data.ptr


def test_gpu_partial_reset_and_snapshot():
    cpu, gpu = _pair("breakout", 16, "gpu", dict(design="split"), emulate=False, repeat_action_probability=0.25)
    _compare(cpu, gpu, steps=30)
    mask = np.zeros(16, bool)
    mask[::3] = True
    oc, _ = cpu.reset(seed=5, options={"reset_mask": mask})
    og, _ = gpu.reset(seed=5, options={"reset_mask": mask})
    assert np.array_equal(to_numpy(oc), to_numpy(og))
    sc, sg = cpu.get_state(), gpu.get_state()
    cpu.set_state(sg)  # the GPU's snapshot is the CPU's format
    gpu.set_state(sc)
    a = np.random.default_rng(0).integers(0, 4, 16)
    assert np.array_equal(to_numpy(cpu.step(a)[0]), to_numpy(gpu.step(a)[0]))


@pytest.mark.parametrize("cpu_envs", [None, 0, 24])
def test_hybrid_equals_cpu(cpu_envs):
    opts = dict(cpu_threads=2, calibrate_steps=2) if cpu_envs is None else dict(cpu_envs=cpu_envs)
    cpu, hyb = _pair("ms_pacman", 48, "hybrid", opts, emulate=False, repeat_action_probability=0.25,
                     life_loss_info=True, max_num_frames_per_episode=240)
    s = hyb._engine.split
    assert s["cpu_envs"] + s["gpu_envs"] == 48
    assert _compare(cpu, hyb, steps=80) >= 2  # every environment's episode is cut at step 60


def test_hybrid_same_step_final_obs():
    """final_obs rows of CPU-part environments that did not end are zeros, as on the CPU."""
    cpu, hyb = _pair("breakout", 32, "hybrid", dict(cpu_envs=16), emulate=False, autoreset_mode="SameStep",
                     episodic_life=True, repeat_action_probability=0.25)
    assert _compare(cpu, hyb, steps=STEPS_BREAKOUT) >= 2


def test_cuda_learner_update_repeats_bit_for_bit(tmp_path):
    """With --cuda-deterministic (the default) two updates from the same state on the same
    batch give the same weights: cuDNN's timed algorithm choice and atomic adds would not."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    import copy

    from test_learner import B, _batch

    from hybridsim.train import TrainConfig, Trainer
    cfg = TrainConfig(game="pong", backend="cpu", num_envs=B, num_minibatches=1, num_threads=1,
                      log_dir=str(tmp_path), log_trajectories=False, device="cuda")
    trainer = Trainer(cfg)
    try:
        start = copy.deepcopy((trainer.model.state_dict(), trainer.optimizer.state_dict()))
        batch = _batch(np.random.default_rng(5), trainer.obs_shape, trainer.num_actions)
        results = []
        for _ in range(2):
            trainer.model.load_state_dict(start[0])
            trainer.optimizer.load_state_dict(start[1])
            for _ in range(3):
                trainer.learn(**batch)
            results.append({k: v.cpu().clone() for k, v in trainer.model.state_dict().items()})
        for name, tensor in results[0].items():
            assert torch.equal(tensor, results[1][name]), name
    finally:
        trainer.close()
