"""Model factories a study can name (``architecture.models``): each is called as
``factory(in_features, out_features, **kwargs)`` and returns an ``nn.Module`` mapping a batch
of rows (B, in_features) to (B, out_features). fairdp packs K copies of it, one per config,
each initialised from the config's own random stream (see docs/extending.md).

    architecture:
      models:
        encoder: {factory: examples/models.py:residual_mlp, width: 64, blocks: 2}
"""

from torch import nn


class ResidualBlock(nn.Module):
    """x + Linear(ReLU(Linear(LayerNorm(x)))): LayerNorm normalises each row on its own, so
    the block can be packed and clipped per sample (batch norm could not)."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.body = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(width, width))

    def forward(self, x):
        return x + self.body(x)


def residual_mlp(in_features: int, out_features: int, width: int = 64, blocks: int = 2,
                 dropout: float = 0.1) -> nn.Module:
    """A wider tabular network: a projection, ``blocks`` residual blocks, a ReLU output layer."""
    return nn.Sequential(nn.Linear(in_features, width), *(ResidualBlock(width, dropout) for _ in range(blocks)),
                         nn.Linear(width, out_features), nn.ReLU())
