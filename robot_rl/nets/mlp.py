"""MLPs with LayerNorm, and a critic ensemble evaluated as one batched matmul per layer."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Sequential):
    """Linear -> LayerNorm -> activation blocks; LayerNorm keeps high-UTD critics from diverging (RLPD)."""

    def __init__(
        self,
        in_dim: int,
        hidden: Sequence[int],
        out_dim: int | None = None,
        layernorm: bool = True,
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden:
            layers.append(nn.Linear(d, h))
            if layernorm:
                layers.append(nn.LayerNorm(h))
            layers.append(activation())
            d = h
        if out_dim is not None:
            layers.append(nn.Linear(d, out_dim))
        super().__init__(*layers)
        self.out_dim = out_dim if out_dim is not None else d
        self.has_output_layer = out_dim is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.has_output_layer:
            return super().forward(x)
        for layer in itertools.islice(self, len(self) - 1):
            x = layer(x)
        return full_precision(self[-1], x)


def full_precision(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Runs an output layer in fp32 even under bf16 autocast: Q values near 1 / (1 - discount) and action means
    need more than bf16's 8 mantissa bits, and the layer is a sliver of the FLOPs."""
    with torch.autocast(x.device.type, enabled=False):
        return layer(x.float())


class EnsembleLinear(nn.Module):
    """`n` independent linear layers applied with one `baddbmm`: x (n, B, i) -> (n, B, o)."""

    def __init__(self, n: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(n, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.shape[-1] == 1:
            # A Q head: as a broadcast multiply-sum it is small memory-bound work; as a batched GEMM with N=1 it
            # hits MKL's slow path for that shape, forward and backward, a visible share of a state update.
            return (x * self.weight.mT).sum(-1, keepdim=True) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm with separate affine parameters per ensemble member."""

    def __init__(self, n: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, dim))
        self.bias = nn.Parameter(torch.zeros(n, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In the activation's dtype (the kernel keeps its statistics in fp32): CUDA autocast would run the norm in
        # fp32, and fp32 affine parameters would promote every activation back to fp32; either way the next
        # matmul would cast it down again.
        with torch.autocast(x.device.type, enabled=False):
            y = torch.nn.functional.layer_norm(x, x.shape[-1:])
            return torch.addcmul(self.bias.to(y.dtype), y, self.weight.to(y.dtype))


class EnsembleMLP(nn.Module):
    """`n` MLPs evaluated together; one kernel per layer instead of `n`, which matters at ensemble 10."""

    def __init__(self, n: int, in_dim: int, hidden: Sequence[int], out_dim: int, layernorm: bool = True) -> None:
        super().__init__()
        self.n = n
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden:
            layers.append(EnsembleLinear(n, d, h))
            if layernorm:
                layers.append(EnsembleLayerNorm(n, h))
            layers.append(nn.ReLU())
            d = h
        layers.append(EnsembleLinear(n, d, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, i) shared by all members, or (n, B, i). Returns (n, B, out)."""
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.n, -1, -1)
        for layer in itertools.islice(self.net, len(self.net) - 1):
            x = layer(x)
        return full_precision(self.net[-1], x)
