"""The ops' Python entries (sigdnn/torch/eager.py): a plain eager call runs the kernel without the dispatcher; every
call something else could see (a tracer, a mode, a subclass, a profiler, a functorch transform) goes through
``torch.ops.sigdnn.<op>``; autograd, no_grad and inference_mode read as they do with the op."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import sigdnn.torch as st  # noqa: E402
from sigdnn.torch import eager  # noqa: E402

paths: list[str] = []  # each probe kernel call: "dispatcher" when reached through torch's dispatcher, else "direct"
contexts: list[bool] = []  # each time the probe's autograd.Function saved its context: whether x requires grad


def _record_path() -> None:
    """Whether torch's dispatcher called the kernel: a frame of torch/_ops.py (an op's or overload's __call__,
    a redispatch) between the kernel and this test module."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") != __name__:
        if Path(frame.f_code.co_filename).parts[-2:] == ("torch", "_ops.py"):
            paths.append("dispatcher")
            return
        frame = frame.f_back
    paths.append("direct")


@st.ops.define("test_eager_probe(Tensor x, Tensor? y, float s) -> Tensor")
def probe(x: torch.Tensor, y: torch.Tensor | None, s: float) -> torch.Tensor:
    _record_path()
    return (x if y is None else x + y) * s


@st.ops.define("test_eager_probe_no_autograd(Tensor x) -> Tensor")
def probe_no_autograd(x: torch.Tensor) -> torch.Tensor:
    return x.detach() * 2  # untracked, as a sigdnn kernel's outputs


for _name in ("test_eager_probe", "test_eager_probe_no_autograd"):
    torch.library.register_fake(f"sigdnn::{_name}", lambda x, *_: torch.empty_like(x), lib=st.ops._LIBRARY)
st.ops.register_autograd(
    "test_eager_probe",
    lambda ctx, g: (g * ctx.s, None if ctx.y_absent else g * ctx.s, None),
    lambda ctx, inputs, output: (
        contexts.append(inputs[0].requires_grad)
        or setattr(ctx, "s", inputs[2])
        or setattr(ctx, "y_absent", inputs[1] is None)
    ),
)


@pytest.fixture(autouse=True)
def fresh_paths() -> None:
    paths.clear()
    contexts.clear()


def inputs(grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(3, 4, requires_grad=grad), torch.randn(3, 4)


def test_a_plain_eager_call_runs_the_kernel_directly_with_the_ops_result():
    x, y = inputs()
    out = probe(x, y, 2.0)
    assert paths == ["direct"]
    assert torch.equal(out, torch.ops.sigdnn.test_eager_probe(x, y, 2.0)) and paths == ["direct", "dispatcher"]
    assert probe(x, None, 2.0).shape == x.shape and paths[-1] == "direct"  # an absent optional tensor
    assert probe(torch.nn.Parameter(x), y, 2.0).requires_grad and paths[-1] == "direct"
    with torch.inference_mode():
        frozen = torch.randn(3, 4)
    assert torch.equal(probe(x, frozen, 2.0), (x + frozen) * 2) and paths[-1] == "direct"  # no autograd keys
    assert eager.plain((x, y, 2.0), (0, 1))


def test_keywords_and_a_wrong_arity_go_to_the_op_which_reports_it():
    x, y = inputs()
    assert torch.equal(probe(x, y, s=2.0), (x + y) * 2) and paths == ["dispatcher"]
    with pytest.raises(RuntimeError, match="missing value for argument 's'"):
        probe(x, y)
    for extra in ((1,), ()):  # a positional argument or a keyword too many
        with pytest.raises(RuntimeError, match="expected at most 3 argument"):
            probe(x, y, 2.0, *extra, **({} if extra else {"s": 3.0}))
    assert len(paths) == 1


def test_a_tensor_argument_that_is_no_tensor_goes_to_the_op():
    with pytest.raises(RuntimeError, match="Expected a value of type 'Optional\\[Tensor\\]'"):
        probe(torch.ones(2), [1.0, 2.0], 2.0)
    assert paths == []


class Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func.name())
        return func(*args, **(kwargs or {}))


class FunctionRecorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class Subclass(torch.Tensor):
    """A plain Python subclass: torch.Tensor's own __torch_function__ handles it (and rewraps the outputs)."""


def seen_by_a_dispatch_mode() -> bool:
    with Recorder() as mode:
        probe(*inputs(), 2.0)
    return "sigdnn::test_eager_probe" in mode.seen


def seen_by_a_function_mode() -> bool:
    with FunctionRecorder() as mode:
        probe(*inputs(), 2.0)
    return any("test_eager_probe" in name for name in mode.seen)


def seen_through_a_subclass() -> bool:
    x, y = inputs()
    out = probe(x.as_subclass(Subclass), y, 2.0)
    return type(out) is Subclass and paths == ["dispatcher"]


def seen_by_a_fake_mode() -> bool:
    with FakeTensorMode():
        out = probe(*inputs(), 2.0)
    return isinstance(out, FakeTensor) and paths == []


def seen_through_fake_tensors_outside_their_mode() -> bool:
    mode = FakeTensorMode()
    out = probe(*(mode.from_tensor(t) for t in inputs()), 2.0)
    return isinstance(out, FakeTensor) and paths == []


def seen_through_meta_tensors() -> bool:
    out = probe(*(t.to("meta") for t in inputs()), 2.0)
    return out.is_meta and paths == []


def seen_through_a_negative_view() -> bool:
    x, y = inputs()
    return torch.equal(probe(torch._neg_view(x), y, 2.0), (y - x) * 2) and paths == ["dispatcher"]


def seen_by_the_profiler() -> bool:
    with torch.profiler.profile() as prof:
        probe(*inputs(), 2.0)
    return any(e.name == "sigdnn::test_eager_probe" for e in prof.events())


def seen_by_jit_trace() -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace is deprecated, not gone
        traced = torch.jit.trace(lambda x, y: probe(x, y, 2.0), inputs())
    return "sigdnn::test_eager_probe" in str(traced.graph)


def seen_under_vmap() -> bool:
    x, y = inputs()
    out = torch.vmap(lambda a, b: probe(a, b, 2.0))(x, y)  # torch's slow loop: no batching rule
    return torch.equal(out, (x + y) * 2) and "direct" not in paths


def seen_under_functionalize() -> bool:
    x, y = inputs()
    out = torch.func.functionalize(lambda a, b: probe(a, b, 2.0))(x, y)
    return torch.equal(out, (x + y) * 2) and "direct" not in paths


def seen_by_torch_compile() -> bool:
    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    x, y = inputs()
    out = torch.compile(lambda a, b: probe(a, b, 2.0) + 1, fullgraph=True, backend=backend)(x, y)
    targets = [str(node.target) for gm in graphs for node in gm.graph.nodes]
    return torch.equal(out, (x + y) * 2 + 1) and "sigdnn.test_eager_probe" in targets


@pytest.mark.parametrize(
    "seen",
    [seen_by_a_dispatch_mode, seen_by_a_function_mode, seen_through_a_subclass, seen_by_a_fake_mode,
     seen_through_fake_tensors_outside_their_mode, seen_through_meta_tensors, seen_through_a_negative_view,
     seen_by_the_profiler, seen_by_jit_trace, seen_under_vmap, seen_under_functionalize, seen_by_torch_compile],
    ids=lambda f: f.__name__,
)  # fmt: skip
def test_a_call_something_else_would_see_goes_through_the_op(seen):
    assert seen()


def test_a_gradient_flows_through_the_ops_autograd_function_without_the_dispatcher():
    x, y = inputs(grad=True)
    out = probe(x, y, 3.0)
    assert paths == ["direct"] and out.grad_fn.name() == "sigdnn_test_eager_probeBackward"
    out.sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 3.0)) and contexts == [True]
    twin = x.detach().clone().requires_grad_(True)
    torch.ops.sigdnn.test_eager_probe(twin, y, 3.0).sum().backward()
    assert torch.equal(twin.grad, x.grad) and paths == ["direct", "dispatcher"]


def test_no_autograd_graph_without_an_input_requiring_grad_or_under_no_grad():
    x, y = inputs()
    assert probe(x, y, 2.0).grad_fn is None
    x.requires_grad_(True)
    with torch.no_grad():
        assert not probe(x, y, 2.0).requires_grad
    assert contexts == []  # the op's autograd.Function ran for neither, as with the op
    with torch._C._AutoDispatchBelowAutograd():  # as inside another op's kernel: the op records nothing either
        assert not probe(x, y, 2.0).requires_grad
        assert not torch.ops.sigdnn.test_eager_probe(x, y, 2.0).requires_grad
    assert paths == ["direct", "direct", "direct", "dispatcher"]


def test_inference_mode_gives_inference_tensors_as_the_op_does():
    x, y = inputs()
    with torch.inference_mode():
        mine, theirs = probe(x, y, 2.0), torch.ops.sigdnn.test_eager_probe(x, y, 2.0)
    assert mine.is_inference() and theirs.is_inference() and torch.equal(mine, theirs)


def test_an_op_without_an_autograd_function_goes_to_the_dispatcher_when_a_gradient_is_needed():
    """As a backward op under create_graph: torch's autograd fallback marks the outputs (its backward warns)."""
    x = torch.randn(3, requires_grad=True)
    assert not probe_no_autograd(x.detach()).requires_grad
    mine, theirs = probe_no_autograd(x), torch.ops.sigdnn.test_eager_probe_no_autograd(x)
    assert mine.requires_grad and mine.grad_fn.name() == theirs.grad_fn.name()


def test_layer_norm_through_its_entry_gives_the_ops_bits_and_gradients():
    x, w, b = torch.randn(4, 6, dtype=torch.float64), torch.randn(6, dtype=torch.float64), torch.randn(6)
    b = b.double()
    mine, theirs = st.ops.layer_norm(x, w, b, 1e-5), torch.ops.sigdnn.layer_norm(x, w, b, 1e-5)
    assert all(torch.equal(m, t) for m, t in zip(mine, theirs, strict=True))
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    twins = [t.clone().requires_grad_(True) for t in (x, w, b)]
    st.ops.layer_norm(*leaves, 1e-5)[0].sum().backward()
    torch.ops.sigdnn.layer_norm(*twins, 1e-5)[0].sum().backward()
    assert all(torch.equal(m.grad, t.grad) for m, t in zip(leaves, twins, strict=True))
