"""sigdnn's torch ops against torch's own in float64: forward, backward, the fake kernels, torch.compile."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import sigdnn.torch as st  # noqa: E402

gen = torch.Generator().manual_seed(0)


def rand(*dims: int, grad: bool = True) -> torch.Tensor:
    return torch.randn(*dims, dtype=torch.float64, generator=gen).requires_grad_(grad)


def twins(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("heads", "causal", "scale"), [((3, 3), False, None), ((4, 2), True, 0.3), ((2, 1), True, None)]
)
def test_sdpa_forward_and_backward(heads, causal, scale):
    q, k, v = rand(2, heads[0], 5, 4), rand(2, heads[1], 7, 4), rand(2, heads[1], 7, 3)
    tq, tk, tv = twins(q, k, v)
    o = st.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
    expect = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, scale=scale, enable_gqa=True)
    close(o, expect)
    grad = rand(*o.shape, grad=False)
    o.backward(grad)
    expect.backward(grad)
    for mine, theirs in ((q, tq), (k, tk), (v, tv)):
        close(mine.grad, theirs.grad)


def test_layer_norm_forward_and_backward():
    x, w, b = rand(3, 4, 6), rand(6), rand(6)
    tx, tw, tb = twins(x, w, b)
    y = st.layer_norm(x, (6,), w, b, eps=1e-5)
    expect = F.layer_norm(tx, (6,), tw, tb, eps=1e-5)
    close(y, expect)
    grad = rand(3, 4, 6, grad=False)
    y.backward(grad)
    expect.backward(grad)
    for mine, theirs in ((x, tx), (w, tw), (b, tb)):
        close(mine.grad, theirs.grad)


@pytest.mark.parametrize(
    ("dims", "kernel", "stride", "padding", "dilation"),
    [
        ((2, 3, 9, 8), (4, 3, 3, 3), 1, 1, 1),
        ((2, 3, 9, 9), (5, 3, 3, 2), 2, (1, 0), (1, 2)),
        ((1, 2, 11), (3, 2, 4), 3, 2, 1),
    ],
)
def test_conv_forward_dgrad_wgrad(dims, kernel, stride, padding, dilation):
    x, w, bias = rand(*dims), rand(*kernel), rand(kernel[0])
    tx, tw, tb = twins(x, w, bias)
    y = st.conv(x, w, bias, stride=stride, padding=padding, dilation=dilation)
    torch_conv = F.conv2d if len(dims) == 4 else F.conv1d
    expect = torch_conv(tx, tw, tb, stride=stride, padding=padding, dilation=dilation)
    close(y, expect)
    grad = rand(*y.shape, grad=False)
    y.backward(grad)
    expect.backward(grad)
    for mine, theirs in ((x, tx), (w, tw), (bias, tb)):
        close(mine.grad, theirs.grad)


@pytest.mark.parametrize("dims", [(2, 3, 7, 6), (1, 2, 3, 5, 4)])
def test_a_channels_last_conv_keeps_the_memory_format_as_torch_does(dims):
    """Output and gradients in the input's memory format (the GPU's convs read and write channels-last; torch's
    CUDA convs do the same, its CPU float64 ones not always), with fake kernels that say the same strides."""
    fmt = torch.channels_last if len(dims) == 4 else torch.channels_last_3d
    x = rand(*dims, grad=False).contiguous(memory_format=fmt).requires_grad_(True)
    w = rand(4, dims[1], *(3,) * (len(dims) - 2), grad=False).contiguous(memory_format=fmt).requires_grad_(True)
    tx, tw = twins(x, w)
    y = st.conv(x, w, padding=1)
    expect = (F.conv2d if len(dims) == 4 else F.conv3d)(tx, tw, padding=1)
    assert y.is_contiguous(memory_format=fmt) and not y.is_contiguous()
    close(y, expect)
    grad = rand(*y.shape, grad=False).contiguous(memory_format=fmt)
    y.backward(grad)
    expect.backward(grad)
    close(x.grad, tx.grad)
    close(w.grad, tw.grad)
    assert x.grad.is_contiguous(memory_format=fmt)
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    fx, fw = mode.from_tensor(x.detach()), mode.from_tensor(w.detach())
    ones = [1] * (len(dims) - 2)
    with mode:
        fake = torch.ops.sigdnn.conv(fx, fw, ones, ones, ones)
    assert fake.stride() == y.stride()


def test_a_call_needing_no_gradient_runs_its_kernel_without_redispatching(monkeypatch):
    """The Autograd kernel calls the CPU kernel itself when no gradient is needed; when one is, or under a
    dispatch mode (fake tensors, as tracers use), it redispatches. Both give the same bits."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = torch.ops.sigdnn.layer_norm.default
    keys = []
    original = op.redispatch
    monkeypatch.setattr(op, "redispatch", lambda keyset, *args: keys.append(keyset) or original(keyset, *args))
    x, w, b = rand(3, 4, grad=False), rand(4, grad=False), rand(4, grad=False)
    direct = torch.ops.sigdnn.layer_norm(x, w, b, 1e-5)
    with torch.no_grad():
        torch.ops.sigdnn.layer_norm(x, w.clone().requires_grad_(), b, 1e-5)
    assert keys == []
    recorded = torch.ops.sigdnn.layer_norm(x, w.clone().requires_grad_(), b, 1e-5)
    assert len(keys) == 1 and recorded[0].requires_grad
    for mine, theirs in zip(direct, recorded, strict=True):
        assert torch.equal(mine, theirs.detach())
    with FakeTensorMode() as mode:
        fake = torch.ops.sigdnn.layer_norm(*(mode.from_tensor(t) for t in (x, w, b)), 1e-5)
    assert len(keys) == 2 and fake[0].shape == x.shape


seen_needs = []


@st.ops.define("test_probe_scaled(Tensor x, Tensor y, float s) -> Tensor")
def _probe(x: torch.Tensor, y: torch.Tensor, s: float) -> torch.Tensor:
    return (x + y) * s


st.ops.register_autograd(
    "test_probe_scaled",
    lambda ctx, g: seen_needs.append(ctx.needs_input_grad) or (g * ctx.s, g * ctx.s, None),
    lambda ctx, inputs, output: setattr(ctx, "s", inputs[2]),
)


def test_a_backward_sees_needs_input_grad_as_the_ops_inputs():
    """The key set the Autograd kernel passes through apply is no input of the op's: backward does not see it,
    a second backward through the same graph neither."""
    x, y = rand(3), rand(3, grad=False)
    out = torch.ops.sigdnn.test_probe_scaled(x, y, 2.0).sum()
    out.backward(retain_graph=True)
    out.backward()
    assert seen_needs == [(True, False, False)] * 2
    assert torch.equal(x.grad, torch.full((3,), 4.0, dtype=torch.float64)) and y.grad is None
    assert out.grad_fn.next_functions[0][0].name() == "sigdnn_test_probe_scaledBackward"


def test_every_sigdnn_dtype_names_its_torch_dtype_for_the_outputs():
    """A cached graph allocates its outputs in the torch dtype of each output's sigdnn dtype (fp8 names differ)."""
    from sigdnn.dtypes import DataType, as_data_type
    from sigdnn.torch.cache import _torch_dtype

    assert (
        _torch_dtype(DataType.FP8_E4M3) is torch.float8_e4m3fn and _torch_dtype(DataType.FP8_E5M2) is torch.float8_e5m2
    )
    assert all(as_data_type(_torch_dtype(dtype)) is dtype for dtype in DataType)


def test_each_device_type_runs_on_its_own_executor():
    """CPU tensors on the reference, CUDA tensors on the GPU backend (made lazily: no GPU needed to ask), one
    executor each; ``fallback`` gives CUDA one that runs on the reference what no GPU builder takes."""
    from sigdnn.torch.cache import executor_for

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert (executor_for(cpu).backend, executor_for(cpu).fallback) == ("reference", None)
    assert executor_for(cpu, fallback=True) is executor_for(cpu)
    assert (executor_for(cuda).backend, executor_for(cuda).fallback) == ("gpu", None)
    assert (executor_for(cuda, True).backend, executor_for(cuda, True).fallback) == ("gpu", "reference")
    assert executor_for(cuda, True) is executor_for(cuda, True) is not executor_for(cuda)


def test_graphs_are_cached_per_signature():
    x, w, b = rand(2, 5, grad=False), rand(5, grad=False), rand(5, grad=False)
    st.layer_norm(x, (5,), w, b)
    before = st.cache_size()
    st.layer_norm(x * 2, (5,), w, b)  # same signature: no new graph
    assert st.cache_size() == before
    st.layer_norm(x.t().contiguous().t(), (5,), w, b)  # other strides: a graph of its own
    assert st.cache_size() == before + 1
    close(st.layer_norm(x.t().contiguous().t(), (5,), w, b), F.layer_norm(x, (5,), w, b))


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("sdpa", lambda: (rand(1, 2, 3, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4), 0.5, True)),
        ("layer_norm", lambda: (rand(3, 4), rand(4), rand(4), 1e-5)),
        ("conv", lambda: (rand(1, 2, 5, 5), rand(3, 2, 3, 3), [1, 1], [1, 1], [1, 1])),
    ],
)
def test_opcheck(op, args):
    """torch's own check of a custom op: schema, fake kernel against the real one, autograd registration."""
    torch.library.opcheck(getattr(torch.ops.sigdnn, op).default, args())


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1, dtype=torch.float64)
        self.norm = torch.nn.LayerNorm(8, dtype=torch.float64)
        self.proj = torch.nn.Linear(8, 8, dtype=torch.float64)

    def forward(self, x: torch.Tensor, use_sigdnn: bool) -> torch.Tensor:
        conv = st.conv if use_sigdnn else F.conv2d
        norm = st.layer_norm if use_sigdnn else F.layer_norm
        attend = st.scaled_dot_product_attention if use_sigdnn else F.scaled_dot_product_attention
        h = conv(x, self.conv.weight, self.conv.bias, padding=1)  # [N, 4, 8, 8]: heads 4, sequence 8, dim 8
        h = norm(h, (8,), self.norm.weight, self.norm.bias)
        return attend(h, h, self.proj(h), is_causal=True)


INDUCTOR = pytest.param(
    "inductor",
    marks=pytest.mark.skipif(
        not os.environ.get("SIGDNN_TEST_INDUCTOR"), reason="inductor compiles for minutes here: SIGDNN_TEST_INDUCTOR=1"
    ),
)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", INDUCTOR])
def test_compile_fullgraph_without_graph_breaks_and_gradients_match(backend):
    torch._dynamo.reset()
    model = Block()
    x = rand(2, 2, 8, 8, grad=False)
    explained = torch._dynamo.explain(model)(x, True)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    ours = compiled(x, True)
    ours.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    theirs = model(x, False)
    theirs.sum().backward()
    close(ours, theirs)
    for mine, reference in zip(grads, (p.grad for p in model.parameters())):
        close(mine, reference)


def test_attention_switch_routes_a_torch_model_through_sigdnn():
    layer = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)  # training: the sdpa path
    x = rand(2, 5, 8, grad=False)
    expect, _ = layer(x, x, x, need_weights=False)
    before = st.cache_size()
    with st.attention():
        got, _ = layer(x, x, x, need_weights=False)
    assert F.scaled_dot_product_attention is not st.scaled_dot_product_attention
    assert st.cache_size() == before + 1  # it ran on sigdnn
    close(got, expect)


def test_unsupported_arguments_name_themselves():
    q = rand(1, 1, 2, 2, grad=False)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        st.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="groups"):
        st.conv(q, rand(2, 1, 1, 1, grad=False), groups=2)


def test_import_sigdnn_does_not_import_torch():
    code = "import sys, sigdnn, sigdnn.cudnn; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_outputs_are_row_major_whatever_the_inputs_layout():
    """q in BSHD storage (as multi-head attention's views give it): o comes back row-major, as the fake says."""
    q, k, v = (torch.randn(2, 5, 3, 4, dtype=torch.float64, generator=gen).transpose(1, 2) for _ in range(3))
    o, stats = torch.ops.sigdnn.sdpa(q, k, v, 0.5, False)
    assert o.is_contiguous() and stats.is_contiguous()
    close(o, F.scaled_dot_product_attention(q, k, v, scale=0.5))
    fake = torch.library.opcheck(torch.ops.sigdnn.sdpa.default, (q, k, v, 0.5, False))
    assert all(v == "SUCCESS" for v in fake.values())


NAMES = {  # each cached graph: its name, its inputs and outputs named after the op's arguments and results
    "sdpa": (["q", "k", "v"], ["o", "stats"]),
    "sdpa_backward": (["q", "k", "v", "o", "d_o", "stats"], ["dq", "dk", "dv"]),
    "layer_norm": (["x", "weight", "bias"], ["y", "mean", "rstd"]),
    "layer_norm_backward": (["dy", "x", "weight", "mean", "rstd"], ["dx", "dweight", "dbias"]),
    "conv": (["x", "w"], ["y"]),
    "conv_dgrad": (["dy", "w"], ["dx"]),
    "conv_wgrad": (["x", "dy"], ["dw"]),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cached_graphs_are_named_after_the_op_and_compute_in_float64_for_float64(dtype):
    """Error messages and saved graphs name the graph by its op and each tensor by its argument; a float64
    model's graphs compute in float64 (what a GPU engine honours), others in float32."""
    from sigdnn.dtypes import DataType
    from sigdnn.torch.cache import _CACHE

    model = Block().to(dtype)
    x = torch.randn(3, 2, 8, 8, dtype=dtype, generator=gen, requires_grad=True)  # batch 3: this test's graphs
    model(x, True).sum().backward()
    mine = [(key, c.plan.graph) for key, c in _CACHE.items() if key[2][0][0] == 3 and key[2][2] == dtype]
    found = {key[0]: graph for key, graph in mine if key[0] in NAMES}
    assert sorted(found) == sorted(NAMES)
    for op, (inputs, outputs) in NAMES.items():
        graph = found[op]
        assert graph.name == op
        assert ([t.name for t in graph.inputs], [t.name for t in graph.outputs]) == (inputs, outputs)
        assert graph.compute_dtype is (DataType.FLOAT64 if dtype is torch.float64 else DataType.FLOAT32)
