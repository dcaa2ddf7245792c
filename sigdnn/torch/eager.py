"""The sigdnn ops' Python entries (``sigdnn.torch.ops.sdpa``, ``delta_rule.gdn``, ...): eager calls skip the dispatcher.

``torch.ops.sigdnn.<op>`` reaches its Python kernel through torch's
dispatcher: the arguments boxed, the op's Autograd kernel, then the CPU /
CUDA kernel (about 11 us of a small op's 41 us on an H100; 25-29 us of
layer_norm's ~175 on the reference's CPU, where the entry's own checks
cost 2-7 us, about 23,000 instructions). An entry calls the kernel
itself, or the op's autograd.Function when a gradient is needed, where
the dispatcher could not do anything else: every tensor a plain CPU or
CUDA tensor (no subclass, fake or functorch wrapper, conjugate / negative
/ zero-tensor bit, meta or sparse tensor), no TorchFunctionMode, dispatch
mode, functorch transform, jit trace or profiler active. Any other call,
one under torch.compile included, goes through the op: tracers, modes
and profilers see ``sigdnn::<op>`` as before.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch

_C = torch._C


def _raw(*keys: str) -> int:
    """The raw bits of a dispatch key set (functionality bits, backend bits) holding ``keys``."""
    return functools.reduce(operator.or_, (_C.DispatchKeySet(getattr(_C.DispatchKey, k)).raw_repr() for k in keys))


# any bit outside these on a tensor (or in the thread's included keys) adds a dispatch step the entry would skip
_OTHER_TENSOR_KEYS = ~_raw(
    "CPU", "CUDA", "ADInplaceOrView", "AutogradCPU", "AutogradCUDA", "AutocastCPU", "AutocastCUDA"
)
_OTHER_INCLUDED_KEYS = ~_raw("BackendSelect", "ADInplaceOrView")


def plain(args: tuple, positions: tuple[int, ...]) -> bool:
    """Whether the dispatcher would take this call to the op's Autograd kernel and its CPU / CUDA kernel, and
    nothing else (``positions``: where the op's tensors are): then the entry may call them itself. Checked in
    turn: a __torch_function__ (a subclass's, a TorchFunctionMode's), the profiler, the thread's included keys
    (dispatch modes, functorch transforms, jit trace), each tensor's keys (Python subclasses, fake and
    functional tensors, functorch wrappers, conjugate / negative / zero-tensor bits, other devices and layouts)."""
    if _C._has_torch_function(args) or _C._autograd._profiler_enabled():
        return False
    if _C._dispatch_tls_local_include_set().raw_repr() & _OTHER_INCLUDED_KEYS:
        return False
    for i in positions:
        t = args[i]
        if t is not None and (not isinstance(t, torch.Tensor) or _C._dispatch_keys(t).raw_repr() & _OTHER_TENSOR_KEYS):
            return False
    return True


def needs_grad(args: tuple) -> bool:
    """Whether the op's Autograd kernel would record the call: grad mode on, an input requiring grad, autograd
    not excluded below it (as inside another op's kernel)."""
    return (
        torch.is_grad_enabled()
        and _C._any_requires_grad(*args)
        and not _C._dispatch_tls_is_dispatch_key_excluded(_C.DispatchKey.AutogradFunctionality)
    )


def entry(op: Any, kernel: Callable[..., Any], functions: Mapping[str, Any]) -> Callable[..., Any]:
    """The Python entry of the torch.library op ``op`` (an OpOverloadPacket) whose CPU / CUDA kernel is ``kernel``;
    ``functions`` maps an op name to its autograd.Function (its forward runs the kernel when given ``None`` after
    the op's inputs), looked up when a call needs a gradient: an op without one (a backward op) then goes through
    the dispatcher, as would a call with keywords or of the wrong arity (the op reports it). Trailing arguments
    the schema gives defaults may be left out: the entry fills them in."""
    name, schema = op.__name__, op.default._schema
    arity = len(schema.arguments)
    positions = tuple(i for i, a in enumerate(schema.arguments) if "Tensor" in str(a.type))
    defaults = tuple(a.default_value for a in schema.arguments if a.has_default_value())  # the trailing ones
    required = arity - len(defaults)

    def call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or kwargs or not required <= len(args) <= arity:
            return op(*args, **kwargs)
        if len(args) < arity:  # the schema's defaults, as the dispatcher would fill them
            args = (*args, *defaults[len(args) - required :])
        if not plain(args, positions):
            return op(*args)
        if not needs_grad(args):
            return kernel(*args)
        function = functions.get(name)
        return op(*args) if function is None else function.apply(*args, None)

    return functools.update_wrapper(call, kernel)
