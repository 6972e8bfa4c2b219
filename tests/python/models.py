"""Small models shared by the training tests: an MLP and a decoder-only
transformer, both with dropout, and a CNN with batch norm, built from a seed so
CPU and neuron copies start identical."""

import math

import torch
from torch import nn
import torch.nn.functional as F


def seeded_mlp() -> nn.Module:
    """A tanh/ReLU MLP from 8 features to 3 classes, built from seed 0 (no dropout)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3),
    )


class MLP(nn.Module):
    def __init__(self, d_in=16, hidden=32, d_out=4, p=0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.GELU(), nn.Dropout(p), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, d_out),
        )

    def forward(self, x):
        return self.net(x)


class TinyDecoder(nn.Module):
    """Embedding, causal self-attention, layer norm, GELU MLP, dropout, tied head."""

    def __init__(self, vocab=32, dim=32, heads=4, layers=2, seq=16, p=0.1):
        super().__init__()
        self.heads, self.p = heads, p
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(dim), "qkv": nn.Linear(dim, 3 * dim), "proj": nn.Linear(dim, dim),
                "ln2": nn.LayerNorm(dim), "fc1": nn.Linear(dim, 4 * dim), "fc2": nn.Linear(4 * dim, dim),
            }))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.embed(tokens) + self.pos[:t]
        for blk in self.blocks:
            h = blk["ln1"](x)
            q, k, v = blk["qkv"](h).chunk(3, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 dropout_p=self.p if self.training else 0.0)
            x = x + F.dropout(blk["proj"](att.transpose(1, 2).reshape(b, t, -1)), self.p, self.training)
            x = x + F.dropout(blk["fc2"](F.gelu(blk["fc1"](blk["ln2"](x)))), self.p, self.training)
        return self.ln_f(x) @ self.embed.weight.t()  # tied output head


class SmallCNN(nn.Module):
    """Two conv / batch-norm / ReLU stages (max pool, then average pool) and a
    linear head, for 1x12x12 images in 4 classes. The convolutions have no bias,
    as usual before batch norm: its gradient would be zero up to rounding, which
    Adam scales up to full steps, so CPU and neuron would drift apart on noise."""

    def __init__(self, channels=(8, 16), classes=4):
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.BatchNorm2d(c1), nn.ReLU(),
            nn.MaxPool2d(2),  # 12x12 -> 6x6
            nn.Conv2d(c1, c2, 3, padding=1, bias=False), nn.BatchNorm2d(c2), nn.ReLU(),
            nn.AvgPool2d(2),  # 6x6 -> 3x3
        )
        self.head = nn.Linear(c2 * 3 * 3, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def make_batches(kind, steps, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        if kind == "mlp":
            x = torch.randn(batch, 16, generator=g)
            y = torch.randint(0, 4, (batch,), generator=g)
        elif kind == "cnn":
            # The class is the brightest quadrant, so the CNN has something to learn.
            x = torch.randn(batch, 1, 12, 12, generator=g)
            y = x.reshape(batch, 2, 6, 2, 6).mean(dim=(2, 4)).reshape(batch, 4).argmax(dim=1)
        else:
            x = torch.randint(0, 32, (batch, 16), generator=g)
            y = torch.roll(x, -1, dims=1)
        out.append((x, y))
    return out


def loss_fn(kind, model, x, y):
    logits = model(x)
    if kind in ("mlp", "cnn"):
        return F.cross_entropy(logits, y)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
