"""Actor-critic networks for Atari frames: the Nature CNN and the IMPALA ResNet, each
optionally with IMPALA's recurrent core (an LSTM).

Inputs are uint8 frame stacks [N, C, H, W] (C = stack x channels); they are converted to
float and scaled to [0, 1] (or standardised by running statistics) on whatever device the
model lives on, so observations can stay uint8 until they reach the GPU.

A recurrent network carries a memory per environment between steps: one float32 row
[h, c, previous action, previous reward, first] (`RecurrentCore.memory_size`). The
trainer keeps these rows (`act_step` sets [h, c] when an action is chosen, `note_step`
the rest after the environment's step), and the learner unrolls the network over a
trajectory from the row its first step saw, recomputing what the actor computed.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hybridsim.train_config import OBS_NORMALIZATIONS


class ScaleObservations(nn.Module):
    """uint8 frames to [0, 1] (Mnih et al. 2015)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float() / 255.0


class RunningObservationNorm(nn.Module):
    """Per-input-pixel standardisation by a running mean and variance, clipped to
    [-clip, clip]: OpenAI Baselines' VecNormalize for observations (RunningMeanStd: prior
    mean 0, variance 1, count 1e-4; clip 10). CuLE's A2C+V-trace standardises Pong's
    frames the same way, without the clip (`--normalize`; its README reports much slower
    convergence without it). Static background becomes 0 and whatever moves (ball,
    paddles) stands out. The statistics are buffers, so checkpoints carry them; only
    `update` changes them, from batch moments that the trainer sums over all ranks."""

    def __init__(self, obs_shape, clip: float = 10.0, epsilon: float = 1e-8):
        super().__init__()
        self.register_buffer("mean", torch.zeros(obs_shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(obs_shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self.clip, self.epsilon = clip, epsilon

    @staticmethod
    def moments(obs: torch.Tensor) -> torch.Tensor:
        """[count, sum over the batch, sum of squares] of a [N, *obs_shape] batch, flat float64."""
        x = obs.reshape(obs.shape[0], -1).double()
        count = torch.tensor([float(obs.shape[0])], dtype=torch.float64, device=obs.device)
        return torch.cat([count, x.sum(0), (x * x).sum(0)])

    @torch.no_grad()
    def update(self, moments: torch.Tensor):
        """Fold in a batch's (possibly all-reduced) moments: Chan et al.'s parallel update."""
        moments = moments.to(self.mean.device)
        n = moments[0]
        size = self.mean.numel()
        batch_mean = (moments[1:1 + size] / n).view_as(self.mean)
        batch_var = (moments[1 + size:] / n).view_as(self.mean) - batch_mean ** 2
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var.clamp(min=0) * n + delta ** 2 * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        mean, std = self.mean.float(), torch.sqrt(self.var + self.epsilon).float()
        return ((obs.float() - mean) / std).clamp(-self.clip, self.clip)


def make_obs_normalizer(kind: str, obs_shape) -> nn.Module:
    if kind == "scale":
        return ScaleObservations()
    if kind == "running":
        return RunningObservationNorm(tuple(obs_shape))
    raise ValueError(f"obs_normalization must be one of {OBS_NORMALIZATIONS}, got {kind!r}")


def _conv_output_size(module: nn.Module, in_shape) -> int:
    with torch.no_grad():
        return int(module(torch.zeros(1, *in_shape)).numel())


class RecurrentCore(nn.Module):
    """IMPALA's recurrent core (Espeholt et al. 2018, fig. 3): one LSTM layer fed the trunk's
    features, the previous action (one-hot) and the previous reward clipped to [-1, 1]. At
    the first step of an episode the LSTM state and those two inputs are zero, so nothing
    carries over from the episode before. (torchbeast's --use_lstm differs: two layers of
    the trunk's width + actions + 1, and action 0 as the previous action at a start.)"""

    def __init__(self, feature_size: int, num_actions: int, hidden_size: int):
        super().__init__()
        self.num_actions, self.hidden_size = num_actions, hidden_size
        self.cell = nn.LSTMCell(feature_size + num_actions + 1, hidden_size)

    @property
    def memory_size(self) -> int:
        return 2 * self.hidden_size + 3

    def forward(self, features, memory, prev_actions, prev_rewards, firsts):
        """features [S, B, F]; memory [B, memory_size] as the first step saw it; for the steps
        after the first, prev_actions/prev_rewards/firsts [S - 1, B] (the actions taken, their
        rewards and whether an episode ended there). Returns outputs [S, B, H] and [h, c]
        [B, 2H] after the last step."""
        H = self.hidden_size
        h, c = memory[:, :H], memory[:, H:2 * H]
        actions = torch.cat([memory[None, :, 2 * H].long(), prev_actions.long()])
        rewards = torch.cat([memory[None, :, 2 * H + 1], prev_rewards.float()])
        keep = 1.0 - torch.cat([memory[None, :, 2 * H + 2], firsts.float()])  # [S, B]
        previous = torch.cat([F.one_hot(actions, self.num_actions).float(),
                              rewards.clamp(-1.0, 1.0).unsqueeze(-1)], dim=-1) * keep.unsqueeze(-1)
        # every step's input part of the gates in one product (a loop of LSTMCell calls
        # reads weight_ih once per step); nn.LSTMCell's arithmetic otherwise
        cell = self.cell
        input_gates = F.linear(torch.cat([features, previous], dim=-1), cell.weight_ih,
                               cell.bias_ih + cell.bias_hh)
        outputs = []
        for t in range(features.shape[0]):
            h, c = h * keep[t, :, None], c * keep[t, :, None]
            i, f, g, o = (input_gates[t] + F.linear(h, cell.weight_hh)).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs), torch.cat([h, c], dim=-1)


# IMPALA's LSTM has 256 units after both of its networks (Espeholt et al. 2018, fig. 3)
LSTM_SIZE = 256


class _ActorCritic(nn.Module):
    """A trunk (self.normalize, self.features, self.fc) with a policy and a value head,
    directly or through a RecurrentCore."""

    channels_last_on_cpu = False  # to_device: whether its CPU convolutions run channels-last

    def _add_heads(self, trunk_size: int, num_actions: int, use_lstm: bool):
        self.core = RecurrentCore(trunk_size, num_actions, LSTM_SIZE) if use_lstm else None
        head_size = LSTM_SIZE if use_lstm else trunk_size
        self.policy = nn.Linear(head_size, num_actions)
        self.value = nn.Linear(head_size, 1)

    @property
    def memory_size(self) -> int:
        """Floats of memory per environment (0: a feed-forward network)."""
        return 0 if self.core is None else self.core.memory_size

    def initial_memory(self, n: int, device=None) -> torch.Tensor | None:
        """The memory of n environments at the first step of an episode (None: feed-forward)."""
        if self.core is None:
            return None
        memory = torch.zeros(n, self.memory_size, device=device)
        memory[:, -1] = 1.0
        return memory

    def check_memory(self, memory) -> None:
        """ValueError unless `memory` (numpy) holds rows this network could have written:
        finite, previous actions among its actions, episode-start flags 0 or 1."""
        actions, firsts = memory[:, -3], memory[:, -1]
        if not np.isfinite(memory).all():
            raise ValueError("its rows are not all of finite values")
        if not (np.isin(firsts, (0.0, 1.0)).all() and (actions == np.round(actions)).all()
                and ((actions >= 0) & (actions < self.core.num_actions)).all()):
            raise ValueError(f"its previous actions are not among the {self.core.num_actions} actions, or "
                             f"its episode-start flags not 0 or 1")

    def _trunk(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(self.normalize(obs)))

    def forward(self, obs: torch.Tensor):
        """A feed-forward network's logits [N, A] and values [N] for a batch [N, ...]."""
        if self.core is not None:
            raise TypeError("a recurrent network needs its memory: call unroll")
        x = self._trunk(obs)
        return self.policy(x), self.value(x).squeeze(-1)

    def unroll(self, obs, memory=None, prev_actions=None, prev_rewards=None, firsts=None):
        """obs [S, B, ...] -> logits [S, B, A], values [S, B] and the [h, c] rows [B, 2H] after
        the last step (None for a feed-forward network, which ignores the rest). See
        RecurrentCore.forward for the other arguments; with S = 1 they may be None."""
        S, B = obs.shape[:2]
        x = self._trunk(obs.reshape(S * B, *obs.shape[2:]))
        state = None
        if self.core is not None:
            if prev_actions is None:
                prev_actions = prev_rewards = firsts = torch.zeros(0, B, device=x.device)
            x, state = self.core(x.reshape(S, B, -1), memory, prev_actions, prev_rewards, firsts)
            x = x.reshape(S * B, -1)
        return (self.policy(x).reshape(S, B, -1), self.value(x).reshape(S, B), state)

    def act_step(self, obs: torch.Tensor, memory: torch.Tensor | None, index=slice(None)):
        """Logits [B, A] and values [B] for a batch [B, ...] of environments whose memory
        rows are memory[index]; a recurrent network's new [h, c] go into those rows (then
        note_step, after the environments' step, completes them)."""
        if memory is None:
            return self(obs)
        logits, values, state = self.unroll(obs[None], memory[index])
        memory[index, :state.shape[1]] = state
        return logits[0], values[0]


def note_step(memory: torch.Tensor | None, index, actions, rewards, dones) -> None:
    """After an environment step, memory rows `index` take the action taken, its raw reward
    and whether the episode ended (then the next step is an episode's first). None (a
    feed-forward network's memory): nothing to do."""
    if memory is None:
        return
    step = torch.stack([torch.as_tensor(x).to(memory.device, torch.float32)
                        for x in (actions, rewards, dones)], dim=-1)
    memory[index, -3:] = step


class NatureCNN(_ActorCritic):
    """Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015:
    conv 32x8x8/4, 64x4x4/2, 64x3x3/1, fc 512; here with a policy and a value head."""

    def __init__(self, obs_shape, num_actions: int, obs_normalization: str = "scale",
                 use_lstm: bool = False):
        super().__init__()
        self.normalize = make_obs_normalizer(obs_normalization, obs_shape)
        channels = obs_shape[0]
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        hidden = _conv_output_size(self.features, obs_shape)
        self.fc = nn.Sequential(nn.Linear(hidden, 512), nn.ReLU())
        self._add_heads(512, num_actions, use_lstm)


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        out = self.conv0(torch.relu(x))
        out = self.conv1(torch.relu(out))
        return x + out


class ImpalaResNet(_ActorCritic):
    """Espeholt et al. (2018), fig. 3 (right): three stages of conv 3x3, max-pool 3x3/2 and
    two residual blocks, with 16, 32, 32 channels, then fc 256 (and with use_lstm the LSTM)."""

    # 1.5x the training frames/s on 2 CPU cores (medians; the Nature CNN: no difference;
    # BENCHMARKS.md, "Channels-last convolutions on the CPU")
    channels_last_on_cpu = True

    def __init__(self, obs_shape, num_actions: int, stage_channels=(16, 32, 32),
                 obs_normalization: str = "scale", use_lstm: bool = False):
        super().__init__()
        self.normalize = make_obs_normalizer(obs_normalization, obs_shape)
        layers = []
        channels = obs_shape[0]
        for out_channels in stage_channels:
            layers += [nn.Conv2d(channels, out_channels, 3, padding=1),
                       nn.MaxPool2d(3, stride=2, padding=1),
                       _ResidualBlock(out_channels), _ResidualBlock(out_channels)]
            channels = out_channels
        layers += [nn.ReLU(), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        hidden = _conv_output_size(self.features, obs_shape)
        self.fc = nn.Sequential(nn.Linear(hidden, 256), nn.ReLU())
        self._add_heads(256, num_actions, use_lstm)


MODELS = {"nature": NatureCNN, "impala": ImpalaResNet}


def init_actor_critic(model: nn.Module, trunk: bool) -> nn.Module:
    """Orthogonal heads with zero biases: gain 0.01 for the policy, so the first policy is
    close to uniform, and 1 for the value; with `trunk`, also the ReLU layers (gain sqrt(2)).
    This is the OpenAI Baselines A2C/PPO initialisation; Andrychowicz et al., "What Matters
    in On-Policy Reinforcement Learning?" (ICLR 2021), found the small policy-head scale
    among the choices that matter most. PyTorch's default (Kaiming-uniform, a = sqrt(5))
    starts ReLU layers at a third of the He variance. The IMPALA ResNet keeps that default
    in its trunk (as torchbeast does): sqrt(2) gains in every residual branch would grow the
    activations stage by stage."""
    layers = [model.policy, model.value]
    if trunk:
        layers += [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    for layer in layers:
        nn.init.orthogonal_(layer.weight, gain=nn.init.calculate_gain("relu"))
        nn.init.zeros_(layer.bias)
    nn.init.orthogonal_(model.policy.weight, gain=0.01)
    nn.init.orthogonal_(model.value.weight, gain=1.0)
    return model


def to_device(model: nn.Module, device) -> nn.Module:
    """`model` on `device`; on a CPU, a network that runs faster so with its convolution
    weights channels-last (oneDNN then computes the activations in that layout too). The
    values are the same; only rounding can differ from the NCHW layout."""
    model = model.to(device)
    if model.channels_last_on_cpu and torch.device(device).type == "cpu":
        model = model.to(memory_format=torch.channels_last)
    return model


def activation_bytes_per_observation(model: nn.Module, obs_shape) -> int:
    """Bytes a learner keeps per observation of its batch between the forward and the
    backward pass: the tensors autograd saves (each storage once, the network's weights
    left out). A lower bound of the batch's peak: the gradients and the optimizer's and
    the loss's tensors come on top."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def keep(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        model.unroll(torch.zeros((1, 1, *obs_shape), dtype=torch.uint8), model.initial_memory(1))
    return sum(saved.values())


def match_optimizer_state_layout(optimizer: torch.optim.Optimizer) -> None:
    """Gives each per-parameter state tensor (moments, squares) its parameter's memory layout.
    A checkpoint written in the other layout (an NCHW run resumed where the ResNet runs
    channels-last, or the reverse) loads with its own strides; the values are the same,
    but every update would then mix the two layouts."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key, value in state.items():
                if torch.is_tensor(value) and value.shape == param.shape and value.stride() != param.stride():
                    state[key] = torch.empty_like(param, dtype=value.dtype).copy_(value)


def build_model(name: str, obs_shape, num_actions: int, obs_normalization: str = "scale",
                use_lstm: bool = False) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    model = MODELS[name](tuple(obs_shape), num_actions, obs_normalization=obs_normalization,
                         use_lstm=use_lstm)
    # orthogonal_ runs a QR whose rounding depends on torch's thread count: on one thread
    # the same seed gives the same network on every machine (differences of 4e-7 with 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return init_actor_critic(model, trunk=name == "nature")
    finally:
        torch.set_num_threads(threads)
