"""The training loop on hybridsim's own engine (backend cpu), sync and async, with a resume."""
import pickle
import shutil
import zlib

import numpy as np
import pytest

pytest.importorskip("torch")

from async_util import ShuffledPool  # noqa: E402
from hybridsim.train import TrainConfig, Trainer  # noqa: E402


@pytest.mark.parametrize("schedule", ["impala"])  # async engine + set_state; a2c is the sync path
def test_train_on_the_cpu_engine_and_resume(tmp_path, schedule, capsys):
    base = dict(game="pong", backend="cpu", num_envs=4, num_minibatches=2, total_frames=800,
                log_dir=str(tmp_path), num_threads=1, torch_threads=1, log_every=0.0,
                checkpoint_every=400, noop_max=5, schedule=schedule, env_batch_size=2, learner_batch=2)
    summary = Trainer(TrainConfig(**base)).train()
    assert summary["frames"] >= 800 and summary["updates"] > 0
    # the saved environments answer in batches of 2; set_state would refuse another batch
    # with a message about "another game, settings or build"
    with pytest.raises(ValueError, match=r"env_batch_size 2 -> 3 \(the saved environments answer in batches of 2\)"):
        Trainer(TrainConfig(**dict(base, total_frames=1600, resume=True, env_batch_size=3))).train()
    # a damaged impala state is refused by name before anything is written
    import pickle
    import torch
    path = tmp_path / "checkpoint.pt"
    intact = torch.load(path, weights_only=False)
    saved = intact["rank_states"][0]["impala_in_flight"]
    pending = pickle.loads(zlib.decompress(saved["trajectories"]))
    pending["traj"][1]["rew"].append(1.0)  # a reward without its action
    for damaged, message in ((dict(saved, trajectories=saved["trajectories"][:-9]), "impala state is damaged"),
                             (dict(saved, trajectories=zlib.compress(pickle.dumps(pending))),
                              "impala state does not fit 4 environments, 6 actions and --num-steps 5"),
                             (dict(saved, logits=saved["logits"][:, :3]), "impala state does not fit")):
        state = dict(intact, rank_states=[dict(intact["rank_states"][0], impala_in_flight=damaged)])
        torch.save(state, path)
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
        with pytest.raises(ValueError, match=message):
            Trainer(TrainConfig(**dict(base, total_frames=1600, resume=True))).train()
        assert before == {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    # a checkpoint from before the impala state was saved: its environments would answer
    # actions nobody remembers, so they restart from their seeds (a restart in the log)
    old = tmp_path / "old"
    old.mkdir()
    for p in tmp_path.iterdir():
        if p.is_file() and not p.name.startswith("."):
            shutil.copy2(p, old / p.name)
    torch.save(dict(intact, rank_states=[{k: v for k, v in intact["rank_states"][0].items()
                                          if k != "impala_in_flight"}]), old / "checkpoint.pt")
    Trainer(TrainConfig(**dict(base, log_dir=str(old), total_frames=1600, resume=True))).train()
    assert "does not hold rank 0's impala actions in flight (an older checkpoint); environments restart" \
        in capsys.readouterr().err
    from hybridsim import trajlog
    with trajlog.open_trajectory_file(trajlog.rank_file(old, 0)) as f:
        assert trajlog.json_list_attr(f, "restarts") == [intact["frames"]]
    torch.save(intact, path)
    resumed = Trainer(TrainConfig(**dict(base, total_frames=1600, resume=True))).train()
    assert resumed["frames"] >= 1600


@pytest.mark.parametrize("schedule,use_lstm,life_loss_terminal,bootstrap_truncation", [
    ("a2c", False, False, False), ("impala", False, False, False), ("a2c", True, False, False),
    ("impala", True, False, False), ("a2c", False, True, False), ("impala", True, True, False),
    ("impala", True, False, True)])
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, schedule, use_lstm, life_loss_terminal,
                                                    bootstrap_truncation):
    """Stopped by a signal mid-run and resumed, the run ends with the same parameters,
    optimizer state and episode records as one that never stopped, also for the episodes
    running at the stop (short truncated episodes cross it). Impala (one worker thread, so
    the batches come in submission order): with the actions in flight at the stop and the
    trajectories in progress or waiting for the learner. A recurrent network: with every
    environment's memory, and each waiting trajectory's memory at its start. With
    --life-loss-terminal (breakout, 5 lives): with each environment's lives at the stop. With
    --bootstrap-truncation: with each waiting step's value of its final observation."""
    import torch
    base = dict(game="breakout" if life_loss_terminal else "pong", life_loss_terminal=life_loss_terminal,
                bootstrap_truncation=bootstrap_truncation,
                backend="cpu", num_envs=4, num_minibatches=2, total_frames=4000,
                num_threads=1, torch_threads=1, log_every=0.0, checkpoint_every=10**9, noop_max=5,
                max_episode_frames=108 if bootstrap_truncation else 600, log_trajectories=False,
                schedule=schedule, use_lstm=use_lstm)
    if schedule == "impala":
        base.update(env_batch_size=2, learner_batch=3)  # leaves trajectories waiting
    whole = Trainer(TrainConfig(**base, log_dir=str(tmp_path / "whole")))
    whole.train()

    first = Trainer(TrainConfig(**base, log_dir=str(tmp_path / "split")))
    name = f"_{schedule}_iteration"
    iteration, calls = getattr(first, name), []

    def stop_midway(state):
        iteration(state)
        calls.append(1)
        if len(calls) == 7:  # a2c: 7 x 4 envs x 5 steps x 4 frames = 560 frames: mid-episode
            first.request_stop()

    setattr(first, name, stop_midway)
    first.train()
    assert first.preempted and 0 < first.frames < base["total_frames"]
    # the environments' state travels compressed; a checkpoint from before the codec field
    # (raw get_state bytes) resumes the same
    state = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
    rank_state = dict(state["rank_states"][0])
    assert rank_state["env_state_codec"] == "zlib"
    raw = zlib.decompress(rank_state["env_state"])
    assert len(raw) > 4 * 150_000 and len(rank_state["env_state"]) < len(raw) / 5
    shutil.copytree(tmp_path / "split", tmp_path / "split_raw")
    del rank_state["env_state_codec"]
    state["rank_states"] = [dict(rank_state, env_state=raw)]
    torch.save(state, tmp_path / "split_raw" / "checkpoint.pt")
    for run in ("split", "split_raw"):
        resumed = Trainer(TrainConfig(**base, log_dir=str(tmp_path / run), resume=True))
        lives_at_start = []
        resumed_iteration = getattr(resumed, f"_{schedule}_iteration")

        def noting_lives(state, iteration=resumed_iteration, trainer=resumed):
            lives_at_start.append(trainer.last_lives.copy())
            iteration(state)
        setattr(resumed, f"_{schedule}_iteration", noting_lives)
        resumed.train()

        assert resumed.frames == whole.frames and resumed.updates == whole.updates
        for name, value in whole.model.state_dict().items():
            assert torch.equal(value, resumed.model.state_dict()[name]), (run, name)
        a, b = whole.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
        for key in a:
            for field in a[key]:
                assert torch.equal(torch.as_tensor(a[key][field]), torch.as_tensor(b[key][field]))
        # each ends after the stop (with bootstrap_truncation, cut at 108 frames so that waiting
        # steps hold values at the stop, before it too)
        assert len(whole.all_episodes) == 4 or bootstrap_truncation and len(whole.all_episodes) > 4 * 4
        assert resumed.all_episodes == whole.all_episodes
        if schedule == "impala":
            assert len(first._loop_state["ready"]) and state["rank_states"][0]["impala_in_flight"]["outstanding"].any()
        if bootstrap_truncation:  # the waiting steps' values of their final observations crossed the stop
            pending = pickle.loads(zlib.decompress(state["rank_states"][0]["impala_in_flight"]["trajectories"]))
            buffers = list(pending["traj"].values()) + list(pending["ready"])
            assert all(len(b["boot"]) == len(b["rew"]) for b in buffers)
            assert any(np.any(np.asarray(b["boot"]) != 0) for b in buffers)
        if life_loss_terminal:  # lives lost before the stop, and the lives at it restored
            saved = state["rank_states"][0]["last_lives"]
            assert np.array_equal(saved, first.last_lives) and (saved < 5).any() and (saved > 0).all()
            assert np.array_equal(lives_at_start[0], saved)
        if use_lstm:  # memories in mid-episode crossed the stop
            saved = state["rank_states"][0]["core_memory"]
            assert saved.shape == (4, 2 * 256 + 3) and (saved[:, -1] == 0).any() and np.abs(saved[:, :256]).max() > 0
            torch.testing.assert_close(resumed.memory, whole.memory, rtol=0, atol=0)
    if life_loss_terminal:  # damaged lives are named (their bytes are in the digest too)
        lives = state["rank_states"][0]["last_lives"]
        for damaged in (lives[:3], lives.astype(np.float32), None, lives + 1):
            edited = dict(state, rank_states=[dict(state["rank_states"][0], last_lives=damaged)])
            if damaged is not None and damaged.shape == lives.shape and damaged.dtype == lives.dtype:
                message = "counters, recurrent memory or lives differ from what was written"
            else:  # a checkpoint without a digest (older ones) is checked field by field
                message = "damaged checkpoint: its last_lives does not load"
                del edited["digest"]
            torch.save(edited, tmp_path / "split" / "checkpoint.pt")
            with pytest.raises(ValueError, match=message):
                Trainer(TrainConfig(**base, log_dir=str(tmp_path / "split"), resume=True)).train()
    else:  # written only where they are used
        assert "last_lives" not in state["rank_states"][0]


class _TensorBatches:
    """A vector env whose batches come as torch tensors, as backend="gpu" hands them to a
    CUDA learner (here on the CPU, so the test runs anywhere)."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions):
        import torch
        obs, reward, terminated, truncated, info = self.env.step(actions)
        info = dict(info, lives=torch.as_tensor(info["lives"]))
        return (torch.as_tensor(obs), torch.as_tensor(reward), torch.as_tensor(terminated),
                torch.as_tensor(truncated), info)


def test_the_a2c_loop_takes_tensor_batches_like_numpy_ones(tmp_path):
    import torch
    base = dict(game="pong", backend="cpu", num_envs=4, num_minibatches=2, total_frames=1200,
                num_threads=1, torch_threads=1, log_every=0.0, noop_max=5,
                max_episode_frames=160, log_observations=True, obs_stride=3)
    plain = Trainer(TrainConfig(**base, log_dir=str(tmp_path / "numpy")))
    plain.train()
    tensors = Trainer(TrainConfig(**base, log_dir=str(tmp_path / "tensor")))
    tensors.env = _TensorBatches(tensors.env)
    tensors.train()
    assert plain.all_episodes == tensors.all_episodes != []
    for name, value in plain.model.state_dict().items():
        assert torch.equal(value, tensors.model.state_dict()[name]), name


def test_impala_repeats_with_any_thread_count_and_completion_order(tmp_path):
    """--impala-order submission (the default): the same seed gives the same weights and
    episodes with one worker thread or two whose steps finish in a shuffled order;
    --impala-order completion follows the shuffle, so the same shuffle changes its run."""
    import torch
    base = dict(game="pong", backend="cpu", num_envs=5, total_frames=1600, torch_threads=1,
                log_every=0.0, checkpoint_every=10**9, noop_max=5, max_episode_frames=300,
                log_trajectories=False, schedule="impala", env_batch_size=2, learner_batch=2)

    def run(name, shuffle_seed=None, **overrides):
        trainer = Trainer(TrainConfig(**dict(base, log_dir=str(tmp_path / name), **overrides)))
        if shuffle_seed is not None:
            ShuffledPool(trainer.env, shuffle_seed)
        trainer.train()
        return trainer.model.state_dict(), trainer.all_episodes

    one_thread = run("one", num_threads=1)
    assert len(one_thread[1]) >= 4
    for seed in (0, 1):
        weights, episodes = run(f"shuffled{seed}", seed, num_threads=2)
        assert episodes == one_thread[1]
        for name, value in one_thread[0].items():
            assert torch.equal(value, weights[name]), (seed, name)
    weights, episodes = run("completion", 0, num_threads=2, impala_order="completion")
    assert episodes != one_thread[1] or any(not torch.equal(v, weights[k]) for k, v in one_thread[0].items())


def _record_vtrace_logits(monkeypatch) -> list:
    """(behavior logits, target logits, discounts) of every V-trace call training makes."""
    from hybridsim import train
    seen, from_logits = [], train.vtrace.from_logits

    def recorded(**kwargs):
        seen.append((kwargs["behavior_policy_logits"].clone(), kwargs["target_policy_logits"].detach().clone(),
                     kwargs["discounts"].clone()))
        return from_logits(**kwargs)
    monkeypatch.setattr(train.vtrace, "from_logits", recorded)
    return seen


@pytest.mark.parametrize("schedule", ["a2c", "impala"])
def test_a_recurrent_learner_recomputes_the_actors_logits(tmp_path, monkeypatch, schedule):
    """Before a network has changed, the learner's unroll of a trajectory gives the logits
    the actor sampled from (importance weights of 1), across the episode ends inside it
    (short episodes): each step sees the memory, previous action and reward it had when
    acting. a2c with one minibatch learns from data of its current network at every
    update; impala at its first."""
    import torch
    seen = _record_vtrace_logits(monkeypatch)
    cfg = TrainConfig(game="pong", backend="cpu", num_envs=4, num_steps=30, total_frames=2400,
                      num_threads=1, torch_threads=1, log_every=0.0, noop_max=5, max_episode_frames=96,
                      log_trajectories=False, schedule=schedule, use_lstm=True,
                      log_dir=str(tmp_path / "run"), **({"env_batch_size": 2, "learner_batch": 4}
                                                        if schedule == "impala" else {}))
    Trainer(cfg).train()
    checked = seen if schedule == "a2c" else seen[:1]
    assert any((d == 0).any() for _, _, d in checked)  # episodes ended inside the trajectories
    for behavior, target, _ in checked:
        torch.testing.assert_close(target, behavior, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(seen[-1][0], seen[0][0])  # the policy did change


def test_impala_trajectories_start_from_the_memory_the_actor_had(tmp_path, monkeypatch):
    """Under impala only the first update learns from data of its current network, and its
    trajectories all start at episode starts (zero memory): a wrong recorded memory would
    pass the test above. With the network frozen (a random one whose outputs depend on the
    memory), every update's unroll must give the actor's logits, also for trajectories
    that start in mid-episode."""
    import torch
    seen = _record_vtrace_logits(monkeypatch)
    cfg = TrainConfig(game="pong", backend="cpu", num_envs=4, num_steps=20, total_frames=3200,
                      num_threads=1, torch_threads=1, log_every=0.0, noop_max=5, max_episode_frames=96,
                      log_trajectories=False, schedule="impala", use_lstm=True, env_batch_size=2,
                      learner_batch=2, log_dir=str(tmp_path / "run"))
    trainer = Trainer(cfg)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.normal_(0, 0.05)
    trainer.optimizer.step = lambda *args, **kwargs: None
    trainer.train()
    assert len(seen) >= 8
    for behavior, target, _ in seen:
        torch.testing.assert_close(target, behavior, rtol=1e-4, atol=1e-4)
    assert (seen[0][0] - seen[0][0].mean(-1, keepdim=True)).abs().max() > 0.05  # not a near-uniform policy
