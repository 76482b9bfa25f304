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


class DigitsCNN(nn.Module):
    """The ``digits`` teaching set's rows as 1 x 8 x 8 images: two 3 x 3 convolutions with
    GroupNorm (per-row statistics), a 2 x 2 max-pool, dropout and a linear layer."""

    def __init__(self, out_features: int, channels: int, dropout: float):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.GroupNorm(1, channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(channels * 16, out_features))

    def forward(self, x):
        return self.head(self.features(x.view(-1, 1, 8, 8)))


def digits_cnn(in_features: int, out_features: int, channels: int = 8, dropout: float = 0.1) -> nn.Module:
    """A small CNN over ``digits``' 64 pixels, for the encoder (out_features: the representation
    size) or a whole classifier chain."""
    if in_features != 64:
        raise ValueError(f"digits_cnn reads 8 x 8 images: 64 features, got {in_features}")
    return DigitsCNN(out_features, channels, dropout)
