"""Packed losses and schedules: each takes a leading config axis K and returns one value per config."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def per_config_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per config: logits (K, B, C), target (B,) -> (K,)."""
    k, b, c = logits.shape
    return F.cross_entropy(logits.reshape(k * b, c), target.repeat(k), reduction="none").view(k, b).mean(1)


def per_config_accuracy(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Percent of rows where ``pred`` (K, n) equals ``target`` (n,), per config, on the CPU."""
    return (pred == target).double().mean(dim=1).cpu() * 100.0


def difference_loss(hidden: list[torch.Tensor]) -> torch.Tensor:
    """Han et al. (2021) orthogonality loss over all pairs of adversaries, per config (K,).

    Each adversary's last hidden representation (K, B, H) is mean-centred over the batch
    and row-L2-normalised (as in the domain-separation difference loss it comes from);
    the loss is sum_{i<j} ||H_i^T H_j||_F^2.
    """
    normed = []
    for h in hidden:
        h = h - h.mean(dim=1, keepdim=True)
        normed.append(h / h.norm(dim=2, keepdim=True).clamp_min(1e-8))
    total = hidden[0].new_zeros(hidden[0].shape[0])
    for i in range(len(normed)):
        for j in range(i + 1, len(normed)):
            total = total + torch.bmm(normed[i].transpose(1, 2), normed[j]).pow(2).sum(dim=(1, 2))
    return total


def lambda_schedule(lam: torch.Tensor, epoch: int, epochs: int, gamma: float, schedule: str) -> torch.Tensor:
    """Ganin & Lempitsky's ramp lam * (2 / (1 + exp(-gamma p)) - 1), p = epoch / epochs (0-based epoch)."""
    if schedule == "constant":
        return lam
    p = epoch / epochs
    return lam * (2.0 / (1.0 + math.exp(-gamma * p)) - 1.0)
