"""Real-sized models for bench_training: what a user trains, not a toy.

- ``gpt2``: a GPT-2-style decoder from Hugging Face transformers
  (``GPT2LMHeadModel``: 6 layers, hidden 512, 8 heads, sequence 256, batch 8,
  tied embeddings, AdamW). The vocabulary is 8,192 tokens rather than GPT-2's
  50,257, so that the LM head does not take most of the step on a 2-core host;
  23.2M parameters.
- ``resnet``: a ResNet-18-style CNN (basic blocks of 64, 128, 256 and 512
  channels, two per stage, batch norm, the ImageNet stem) on 3x64x64 images,
  batch 32, 10 classes, SGD with momentum; 11.2M parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

GPT2_VOCAB, GPT2_SEQ, GPT2_BATCH = 8192, 256, 8
RESNET_SIZE, RESNET_BATCH, RESNET_CLASSES = 64, 32, 10


def gpt2_decoder() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(n_layer=6, n_embd=512, n_head=8, n_positions=GPT2_SEQ,
                                     vocab_size=GPT2_VOCAB, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int = RESNET_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(kind: str) -> nn.Module:
    return gpt2_decoder() if kind == "gpt2" else ResNet18()


def make_optimizer(kind: str, model: nn.Module) -> torch.optim.Optimizer:
    if kind == "gpt2":
        return torch.optim.AdamW(model.parameters(), lr=1e-4)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def make_batch(kind: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if kind == "gpt2":
        ids = torch.randint(0, GPT2_VOCAB, (GPT2_BATCH, GPT2_SEQ), generator=g)
        return ids, ids
    x = torch.randn(RESNET_BATCH, 3, RESNET_SIZE, RESNET_SIZE, generator=g)
    y = torch.randint(0, RESNET_CLASSES, (RESNET_BATCH,), generator=g)
    return x, y


def loss(kind: str, forward, x, y):
    if kind == "gpt2":
        return forward(input_ids=x, labels=y).loss  # shifted next-token cross entropy
    return F.cross_entropy(forward(x), y)
