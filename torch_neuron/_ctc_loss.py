"""``F.ctc_loss`` with its length tensors on the CPU, as CUDA takes them.

Speech recipes keep ``input_lengths`` and ``target_lengths`` on the CPU (CUDA's
kernels read them there). ATen's ``ctc_loss.Tensor`` turns CPU lengths into
lists on plain devices, but a neuron tensor is a wrapper subclass to it, so it
keeps the tensors and, for ``reduction="mean"``, divides the neuron losses by
the CPU ``target_lengths``: "Expected all tensors to be on the same device".

``install()`` gives ``aten::ctc_loss.Tensor`` a kernel for AutogradPrivateUse1
that does what ATen does for CUDA: CPU lengths become lists (their values are
on the host already) and the list overload runs; lengths on neuron take ATen's
own composite; a CPU length beside a neuron one is moved to neuron first.
"""

from __future__ import annotations

import torch

_lib = None


def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
              zero_infinity=False):
    lengths = (input_lengths, target_lengths)
    if all(t.device.type == "cpu" for t in lengths):
        return torch.ops.aten.ctc_loss.IntList(
            log_probs, targets, input_lengths.tolist(), target_lengths.tolist(), blank, reduction,
            zero_infinity)
    input_lengths, target_lengths = (t.to(log_probs.device) for t in lengths)
    return torch.ops.aten.ctc_loss.Tensor.decompose(
        log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)


def install() -> None:
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("ctc_loss.Tensor", _ctc_loss, "AutogradPrivateUse1")
