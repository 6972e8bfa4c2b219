"""Static-shape forms of library operators whose own kernels read values, for
graphs of ``torch.compile(backend="neuron")`` (torch_neuron/_compile_backend.py).

A compiled graph is one program: nothing in it may read a value of the graph
while it is traced. Some libraries' custom operators loop over a tensor's values
in their Python kernel. transformers' mixture-of-experts layer is the case met:
with weights other than bfloat16, under Dynamo, ``_can_use_grouped_mm``
(transformers/integrations/moe.py) refuses ``torch._grouped_mm`` whatever the
device (Inductor compiles grouped_mm for bfloat16 only), so the graph calls its
custom op ``transformers::grouped_mm_fallback(input, weight, offs)``, whose
kernel loops over ``offs.tolist()``, and AOTAutograd's backward graph calls
``transformers::grouped_mm_fallback_backward``. A neuron kernel of
``aten._grouped_mm`` would not change that choice (it is made on the dtype).

Each form here computes what the operator's kernel computes, from ops whose
shapes depend on shapes only: row s of ``input`` belongs to group g, the number
of offsets <= s (rows at or past ``offs[-1]`` to none: zeros, as the kernel
leaves them). One matrix product against every group's weight, then a gather
of each row's group: the work of one GEMM of E times the columns, the memory
of an (S, E, N) result (E groups), instead of a loop of E products of unknown
sizes. The backend rewrites a graph's calls of these operators before tracing
it into a program; a graph run op by op, and the lazy path, call the
operators as they are.
"""

from __future__ import annotations

import torch


def _groups(offs: torch.Tensor, rows: int, groups: int):
    """Per row its group (clamped to a valid index) and whether it has one."""
    positions = torch.arange(rows, device=offs.device, dtype=offs.dtype)
    group = (positions.unsqueeze(1) >= offs.unsqueeze(0)).sum(1)
    return group.clamp(max=groups - 1), (group < groups).unsqueeze(1)


def _per_row(full: torch.Tensor, group: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """full (S, E, C): each row's C values of its own group; zeros for rows of none."""
    rows, _, cols = full.shape
    picked = full.gather(1, group.view(rows, 1, 1).expand(rows, 1, cols)).squeeze(1)
    return torch.where(inside, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))


def grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """transformers::grouped_mm_fallback: out[s] = input[s] @ weight[g(s)] (S, N)."""
    rows, k = input.shape
    groups, _, n = weight.shape
    group, inside = _groups(offs, rows, groups)
    full = torch.mm(input, weight.transpose(0, 1).reshape(k, groups * n)).view(rows, groups, n)
    return _per_row(full, group, inside)


def grouped_mm_backward(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor, grad_output: torch.Tensor):
    """transformers::grouped_mm_fallback_backward: (grad_input, grad_weight)."""
    rows, k = input.shape
    groups, _, n = weight.shape
    group, inside = _groups(offs, rows, groups)
    # grad_input[s] = grad_output[s] @ weight[g(s)]^T
    full = torch.mm(grad_output, weight.permute(2, 0, 1).reshape(n, groups * k)).view(rows, groups, k)
    grad_input = _per_row(full, group, inside)
    # grad_weight[e] = sum over the rows s of group e of input[s]^T grad_output[s]
    member = (torch.arange(groups, device=offs.device).unsqueeze(0) == group.unsqueeze(1)) & inside
    masked = member.t().unsqueeze(2).to(input.dtype) * input.unsqueeze(0)  # (E, S, K)
    grad_weight = torch.bmm(masked.transpose(1, 2), grad_output.unsqueeze(0).expand(groups, rows, n))
    return grad_input, grad_weight


# Operator (as str(node.target) names it) -> its static-shape form.
FORMS = {
    "transformers.grouped_mm_fallback.default": grouped_mm,
    "transformers.grouped_mm_fallback_backward.default": grouped_mm_backward,
}


def rewrite(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """gm with its calls of FORMS' operators calling their forms (a copy; gm
    itself is left as it is, for running op by op). gm when it has none."""
    if not any(n.op == "call_function" and str(n.target) in FORMS for n in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    env = {}
    for node in gm.graph.nodes:
        new = graph.node_copy(node, lambda n: env[n])
        if node.op == "call_function" and str(node.target) in FORMS:
            new.target = FORMS[str(node.target)]
        env[node] = new
    return torch.fx.GraphModule(gm, graph)  # node_copy keeps each node's meta (the user's lines)
