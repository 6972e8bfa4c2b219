"""Captured steps: trace a training step once, then run it again without tracing.

The neuron counterpart of ``torch.cuda.CUDAGraph``::

    g = torch_neuron.NeuronGraph()
    train_step()                      # warm up: optimizer state exists, compiles
    torch_neuron.mark_step()
    with torch_neuron.graph(g):       # traced once, runs once, kept
        loss = train_step()
    for batch in batches:
        static_x.copy_(batch)         # new data goes into the tensors the step read
        g.replay()                    # no Python, no tracing: the compiled step runs
        print(loss.item())            # outputs land in the captured tensors

A lazy device traces every op of every step, which costs the main thread about
what eager PyTorch spends running a small model; a replayed step costs tens of
microseconds, so the step's speed is the compiled program's.

The step is static, as a CUDA graph is:

* Tensors alive before the capture that the step reads (parameters, optimizer
  state, a batch tensor) are read again at each replay, at their current
  values; tensors the step writes (parameters, gradients, the loss) receive
  the new values. Anything else the step read is kept as captured: a batch
  moved to the device inside the step, a Python scalar such as the learning
  rate (use a tensor, e.g. ``capturable=True`` optimizers, for one that
  changes), a constant.
* Warm up before capturing, so the optimizer's state tensors exist: state
  created inside the capture would start from its initial value at every
  replay, so an optimizer that creates state there makes the capture raise. An
  Adam-style optimizer counting its steps on the CPU (``capturable=False``)
  makes it warn: replays keep the captured bias correction.
* Inside the captured block nothing may sync the device: ``.item()``,
  ``.cpu()``, printing, ``mark_step``, reseeding and ops that fall back to the
  CPU raise. Random ops (dropout) draw anew at each replay.
* A view of a captured tensor taken before a replay does not see the replay's
  values; take views afterwards.
"""

from __future__ import annotations

import gc
import warnings

import torch

from . import _C

__all__ = ["NeuronGraph", "graph"]

def _is_capturing(index: int) -> bool:
    """Whether a step is being captured on neuron:index (the optimizer's step
    then leaves the device alone: the capture's end runs the step)."""
    return _C._is_capturing(index)


def _live_objects(index: int):
    """Every tensor on neuron:index that Python holds, with the gradients of
    leaf tensors (held by autograd, visible to Python only through .grad); and
    how many state entries each live optimizer holds."""
    found, optimizer_state = [], {}
    for obj in gc.get_objects():
        # type(), not isinstance(): that would read __class__, which some module
        # objects answer with a deprecation warning.
        kind = type(obj)
        if issubclass(kind, torch.optim.Optimizer):
            optimizer_state[id(obj)] = (obj, _state_entries(obj))
            continue
        if not issubclass(kind, torch.Tensor) or obj.device.type != "neuron":
            continue
        if obj.device.index not in (None, index):
            continue
        found.append(obj)
        if obj.is_leaf and obj.requires_grad and obj.grad is not None:
            found.append(obj.grad)
    return found, optimizer_state


def _state_entries(optimizer) -> int:
    return sum(len(entry) for entry in optimizer.state.values())


def _counts_on_the_host(entry) -> bool:
    step = entry.get("step") if isinstance(entry, dict) else None
    return isinstance(step, torch.Tensor) and step.device.type == "cpu" and any(
        isinstance(v, torch.Tensor) and v.device.type == "neuron" for v in entry.values())


class NeuronGraph:
    """A neuron training step captured with :class:`graph` and run again with
    :meth:`replay`."""

    def __init__(self):
        self._impl = _C._StepGraph()

    def capture_begin(self, device=None) -> None:
        """Runs what is pending on the device and starts capturing a step."""
        index = torch.neuron.current_device() if device is None else torch.neuron._index(device)
        tensors, self._optimizer_state = _live_objects(index)
        self._impl.begin(index, tensors)
        self._index = index

    def capture_end(self) -> None:
        """Ends the capture: the step runs once, as at mark_step, and is kept.

        Raises RuntimeError, keeping nothing, if an optimizer created state
        inside the capture: every replay would start it afresh."""
        tensors, optimizer_state = _live_objects(self._index)
        self._impl.end(tensors)
        for key, (optimizer, entries) in optimizer_state.items():
            name = type(optimizer).__name__
            if entries > self._optimizer_state.get(key, (None, 0))[1]:
                self._impl.reset()
                raise RuntimeError(
                    f"{name} created its state (momentum buffers, moment estimates, step "
                    "counts) inside the captured step, so every replay would start it afresh; "
                    "run one step before capturing, as for a CUDA graph (this step ran, "
                    "nothing was captured)")
            if any(_counts_on_the_host(entry) for entry in optimizer.state.values()):
                warnings.warn(
                    f"{name} counts its steps in a CPU tensor, so replays keep the captured "
                    "step's bias correction; pass capturable=True to keep the count on the "
                    "device", stacklevel=3)
        self._optimizer_state = {}

    def replay(self) -> None:
        """Queues the captured step on the current values of its tensors and
        returns; reading a result waits for it, as after mark_step."""
        self._impl.replay()

    def reset(self) -> None:
        """Drops the captured step and the buffers it keeps."""
        self._impl.reset()

    @property
    def captured(self) -> bool:
        return self._impl.captured

    def links(self) -> dict:
        """How the captured graph is bound: inputs read from tensors, inputs kept
        as captured, outputs written to tensors found after the capture, and
        other outputs (tensors the step made and dropped or returned)."""
        return self._impl.links()


class graph:
    """``with torch_neuron.graph(g):`` captures the block's step into ``g``.

    The block is traced as usual; at its end the step runs once (as at
    ``mark_step``) and ``g`` keeps it for :meth:`NeuronGraph.replay`. If the
    block raises, nothing is captured and the traced ops stay pending.
    """

    def __init__(self, neuron_graph: NeuronGraph, device=None):
        if not isinstance(neuron_graph, NeuronGraph):
            raise TypeError(f"expected a torch_neuron.NeuronGraph, got {type(neuron_graph).__name__}")
        self._graph, self._device = neuron_graph, device

    def __enter__(self) -> NeuronGraph:
        self._graph.capture_begin(self._device)
        return self._graph

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._graph._impl.abort()
            return
        self._graph.capture_end()
