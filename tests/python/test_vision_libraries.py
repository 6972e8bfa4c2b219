"""timm and torchvision, unmodified, on neuron (issue 50): timm's training
pieces (its model factory, optimizer factory and label-smoothing loss), a
torchvision model trained, torchvision's compiled operators and its tensor
transforms. Tiny sizes and random weights, no downloads. Each run is compared
with the same run on the CPU from the same initial weights, and a loop that
repeats a step compiles nothing after its warm-up.

torchvision here is built from source against the CPU torch by
scripts/torchvision.sh (PyPI's x86_64 wheels are CUDA builds whose operators
do not load beside it).
"""

import copy

import pytest
import torch

import torch_neuron

from library_training import assert_same_parameters, train_steps

timm = pytest.importorskip("timm")
torchvision = pytest.importorskip("torchvision")

STEPS = 5


def images(count: int, size: int, classes: int = 8):
    """A batch of 8 at 64 px: smaller, the last batch norms see a few values per
    channel and the CPU's own float32 run drifts from float64 by 1e-3 within 5
    steps (mobilenet_v3 at 4 x 32 px), so the comparison would measure rounding."""
    gen = torch.Generator().manual_seed(1)
    return torch.randn(count, 3, size, size, generator=gen), torch.randint(0, classes, (count,), generator=gen)


def train(base, x, y, device, metrics, make_optimizer, loss_fn):
    """STEPS steps on one batch."""
    model = copy.deepcopy(base).to(device)
    x, y = x.to(device), y.to(device)
    losses, graphs = train_steps([(x, y)] * STEPS, lambda b: loss_fn(model(b[0]), b[1]), make_optimizer(model),
                                 metrics)
    return losses, graphs, model


@pytest.mark.parametrize("name,kwargs,size", [
    # timm's own small test architectures:
    ("test_resnet", {}, 64),                       # conv stem, batch norm, residual blocks
    ("test_vit", {"img_size": 64}, 64),            # patch embedding, attention, layer norm
    ("test_efficientnet", {}, 64),                 # depthwise convs, squeeze-excite
])
def test_timm_model_trains_with_timm_optimizer_and_loss_on_neuron_as_on_the_cpu(name, kwargs, size, metrics):
    from timm.loss import LabelSmoothingCrossEntropy
    from timm.optim import create_optimizer_v2

    torch.manual_seed(0)
    base = timm.create_model(name, num_classes=8, **kwargs)
    x, y = images(8, size)

    def make_optimizer(model):
        # timm's "sgd" is Nesterov momentum; with weight decay split off for norms and biases.
        # (AdamW turns float32 noise in a near-zero gradient into whole steps of lr in either
        # direction, so over steps it compares rounding, not the device: the peft test covers it.)
        return create_optimizer_v2(model, opt="sgd", lr=0.01, momentum=0.9, weight_decay=1e-4)

    loss_fn = LabelSmoothingCrossEntropy(smoothing=0.1)
    cpu_losses, _, cpu_model = train(base, x, y, "cpu", metrics, make_optimizer, loss_fn)
    metrics.reset()
    losses, graphs, model = train(base, x, y, "neuron", metrics, make_optimizer, loss_fn)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    assert_same_parameters(model, cpu_model, rtol=1e-4, atol=1e-5)
    for (name_, b_cpu), (_, b) in zip(cpu_model.named_buffers(), model.named_buffers()):  # BN running stats
        torch.testing.assert_close(b.cpu(), b_cpu, rtol=1e-4, atol=1e-5, msg=lambda m, n=name_: f"{n}: {m}")
    # Step 1 makes the momentum buffers; from step 2 on every step is the same graph.
    assert graphs[0] > 0 and sum(graphs[2:]) == 0, graphs


def test_torchvision_model_trains_on_neuron_as_on_the_cpu(metrics):
    torch.manual_seed(0)
    base = torchvision.models.mobilenet_v3_small(num_classes=8, dropout=0.0)
    x, y = images(8, 64)

    def make_optimizer(model):
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    cpu_losses, _, cpu_model = train(base, x, y, "cpu", metrics, make_optimizer, torch.nn.functional.cross_entropy)
    metrics.reset()
    losses, graphs, model = train(base, x, y, "neuron", metrics, make_optimizer, torch.nn.functional.cross_entropy)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    assert_same_parameters(model, cpu_model, rtol=1e-4, atol=1e-5)
    assert graphs[0] > 0 and sum(graphs[2:]) == 0, graphs


def boxes(gen, n, extent=32.0):
    xy = torch.rand(n, 2, generator=gen) * extent
    wh = torch.rand(n, 2, generator=gen) * extent / 2 + 1
    return torch.cat([xy, xy + wh], dim=1)


def test_torchvision_operators_on_neuron_equal_the_cpu():
    from torchvision import ops

    gen = torch.Generator().manual_seed(0)
    b, scores = boxes(gen, 40), torch.rand(40, generator=gen)
    idx = torch.randint(0, 3, (40,), generator=gen)
    feats = torch.randn(2, 4, 16, 16, generator=gen)
    rois = torch.cat([torch.tensor([[0.0], [1.0], [1.0]]), boxes(gen, 3, 14.0)], dim=1)
    offset = torch.randn(2, 2 * 3 * 3, 14, 14, generator=gen) * 0.5
    weight = torch.randn(5, 4, 3, 3, generator=gen)
    logits, targets = torch.randn(6, 3, generator=gen), torch.rand(6, 3, generator=gen).round()

    def run(d):
        return {
            "nms": ops.nms(b.to(d), scores.to(d), 0.4),
            "batched_nms": ops.batched_nms(b.to(d), scores.to(d), idx.to(d), 0.4),
            "box_iou": ops.box_iou(b[:5].to(d), b[5:9].to(d)),
            "generalized_box_iou": ops.generalized_box_iou(b[:5].to(d), b[5:9].to(d)),
            "box_convert": ops.box_convert(b.to(d), "xyxy", "cxcywh"),
            "roi_align": ops.roi_align(feats.to(d), rois.to(d), (3, 3), spatial_scale=0.5, sampling_ratio=2),
            "roi_pool": ops.roi_pool(feats.to(d), rois.to(d), (2, 2)),
            "ps_roi_align": ops.ps_roi_align(feats.to(d), rois.to(d), (2, 2)),
            "deform_conv2d": ops.deform_conv2d(feats.to(d), offset.to(d), weight.to(d)),
            "sigmoid_focal_loss": ops.sigmoid_focal_loss(logits.to(d), targets.to(d), reduction="mean"),
        }

    cpu, neu = run("cpu"), run("neuron")
    for k in cpu:
        assert neu[k].device.type == "neuron", k
        torch.testing.assert_close(neu[k].cpu(), cpu[k], rtol=1e-5, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


def test_torchvision_roi_align_gradient_on_neuron_equals_the_cpu():
    from torchvision import ops

    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(1, 3, 12, 12, generator=gen)
    rois = torch.cat([torch.zeros(2, 1), boxes(gen, 2, 10.0)], dim=1)

    def grad(d):
        f = feats.to(d).requires_grad_()
        ops.roi_align(f, rois.to(d), (3, 3), sampling_ratio=2).pow(2).sum().backward()
        return f.grad.cpu()

    torch.testing.assert_close(grad("neuron"), grad("cpu"), rtol=1e-5, atol=1e-6)


def test_torchvision_transforms_on_neuron_tensors_equal_the_cpu():
    from torchvision.transforms import v2

    gen = torch.Generator().manual_seed(0)
    img = torch.rand(2, 3, 20, 24, generator=gen)
    pipeline = v2.Compose([
        v2.Resize((16, 16), antialias=True),
        v2.CenterCrop(12),
        v2.Normalize(mean=[0.5, 0.4, 0.3], std=[0.2, 0.25, 0.3]),
    ])
    out = pipeline(img.to("neuron"))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), pipeline(img), rtol=1e-5, atol=1e-5)
    u8 = (img * 255).to(torch.uint8)
    flip = v2.RandomHorizontalFlip(p=1.0)
    assert torch.equal(flip(u8.to("neuron")).cpu(), flip(u8))
    to_float = v2.ToDtype(torch.float32, scale=True)
    torch.testing.assert_close(to_float(u8.to("neuron")).cpu(), to_float(u8))
