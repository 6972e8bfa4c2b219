"""``torch.distributed`` on neuron tensors: the ``neuron`` c10d backend.

Registered at ``import torch_neuron``, so any of these work::

    dist.init_process_group("neuron")                  # neuron and CPU tensors
    dist.init_process_group("cpu:gloo,neuron:neuron")
    dist.init_process_group()                          # picks "neuron" for neuron tensors

A collective on neuron tensors is not run when it is called: it is traced into
the step's graph as an op (``neuron::all_reduce`` and its kin,
csrc/runtime/collectives.h), like any other op, so a DDP step with its bucketed
gradient all-reduces stays one graph. When the graph runs, the device queue
runs each collective on the host buffers behind device memory, over a gloo
process group of its own; every rank runs its collectives exactly once and in
the order it traced them (as random draws are run). Collectives on CPU tensors
go over a second gloo group from the calling thread, so the two never
interleave on one channel.

Work handles (``async_op=True``) complete at once: the collective's result is
a pending value of the graph, and reading it waits for the graph, as reading a
CUDA tensor waits for its stream. ``barrier()`` blocks until every rank has
reached it and has run the collectives it traced before it.

Under ``torchrun`` each process takes the neuron device ``LOCAL_RANK`` when it
has one (``TORCH_NEURON_NUM_DEVICES`` > LOCAL_RANK); ``torch.neuron.set_device``
picks another.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
from typing import List, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, ReduceOp

from . import _C

__all__ = ["NeuronProcessGroup"]

BACKEND = "neuron"

_RED = ReduceOp.RedOpType
_REDUCE_NAMES = {
    _RED.SUM: "sum",
    _RED.AVG: "avg",
    _RED.PRODUCT: "product",
    _RED.MIN: "min",
    _RED.MAX: "max",
    _RED.BAND: "band",
    _RED.BOR: "bor",
    _RED.BXOR: "bxor",
}
_BITWISE = ("band", "bor", "bxor")

# Private gloo groups need names every rank agrees on: groups are created in
# the same order on every rank (torch.distributed requires it), so a counter is.
_group_ids = itertools.count()


def _done(result) -> "dist.Work":
    """A work handle that has completed with ``result``."""
    future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)


def _writing(tensors: Sequence[torch.Tensor]):
    """No autograd (c10d's collectives are not differentiable), and the level
    the written tensors live at. User code holds functional tensors; C++
    callers (DDP's start-up checks) can hand in the plain lazy tensors below
    functionalization, which ATen's ``to()`` returns for PrivateUse1 devices:
    those are written below it too."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.no_grad())
    if not all(torch._is_functional_tensor(t) for t in tensors):
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
        stack.enter_context(torch._C._ExcludeDispatchKeyGuard(keys))
    return stack


def _reduce_name(op, tensors: Sequence[torch.Tensor]) -> str:
    kind = op.op if isinstance(op, ReduceOp) else op
    if kind == _RED.PREMUL_SUM:
        raise ValueError("ReduceOp.PREMUL_SUM is NCCL's; the neuron backend does not support it "
                         "(multiply by the factor, then reduce with ReduceOp.SUM)")
    name = _REDUCE_NAMES.get(kind)
    if name is None:
        raise ValueError(f"unsupported reduce op {op!r} for the neuron backend")
    for t in tensors:
        if name == "avg" and not (t.is_floating_point() or t.is_complex()):
            raise ValueError(f"ReduceOp.AVG needs a floating-point tensor, got {t.dtype}")
        if name in _BITWISE and (t.is_floating_point() or t.is_complex()):
            raise ValueError(f"ReduceOp.{name.upper()} needs an integer or bool tensor, got {t.dtype}")
    return name


def _copy_rows(outputs: Sequence[torch.Tensor], rows: torch.Tensor) -> None:
    """Row r of ``rows`` into ``outputs[r]``, in its shape."""
    for r, out in enumerate(outputs):
        out.copy_(rows[r].view(out.shape))


class NeuronProcessGroup(ProcessGroup):
    """A process group whose collectives on neuron tensors are graph ops.

    Thread-compatible, like every c10d process group: collectives are issued
    from the thread that traces; the device queue thread runs them.
    """

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._group_name = ""
        self._group_desc = ""
        ident = next(_group_ids)
        gloo = dist.ProcessGroupGloo
        # The queue threads' channel, found by name from C++ when a graph runs.
        # The name is part of the traced graphs (an op argument), so it is the
        # same in every process: ranks and reruns share their compiled graphs.
        queue_store = dist.PrefixStore(f"neuron/queue/{ident}/", store)
        self._queue_gloo = gloo(queue_store, rank, size, timeout)
        self._queue_group = ProcessGroup(queue_store, rank, size)
        self._queue_group._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO,
                                            self._queue_gloo)
        self._queue_group._set_default_backend(ProcessGroup.BackendType.GLOO)
        self._queue_name = f"neuron-queue-{ident}"
        torch._C._distributed_c10d._register_process_group(self._queue_name, self._queue_group)
        # CPU tensors' channel, driven by the calling thread.
        self._host_gloo = gloo(dist.PrefixStore(f"neuron/host/{ident}/", store), rank, size, timeout)

    # --- identity -------------------------------------------------------------

    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return BACKEND

    def getGroupName(self) -> str:  # noqa: N802
        return self._group_name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._group_name = name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc

    def shutdown(self) -> None:
        """``destroy_process_group``: first runs what is traced and waits for
        it (this group's last collectives may be among it, and peers wait for
        them), then retires the group's channel."""
        from . import device

        if not device._is_in_bad_fork():
            _C._finish_pending_work()
        try:
            torch._C._distributed_c10d._unregister_process_group(self._queue_name)
        except Exception:  # already gone (interpreter shutdown)
            pass

    # --- helpers --------------------------------------------------------------

    def _on_neuron(self, what: str, tensors: Sequence[torch.Tensor]) -> bool:
        """True when every tensor is a neuron tensor, False when every one is
        on the CPU; anything else is refused."""
        types = {t.device.type for t in tensors}
        if types <= {"neuron"} and types:
            return True
        if types <= {"cpu"}:
            return False
        raise ValueError(f"{what}: the neuron backend takes neuron or CPU tensors, not a mix "
                         f"({', '.join(sorted(str(t.device) for t in tensors))})")

    def _one(self, what: str, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(f"{what} takes one tensor per process on the neuron backend, "
                             f"got {len(tensors)}")
        return tensors[0]

    def _all_reduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        return torch.ops.neuron.all_reduce(t, op, self._queue_name)

    def _all_gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        """(size, numel): row r is rank r's ``t``, flattened."""
        return torch.ops.neuron.all_gather_into_tensor(t.reshape(1, -1), self._size, self._queue_name)

    def _reduce_scatter_rows(self, rows: torch.Tensor, op: str) -> torch.Tensor:
        """(1, numel): this rank's row of ``rows`` (size, numel), reduced over the ranks."""
        return torch.ops.neuron.reduce_scatter_tensor(rows, op, self._size, self._queue_name)

    # --- collectives ------------------------------------------------------------

    def allreduce(self, tensors: List[torch.Tensor], opts=None):
        opts = opts or dist.AllreduceOptions()
        if not self._on_neuron("all_reduce", tensors):
            return self._host_gloo.allreduce(tensors, opts)
        t = self._one("all_reduce", tensors)
        op = _reduce_name(opts.reduceOp, tensors)
        with _writing(tensors):
            t.copy_(self._all_reduce(t, op))
        return _done(tensors)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        if not self._on_neuron("all_reduce_coalesced", tensors):
            return self._host_gloo.allreduce_coalesced(tensors, opts)
        op = _reduce_name(opts.reduceOp, tensors)
        with _writing(tensors):
            for t in tensors:
                t.copy_(self._all_reduce(t, op))
        return _done(tensors)

    def reduce(self, tensors: List[torch.Tensor], opts=None):
        opts = opts or dist.ReduceOptions()
        if not self._on_neuron("reduce", tensors):
            return self._host_gloo.reduce(tensors, opts)
        t = self._one("reduce", tensors)
        op = _reduce_name(opts.reduceOp, tensors)
        with _writing(tensors):
            reduced = self._all_reduce(t, op)  # every rank takes part; the root keeps it
            if self._rank == opts.rootRank:
                t.copy_(reduced)
        return _done(tensors)

    def broadcast(self, tensors: List[torch.Tensor], opts=None):
        opts = opts or dist.BroadcastOptions()
        if not self._on_neuron("broadcast", tensors):
            return self._host_gloo.broadcast(tensors, opts)
        t = self._one("broadcast", tensors)
        with _writing(tensors):
            t.copy_(torch.ops.neuron.broadcast(t, opts.rootRank, self._queue_name))
        return _done(tensors)

    def allgather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor], opts=None):
        opts = opts or dist.AllgatherOptions()
        if not self._on_neuron("all_gather", list(inputs) + [o for out in output_lists for o in out]):
            return self._host_gloo.allgather(output_lists, inputs, opts)
        t = self._one("all_gather", inputs)
        outputs = self._one("all_gather", output_lists)
        if len(outputs) != self._size:
            raise ValueError(f"all_gather needs {self._size} output tensors, got {len(outputs)}")
        with _writing(outputs):
            _copy_rows(outputs, self._all_gather_rows(t))
        return _done(output_lists)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        opts = opts or dist.AllgatherOptions()
        if not self._on_neuron("all_gather_into_tensor", [output, input]):
            return self._host_gloo._allgather_base(output, input, opts)
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"all_gather_into_tensor: the output holds {output.numel()} elements, "
                             f"expected {self._size} x {input.numel()}")
        with _writing([output]):
            output.copy_(self._all_gather_rows(input).view(output.shape))
        return _done([output])

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        for output, input in zip(outputs, inputs):
            self.all_gather_single(output, input, opts)
        return _done(outputs)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        for outputs, input in zip(output_lists, inputs):
            self.allgather([outputs], [input], opts)
        return _done(output_lists)

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or dist.GatherOptions()
        if not self._on_neuron("gather", inputs):
            return self._host_gloo.gather(output_lists, inputs, opts)
        t = self._one("gather", inputs)
        with _writing([o for out in output_lists for o in out]):
            rows = self._all_gather_rows(t)  # every rank takes part; the root keeps it
            if self._rank == opts.rootRank:
                _copy_rows(self._one("gather", output_lists), rows)
        return _done(output_lists)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ScatterOptions()
        if not self._on_neuron("scatter", outputs):
            return self._host_gloo.scatter(outputs, input_lists, opts)
        out = self._one("scatter", outputs)
        with _writing(outputs):
            if self._rank == opts.rootRank:
                rows = torch.stack([x.reshape(-1) for x in self._one("scatter", input_lists)])
            else:
                rows = torch.zeros(self._size, out.numel(), dtype=out.dtype, device=out.device)
            rows = torch.ops.neuron.broadcast(rows, opts.rootRank, self._queue_name)
            out.copy_(rows[self._rank].view(out.shape))
        return _done(outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        flat_inputs = [x for inputs in input_lists for x in inputs]
        if not self._on_neuron("reduce_scatter", list(outputs) + flat_inputs):
            return self._host_gloo.reduce_scatter(outputs, input_lists, opts)
        out = self._one("reduce_scatter", outputs)
        inputs = self._one("reduce_scatter", input_lists)
        if len(inputs) != self._size:
            raise ValueError(f"reduce_scatter needs {self._size} input tensors, got {len(inputs)}")
        op = _reduce_name(opts.reduceOp, outputs)
        with _writing(outputs):
            mine = self._reduce_scatter_rows(torch.stack([x.reshape(-1) for x in inputs]), op)
            out.copy_(mine.view(out.shape))
        return _done(outputs)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        if not self._on_neuron("reduce_scatter_tensor", [output, input]):
            return self._host_gloo._reduce_scatter_base(output, input, opts)
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"reduce_scatter_tensor: the input holds {input.numel()} elements, "
                             f"expected {self._size} x {output.numel()}")
        op = _reduce_name(opts.reduceOp, [output])
        with _writing([output]):
            output.copy_(self._reduce_scatter_rows(input.reshape(self._size, -1), op).view(output.shape))
        return _done([output])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        for output, input in zip(outputs, inputs):
            self.reduce_scatter_single(output, input, opts)
        return _done(outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        if not self._on_neuron("all_to_all_single", [output, input]):
            return self._host_gloo.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        with _writing([output]):
            result = torch.ops.neuron.all_to_all_single(
                input, list(output_split_sizes), list(input_split_sizes), self._queue_name)
            output.copy_(result.view(output.shape))
        return _done([output])

    def alltoall(self, outputs, inputs, opts=None):
        opts = opts or dist.AllToAllOptions()
        if not self._on_neuron("all_to_all", list(outputs) + list(inputs)):
            return self._host_gloo.alltoall(outputs, inputs, opts)
        with _writing(outputs):
            flat = torch.cat([x.reshape(-1) for x in inputs])
            out_splits = [o.numel() for o in outputs]
            result = torch.ops.neuron.all_to_all_single(
                flat, out_splits, [x.numel() for x in inputs], self._queue_name)
            for out, piece in zip(outputs, result.split(out_splits)):
                out.copy_(piece.view(out.shape))
        return _done(outputs)

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0):
        if not self._on_neuron("send", tensors):
            return self._host_gloo.send(tensors, dst, tag)
        with _writing([]):
            torch.ops.neuron.send(self._one("send", tensors), dst, tag, self._queue_name)
        return _done(tensors)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0):
        if not self._on_neuron("recv", tensors):
            return self._host_gloo.recv(tensors, src, tag)
        t = self._one("recv", tensors)
        with _writing(tensors):
            t.copy_(torch.ops.neuron.recv(t, src, tag, self._queue_name))
        return _done(tensors)

    # The names of torch releases before all_gather_single and its kin.
    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single

    def recv_anysource(self, tensors, tag: int = 0):
        raise NotImplementedError("recv from any source is not supported by the neuron backend: "
                                  "name the source rank")

    def barrier(self, opts=None):
        """Returns once every rank has reached the barrier and run the
        collectives it traced before it (a traced all-reduce, read back)."""
        device = torch.device("neuron", torch.neuron.current_device())
        with _writing([]):
            flag = torch.ones(1, device=device)
            self._all_reduce(flag, "sum").item()
        return _done(None)


def _create(store, rank: int, size: int, timeout: datetime.timedelta) -> NeuronProcessGroup:
    return NeuronProcessGroup(store, rank, size, timeout)


def _take_local_rank_device() -> None:
    """Under torchrun (LOCAL_RANK set), the process's current device is its
    local rank's, when this process emulates that many devices."""
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is None or not local_rank.isdigit():
        return
    if int(local_rank) < _C._device_count():
        torch.neuron.set_device(int(local_rank))


# Functional collectives (torch.distributed._functional_collectives, which
# DTensor's redistribute and full_tensor(), tensor parallelism and FSDP2's
# state dicts use): ``_c10d_functional::all_reduce`` and its kin return a new
# tensor and are completed by ``wait_tensor``. Their C++ kernels find a
# collective's work by the result's storage, which a neuron tensor does not
# expose. On neuron tensors they are the backend's own traced collectives,
# which complete in trace order at the next sync, so wait_tensor returns its
# argument. The functional forms are registered for PrivateUse1: functionalization
# hands them the traced values below it (which the process group takes, see
# _writing), from any caller, a __torch_dispatch__ (AsyncCollectiveTensor's
# wait) included. The in-place and out= forms, which functionalization refuses
# for custom ops, are registered above it, for AutogradPrivateUse1 (the ops
# have no autograd formula).

def _functional_group(group_name):
    if isinstance(group_name, dist.ProcessGroup):
        return group_name
    return dist.distributed_c10d._resolve_process_group(group_name)


def _functional_op(reduce_op: str):
    try:
        return getattr(ReduceOp, reduce_op.upper())
    except AttributeError:
        raise ValueError(f"unknown reduce op {reduce_op!r} for a functional collective") from None


def _gathered_shape(t: torch.Tensor, group_size: int):
    return (t.shape[0] * group_size,) + tuple(t.shape[1:])


def _scattered_shape(t: torch.Tensor, group_size: int):
    if t.shape[0] % group_size:
        raise ValueError(f"reduce_scatter_tensor: dim 0 of the input ({t.shape[0]}) is not "
                         f"divisible by the group size ({group_size})")
    return (t.shape[0] // group_size,) + tuple(t.shape[1:])


def _fc_all_reduce_(t, reduce_op, group_name):
    dist.all_reduce(t, op=_functional_op(reduce_op), group=_functional_group(group_name))
    return t


def _fc_all_reduce(t, reduce_op, group_name):
    return _fc_all_reduce_(t.clone(), reduce_op, group_name)


def _fc_all_gather_out(t, group_size, group_name, *, out):
    dist.all_gather_into_tensor(out, t.contiguous(), group=_functional_group(group_name))
    return out


def _fc_all_gather(t, group_size, group_name):
    out = t.new_empty(_gathered_shape(t, group_size))
    return _fc_all_gather_out(t, group_size, group_name, out=out)


def _fc_reduce_scatter_out(t, reduce_op, group_size, group_name, *, out):
    dist.reduce_scatter_tensor(out, t.contiguous(), op=_functional_op(reduce_op),
                               group=_functional_group(group_name))
    return out


def _fc_reduce_scatter(t, reduce_op, group_size, group_name):
    out = t.new_empty(_scattered_shape(t, group_size))
    return _fc_reduce_scatter_out(t, reduce_op, group_size, group_name, out=out)


def _fc_all_to_all_single(t, output_split_sizes, input_split_sizes, group_name):
    rows = sum(output_split_sizes) if output_split_sizes else t.shape[0]
    out = t.new_empty((rows,) + tuple(t.shape[1:]))
    dist.all_to_all_single(out, t.contiguous(), list(output_split_sizes) or None,
                           list(input_split_sizes) or None, group=_functional_group(group_name))
    return out


def _fc_broadcast_(t, src, group_name):
    dist.broadcast(t, group_src=src, group=_functional_group(group_name))
    return t


def _fc_broadcast(t, src, group_name):
    return _fc_broadcast_(t.clone(), src, group_name)


_FUNCTIONAL_KERNELS = {
    "all_reduce": _fc_all_reduce,
    "all_reduce_": _fc_all_reduce_,
    "all_reduce_coalesced": lambda ts, op, g: [_fc_all_reduce(t, op, g) for t in ts],
    "all_reduce_coalesced_": lambda ts, op, g: [_fc_all_reduce_(t, op, g) for t in ts],
    "all_gather_into_tensor": _fc_all_gather,
    "all_gather_into_tensor_out": _fc_all_gather_out,
    "all_gather_into_tensor_coalesced": lambda ts, n, g: [_fc_all_gather(t, n, g) for t in ts],
    "reduce_scatter_tensor": _fc_reduce_scatter,
    "reduce_scatter_tensor_out": _fc_reduce_scatter_out,
    "reduce_scatter_tensor_coalesced": lambda ts, op, n, g: [_fc_reduce_scatter(t, op, n, g) for t in ts],
    "all_to_all_single": _fc_all_to_all_single,
    "broadcast": _fc_broadcast,
    "broadcast_": _fc_broadcast_,
    "wait_tensor": lambda t: t,
}

_functional_lib = None


def _install_functional_collectives() -> None:
    global _functional_lib
    if _functional_lib is not None or not hasattr(torch.ops, "_c10d_functional"):
        return
    _functional_lib = torch.library.Library("_c10d_functional", "IMPL")
    for name, kernel in _FUNCTIONAL_KERNELS.items():
        if hasattr(torch.ops._c10d_functional, name):
            writes = name.endswith(("_", "_out"))
            _functional_lib.impl(name, kernel, "AutogradPrivateUse1" if writes else "PrivateUse1")


def install() -> None:
    """Registers the ``neuron`` backend with torch.distributed (at import)."""
    if not dist.is_available() or BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, devices=["neuron"])
    _install_functional_collectives()
    _take_local_rank_device()
