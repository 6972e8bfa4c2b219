"""``nn.LSTM`` and ``nn.GRU`` on neuron tensors.

ATen's recurrent layers compute each step's gates with two matmuls, then, on
every device but the CPU (CUDA, XPU, PrivateUse1), hand them to a fused cell:
``aten::_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell`` and their backward
ops, which have CUDA kernels only. On neuron the cell was traced (it has a Meta
kernel) and the graph failed when it ran ("Could not run
'aten::_thnn_fused_lstm_cell' with arguments from the 'CPU' backend"), or the
call failed at once for GRU.

``install()`` gives both cells a kernel for AutogradPrivateUse1 (neuron tensors
only) that spells the cell in pointwise torch ops, as the CUDA kernels compute
it; autograd differentiates those ops, so the fused backward ops are never
needed. The third (LSTM) or second (GRU) result is the CUDA kernels' workspace,
which only their backward reads; it holds the activated gates here.
"""

from __future__ import annotations

import torch

_lib = None


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def install() -> None:
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_thnn_fused_lstm_cell", _lstm_cell, "AutogradPrivateUse1")
    _lib.impl("_thnn_fused_gru_cell", _gru_cell, "AutogradPrivateUse1")
