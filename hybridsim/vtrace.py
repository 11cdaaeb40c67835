"""V-trace off-policy targets.

Espeholt et al., "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
Actor-Learner Architectures", ICML 2018, section 4.1 (arXiv:1802.01561).

All tensors are time-major: [T, B] (logits [T, B, num_actions]). Targets are computed
without gradient; the caller differentiates the policy and value losses built from them.
"""
from __future__ import annotations

import collections

import torch
import torch.nn.functional as F

VTraceReturns = collections.namedtuple("VTraceReturns", ["vs", "pg_advantages"])
VTraceFromLogitsReturns = collections.namedtuple(
    "VTraceFromLogitsReturns",
    ["vs", "pg_advantages", "log_rhos", "behavior_action_log_probs", "target_action_log_probs"])


def action_log_probs(policy_logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(a_t | x_t) for logits [T, B, A] and integer actions [T, B]."""
    log_probs = F.log_softmax(policy_logits, dim=-1)
    return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def _check_shapes(log_rhos, discounts, rewards, values, bootstrap_value):
    if log_rhos.dim() != 2:
        raise ValueError(f"log_rhos must be [T, B], got shape {tuple(log_rhos.shape)}")
    for name, t in (("discounts", discounts), ("rewards", rewards), ("values", values)):
        if t.shape != log_rhos.shape:
            raise ValueError(f"{name} must have shape {tuple(log_rhos.shape)} like log_rhos, "
                             f"got {tuple(t.shape)}")
    if bootstrap_value.shape != log_rhos.shape[1:]:
        raise ValueError(f"bootstrap_value must be [B] = {tuple(log_rhos.shape[1:])}, "
                         f"got {tuple(bootstrap_value.shape)}")


@torch.no_grad()
def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                            clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                            lambda_=1.0) -> VTraceReturns:
    """V-trace targets vs and policy-gradient advantages from log importance weights.

    rho_t = min(clip_rho_threshold, pi/mu), c_t = lambda_ * min(1, pi/mu),
    v_s = V(x_s) + sum_{t>=s} (prod_{i<t} gamma_i c_i) rho_t delta_t (paper, eq. 1),
    pg_advantage_s = min(clip_pg_rho_threshold, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s)).
    A threshold of None disables that clipping.
    """
    _check_shapes(log_rhos, discounts, rewards, values, bootstrap_value)
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else torch.clamp(rhos, max=clip_rho_threshold)
    cs = lambda_ * torch.clamp(rhos, max=1.0)
    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    # v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})), computed backwards.
    vs_minus_values = torch.empty_like(values)
    acc = torch.zeros_like(bootstrap_value)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_values[t] = acc
    vs = vs_minus_values + values

    vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_rhos = rhos if clip_pg_rho_threshold is None else torch.clamp(rhos, max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def from_logits(behavior_policy_logits, target_policy_logits, actions, discounts, rewards,
                values, bootstrap_value, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                lambda_=1.0) -> VTraceFromLogitsReturns:
    """V-trace from behaviour and target policy logits [T, B, A] and actions [T, B].

    target_action_log_probs keeps its gradient (for the policy loss); the V-trace targets
    themselves carry none.
    """
    if behavior_policy_logits.shape != target_policy_logits.shape:
        raise ValueError(f"behavior and target logits differ in shape: "
                         f"{tuple(behavior_policy_logits.shape)} vs {tuple(target_policy_logits.shape)}")
    if actions.shape != target_policy_logits.shape[:2]:
        raise ValueError(f"actions must be [T, B] = {tuple(target_policy_logits.shape[:2])}, "
                         f"got {tuple(actions.shape)}")
    target_action_log_probs = action_log_probs(target_policy_logits, actions)
    behavior_action_log_probs = action_log_probs(behavior_policy_logits, actions)
    log_rhos = target_action_log_probs.detach() - behavior_action_log_probs.detach()
    returns = from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                                      clip_rho_threshold, clip_pg_rho_threshold, lambda_)
    return VTraceFromLogitsReturns(vs=returns.vs, pg_advantages=returns.pg_advantages,
                                   log_rhos=log_rhos,
                                   behavior_action_log_probs=behavior_action_log_probs,
                                   target_action_log_probs=target_action_log_probs)
