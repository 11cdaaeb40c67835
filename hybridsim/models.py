"""Actor-critic networks for Atari frames: the Nature CNN and the IMPALA ResNet.

Inputs are uint8 frame stacks [N, C, H, W] (C = stack x channels); they are converted to
float and scaled to [0, 1] on whatever device the model lives on, so observations can
stay uint8 until they reach the GPU.
"""
from __future__ import annotations

import torch
from torch import nn


def _conv_output_size(module: nn.Module, in_shape) -> int:
    with torch.no_grad():
        return int(module(torch.zeros(1, *in_shape)).numel())


class NatureCNN(nn.Module):
    """Mnih et al., "Human-level control through deep reinforcement learning", Nature 2015:
    conv 32x8x8/4, 64x4x4/2, 64x3x3/1, fc 512; here with a policy and a value head."""

    def __init__(self, obs_shape, num_actions: int):
        super().__init__()
        channels = obs_shape[0]
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        hidden = _conv_output_size(self.features, obs_shape)
        self.fc = nn.Sequential(nn.Linear(hidden, 512), nn.ReLU())
        self.policy = nn.Linear(512, num_actions)
        self.value = nn.Linear(512, 1)

    def forward(self, obs: torch.Tensor):
        x = self.fc(self.features(obs.float() / 255.0))
        return self.policy(x), self.value(x).squeeze(-1)


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        out = self.conv0(torch.relu(x))
        out = self.conv1(torch.relu(out))
        return x + out


class ImpalaResNet(nn.Module):
    """Espeholt et al. (2018), fig. 3 (right): three stages of conv 3x3, max-pool 3x3/2 and
    two residual blocks, with 16, 32, 32 channels, then fc 256 (no LSTM here)."""

    def __init__(self, obs_shape, num_actions: int, stage_channels=(16, 32, 32)):
        super().__init__()
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
        self.policy = nn.Linear(256, num_actions)
        self.value = nn.Linear(256, 1)

    def forward(self, obs: torch.Tensor):
        x = self.fc(self.features(obs.float() / 255.0))
        return self.policy(x), self.value(x).squeeze(-1)


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


def build_model(name: str, obs_shape, num_actions: int) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return init_actor_critic(MODELS[name](tuple(obs_shape), num_actions), trunk=name == "nature")
