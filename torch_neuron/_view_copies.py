"""Direct calls of the view-copy ops (``torch.split_with_sizes_copy``,
``torch.narrow_copy``, ``aten.view_copy.out``...) on neuron tensors.

Functionalization replays every view of a neuron tensor as the view's ``*_copy``
form, and the tracer gives such a result the view's strides and offset, so that
``x.t().stride()`` reads as on the CPU (functionalization takes a view's
metadata from the value below it). Both the view replay and a user's direct
``*_copy`` call reach the tracer the same way, so a direct call's result got
the view's strides too, where the CPU returns a new contiguous tensor:
``split_with_sizes_copy(x, [4, 2], dim=1)`` reported strides ``(6, 1)``, and its
``out=`` form (FSDP2 unshards parameters with it) failed writing into views of
a flat buffer ("view size is not compatible with input tensor's size and
stride").

``install()`` gives each view-copy op a Functionalize kernel that, for a call
on neuron tensors, spells out what the op means: the view (which
functionalization replays as before), then a contiguous clone; the ``out=``
forms copy that into ``out`` (resized as the CPU's ``out=`` convention says).
Functionalization's own replays call the ``*_copy`` ops below this key and are
unchanged. A call without a neuron tensor goes to the kernel that was there
(PyTorch's functionalization fallback), exactly as without torch_neuron: the
kernel must sit on the Functionalize key, the first one a neuron tensor meets
in every mode (AutogradPrivateUse1 is skipped under inference_mode), so it
acts only on neuron tensors (issue 48).
"""

from __future__ import annotations

import warnings

import torch

# View ops whose *_copy forms are plain strided copies (sparse, nested and
# complex-view forms keep functionalization's generic handling).
_VIEWS = (
    "alias", "as_strided", "detach", "diagonal", "expand", "narrow", "permute", "select",
    "slice", "split", "split_with_sizes", "squeeze", "t", "transpose", "unbind", "unfold",
    "unsqueeze", "view", "_reshape_alias",
)

_lib = None


def _contiguous(result):
    if isinstance(result, torch.Tensor):
        return result.clone(memory_format=torch.contiguous_format)
    return [t.clone(memory_format=torch.contiguous_format) for t in result]


def _functional_kernel(view):
    def kernel(*args, **kwargs):
        return _contiguous(view(*args, **kwargs))
    return kernel


def _resize_output(out, shape):
    # The CPU's out= convention: a wrong-sized out is resized (its deprecation
    # warning for a non-empty one comes from the out= checks at the call).
    if out.shape != shape:
        out.resize_(shape)


def _out_kernel(copy_name, view):
    def kernel(*args, out, **kwargs):
        result = _contiguous(view(*args, **kwargs))
        if isinstance(result, torch.Tensor):
            _resize_output(out, result.shape)
            out.copy_(result)
            return out
        if len(out) != len(result):
            raise RuntimeError(f"{copy_name}() expected an out= argument of size {len(result)}, "
                               f"got size {len(out)}")
        for o, r in zip(out, result):
            _resize_output(o, r.shape)
            o.copy_(r)
        return None
    return kernel


def install() -> None:
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        # "Overriding a previously registered kernel": functionalization's own.
        warnings.simplefilter("ignore")
        _install_kernels(_lib)


def _has_neuron_tensor(args, kwargs) -> bool:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.device.type == "neuron":
                return True
        elif isinstance(value, (list, tuple)):
            if any(isinstance(v, torch.Tensor) and v.device.type == "neuron" for v in value):
                return True
    return False


def _neuron_only(kernel, original):
    """`kernel` for calls with a neuron tensor, `original` (the kernel that was
    there) for every other call."""
    def guarded(keyset, *args, **kwargs):
        if _has_neuron_tensor(args, kwargs):
            return kernel(*args, **kwargs)
        return original.call_boxed(keyset, *args, **kwargs)
    return guarded


def _install_kernels(lib) -> None:
    for view_name in _VIEWS:
        copy_packet = getattr(torch.ops.aten, view_name + "_copy", None)
        view_packet = getattr(torch.ops.aten, view_name, None)
        if copy_packet is None or view_packet is None:
            continue
        for overload in copy_packet.overloads():
            copy_op = getattr(copy_packet, overload)
            is_out = overload == "out" or overload.endswith("_out")
            view_overload = ("default" if overload == "out" else overload[:-4]) if is_out else overload
            if view_overload not in view_packet.overloads():
                continue
            view_op = getattr(view_packet, view_overload)
            name = copy_op._schema.name.split("::")[1]
            full = name if overload == "default" else f"{name}.{overload}"
            kernel = _out_kernel(name, view_op) if is_out else _functional_kernel(view_op)
            original = torch.library.get_kernel(copy_op, "Functionalize")
            lib.impl(full, _neuron_only(kernel, original), "Functionalize", with_keyset=True)
