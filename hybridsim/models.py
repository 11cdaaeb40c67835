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


def build_model(name: str, obs_shape, num_actions: int) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return MODELS[name](tuple(obs_shape), num_actions)
