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
  created inside the capture starts from its initial value at every replay.
* Inside the captured block nothing may sync the device: ``.item()``,
  ``.cpu()``, printing, ``mark_step``, reseeding and ops that fall back to the
  CPU raise. Random ops (dropout) draw anew at each replay.
* A view of a captured tensor taken before a replay does not see the replay's
  values; take views afterwards.
"""

from __future__ import annotations

import gc

import torch

from . import _C

__all__ = ["NeuronGraph", "graph"]


def _live_neuron_tensors(index: int) -> list:
    """Every tensor on neuron:index that Python holds, with the gradients of
    leaf tensors (held by autograd, visible to Python only through .grad)."""
    found = []
    for obj in gc.get_objects():
        # type(), not isinstance(): that would read __class__, which some module
        # objects answer with a deprecation warning.
        if not issubclass(type(obj), torch.Tensor) or obj.device.type != "neuron":
            continue
        if obj.device.index not in (None, index):
            continue
        found.append(obj)
        if obj.is_leaf and obj.requires_grad and obj.grad is not None:
            found.append(obj.grad)
    return found


class NeuronGraph:
    """A neuron training step captured with :class:`graph` and run again with
    :meth:`replay`."""

    def __init__(self):
        self._impl = _C._StepGraph()

    def capture_begin(self, device=None) -> None:
        """Runs what is pending on the device and starts capturing a step."""
        index = torch.neuron.current_device() if device is None else torch.neuron._index(device)
        self._impl.begin(index, _live_neuron_tensors(index))
        self._index = index

    def capture_end(self) -> None:
        """Ends the capture: the step runs once, as at mark_step, and is kept."""
        self._impl.end(_live_neuron_tensors(self._index))

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
