"""RMSprop as TensorFlow 1 and OpenAI Baselines' A2C run it.

torch.optim.RMSprop starts the mean square of the gradients at 0, so every parameter's
first steps are about lr / sqrt(1 - alpha) = 10 x lr whatever its gradient, and later
ones about lr for any gradient that is consistent, however small. In an actor-critic
trunk the tiny but consistent pull of the value loss on every weight then moves whole
layers together. On Pong (BENCHMARKS.md) it left 3-6% of the first layer's units active
after 0.5-2.5M frames (about 40% with this optimizer), and none at all with PyTorch's
default initialisation. TensorFlow's RMSPropOptimizer, which Baselines'
A2C used, starts the mean square at 1 and adds epsilon inside the square root:

    ms <- alpha * ms + (1 - alpha) * g^2,    p <- p - lr * g / sqrt(ms + eps)

so a parameter with small gradients moves little until its mean square has decayed to
their scale (a few hundred steps), while large gradients (the value head's bias) move at
once.
"""
from __future__ import annotations

import torch


class RMSpropTF(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, alpha: float = 0.99, eps: float = 1e-5):
        if lr < 0 or not 0.0 <= alpha < 1.0 or eps < 0:
            raise ValueError(f"RMSpropTF needs lr >= 0, 0 <= alpha < 1, eps >= 0; got "
                             f"lr={lr}, alpha={alpha}, eps={eps}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["mean_square"] = torch.ones_like(p)
                ms = state["mean_square"]
                ms.mul_(group["alpha"]).addcmul_(p.grad, p.grad, value=1.0 - group["alpha"])
                p.addcdiv_(p.grad, ms.add(group["eps"]).sqrt_(), value=-group["lr"])
        return loss
