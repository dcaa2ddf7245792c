"""Shape rules of the reference op set: broken at the builder call, or on the wire.

Each violation must be a GraphError raised by the call that makes it, naming
the node and the port (or attribute) at fault. The same rules run when a
buffer is read: a graph whose tensors or attributes were changed after it was
built (a hand-edited or hostile buffer) is refused by deserialize, and so is
a node whose optional outputs disagree with its attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

import sigdnn
from sigdnn import GraphError
from sigdnn.graph.layout import packed_strides


def graph(**kw: Any) -> sigdnn.Graph:
    return sigdnn.Graph("rules", io_dtype=kw.pop("io_dtype", "float32"), **kw)


def ts(g: sigdnn.Graph, **dims: tuple[int, ...]) -> dict[str, sigdnn.Tensor]:
    """Tensors named ``<port>_in``."""
    return {port: g.tensor(f"{port}_in", d) for port, d in dims.items()}


Call = Callable[[sigdnn.Graph], Any]
X4 = (2, 4, 6, 6)
C4 = (1, 4, 1, 1)


def conv_dgrad(dy: tuple, w: tuple, **kw: Any) -> Call:
    return lambda g: g.conv_dgrad(*ts(g, dy=dy, w=w).values(), name="n", **kw)


def conv_wgrad(x: tuple, dy: tuple, **kw: Any) -> Call:
    return lambda g: g.conv_wgrad(*ts(g, x=x, dy=dy).values(), name="n", **kw)


def batchnorm(x: tuple = X4, scale: tuple = C4, bias: tuple = C4, running: str = "", **kw: Any) -> Call:
    """running: "" (none), "both", or "mean" (in_running_mean alone)."""

    def call(g: sigdnn.Graph) -> Any:
        t = ts(g, x=x, scale=scale, bias=bias)
        rm = g.tensor("in_running_mean_in", C4) if running else None
        rv = g.tensor("in_running_var_in", C4) if running == "both" else None
        return g.batchnorm(t["x"], t["scale"], t["bias"], rm, rv, name="n", **kw)

    return call


def norm(method: str, x: tuple, scale: tuple, bias: tuple | None, **kw: Any) -> Call:
    def call(g: sigdnn.Graph) -> Any:
        t = ts(g, x=x, scale=scale, **({"bias": bias} if bias else {}))
        return getattr(g, method)(kw.pop("phase", "training"), t["x"], t["scale"], t.get("bias"), name="n", **kw)

    return call


def backward(method: str, **dims: tuple) -> Call:
    return lambda g: getattr(g, method)(*ts(g, **dims).values(), name="n")


def sdpa(q=(1, 4, 5, 8), k=(1, 2, 7, 8), v=(1, 2, 7, 3), bias=None, **kw: Any) -> Call:
    def call(g: sigdnn.Graph) -> Any:
        t = ts(g, q=q, k=k, v=v, **({"bias": bias} if bias else {}))
        return g.sdpa(t["q"], t["k"], t["v"], bias=t.get("bias"), name="n", **kw)

    return call


def sdpa_backward(o=(1, 4, 5, 3), d_o=(1, 4, 5, 3), stats=(1, 4, 5, 1)) -> Call:
    def call(g: sigdnn.Graph) -> Any:
        t = ts(g, q=(1, 4, 5, 8), k=(1, 2, 7, 8), v=(1, 2, 7, 3), o=o, d_o=d_o, stats=stats)
        return g.sdpa_backward(*t.values(), name="n")

    return call


def single(method: str, x: tuple, *args: Any, **kw: Any) -> Call:
    return lambda g: getattr(g, method)(g.tensor("x_in", x), *args, name="n", **kw)


VIOLATIONS: list[tuple[str, Call, str]] = [
    # conv_dgrad
    ("dgrad dy rank", conv_dgrad((2, 4), (4, 4, 3, 3)), r"dy has rank 2 \(0 spatial dims\)"),
    ("dgrad w rank", conv_dgrad(X4, (4, 4, 3)), "w has rank 3, dy has rank 4"),
    ("dgrad K", conv_dgrad(X4, (5, 4, 3, 3)), "w's output channels 5 differ from dy's channels 4"),
    ("dgrad stride needs dims", conv_dgrad(X4, (4, 4, 3, 3), stride=(2, 2)), r"several dx sizes .* give dx's dims"),
    ("dgrad dims batch", conv_dgrad(X4, (4, 2, 3, 3), dims=(3, 4, 8, 8)), "have batch 3, dy has 2"),
    (
        "dgrad dims groups",
        conv_dgrad(X4, (4, 3, 3, 3), dims=(2, 4, 8, 8)),
        "w's channel count 3 does not divide dx's 4",
    ),
    ("dgrad dims size", conv_dgrad(X4, (4, 4, 3, 3), dims=(2, 4, 9, 8)), r"spatial dims \[7, 6\], dy has \[6, 6\]"),
    ("dgrad padding", conv_dgrad((1, 1, 2), (1, 1, 1), padding=(3,)), "no dx size gives dy's 2"),
    # conv_wgrad
    ("wgrad batch", conv_wgrad(X4, (3, 4, 4, 4)), "dy has batch 3, x has 2"),
    ("wgrad stride needs dims", conv_wgrad(X4, (2, 4, 3, 3), stride=(2, 2)), "several kernel sizes"),
    ("wgrad dims K", conv_wgrad(X4, (2, 6, 4, 4), dims=(5, 4, 3, 3)), "have 5 output channels, dy has 6"),
    (
        "wgrad dilation",
        conv_wgrad((1, 1, 6), (1, 1, 3), dilation=(2,)),
        "no kernel with dilation 2 takes x's 6 to dy's 3",
    ),
    ("wgrad kernel", conv_wgrad(X4, (2, 4, 4, 4), dims=(4, 4, 2, 3)), r"kernel of dims \[2, 3\] gives"),
    # batchnorm family
    ("bn epsilon 0", batchnorm(epsilon=0.0), "epsilon must be positive"),
    ("bn epsilon nan", batchnorm(epsilon=float("nan")), "epsilon must be positive"),
    ("bn scale dims", batchnorm(scale=(1, 3, 1, 1)), r"port 'scale' \(tensor 'scale_in'\) has dims \[1, 3, 1, 1\]"),
    ("bn bias rank", batchnorm(bias=(4,)), r"port 'bias' \(tensor 'bias_in'\) has dims \[4\], expected \[1, 4, 1, 1\]"),
    ("bn one running", batchnorm(running="mean"), "port 'in_running_mean' is given without its pair"),
    ("bn x rank", batchnorm(x=(4,)), r"port 'x' \(tensor 'x_in'\) has rank 1"),
    ("bn momentum", batchnorm(running="both", momentum=2.0), r"momentum must be in \[0, 1\], got 2.0"),
    (
        "bn running var dims",
        lambda g: g.batchnorm(*ts(g, x=X4, s=C4, b=C4, rm=C4, in_running_var=(1, 2, 1, 1)).values(), name="n"),
        r"port 'in_running_var' \(tensor 'in_running_var_in'\) has dims \[1, 2, 1, 1\]",
    ),
    (
        "bn_inf mean dims",
        backward("batchnorm_inference", x=X4, mean=(1, 4, 1), inv_variance=C4, scale=C4, bias=C4),
        r"port 'mean' \(tensor 'mean_in'\) has dims \[1, 4, 1\]",
    ),
    (
        "bn_bwd dy dims",
        backward("batchnorm_backward", dy=(2, 4, 6, 5), x=X4, scale=C4, mean=C4, inv_variance=C4),
        r"port 'dy' \(tensor 'dy_in'\) has dims \[2, 4, 6, 5\], port 'x' \(tensor 'x_in'\) has \[2, 4, 6, 6\]",
    ),
    (
        "bn_bwd inv_variance dims",
        backward("batchnorm_backward", dy=X4, x=X4, scale=C4, mean=C4, inv_variance=(1, 4, 2, 1)),
        r"port 'inv_variance' \(tensor 'inv_variance_in'\)",
    ),
    # layernorm / rmsnorm
    ("ln scale dim", norm("layernorm", (2, 3, 8), (1, 2, 8), (1, 2, 8)), r"port 'scale' .* each dim must be x's"),
    (
        "ln scale rank",
        norm("layernorm", (2, 3, 8), (1, 1, 2, 3, 8), (1, 1, 2, 3, 8)),
        r"port 'scale' \(tensor 'scale_in'\) has dims \[1, 1, 2, 3, 8\]",
    ),
    ("ln bias dims", norm("layernorm", (2, 3, 8), (1, 1, 8), (1, 3, 8)), r"port 'bias' .* has dims \[1, 3, 8\]"),
    ("ln phase", norm("layernorm", (2, 8), (1, 8), (1, 8), phase="train"), "unknown phase 'train'"),
    ("ln epsilon", norm("layernorm", (2, 8), (1, 8), (1, 8), epsilon=-1e-5), "epsilon must be positive"),
    ("rms bias dims", norm("rmsnorm", (2, 8), (1, 8), (2, 8)), r"port 'bias' .* has dims \[2, 8\]"),
    (
        "ln_bwd mean dims",
        backward("layernorm_backward", dy=(2, 8), x=(2, 8), scale=(1, 8), mean=(1, 1), inv_variance=(2, 1)),
        r"port 'mean' \(tensor 'mean_in'\) has dims \[1, 1\], expected \[2, 1\]",
    ),
    (
        "rms_bwd inv dims",
        backward("rmsnorm_backward", dy=(2, 8), x=(2, 8), scale=(1, 8), inv_variance=(2, 8)),
        r"port 'inv_variance' .* expected \[2, 1\]",
    ),
    # softmax / reduction
    ("softmax axis", single("softmax", (2, 3), axes=(2,)), r"axes \[2\] out of range for rank 2"),
    ("softmax duplicate axes", single("softmax", (2, 3), axes=(1, -1)), "must be distinct"),
    ("reduction dims", single("reduction", (2, 3), "add", (2, 2)), r"dims \[2, 2\] are no reduction of port 'x'"),
    ("reduction mode", single("reduction", (2, 3), "sum", (2, 1)), "unknown mode 'sum'"),
    (
        "reduction both",
        single("reduction", (2, 3), "add", (2, 1), axes=1),
        "give the output's dims or the reduced axes",
    ),
    # sdpa
    ("sdpa q rank", sdpa(q=(4, 5, 8)), r"port 'q' \(tensor 'q_in'\) has rank 3"),
    ("sdpa heads", sdpa(k=(1, 3, 7, 8), v=(1, 3, 7, 3)), r"3 heads do not divide q's 4 heads \(port 'k'"),
    ("sdpa head dim", sdpa(k=(1, 2, 7, 6)), r"port 'k' \(tensor 'k_in'\) has head dim 6, q has 8"),
    ("sdpa v sequence", sdpa(v=(1, 2, 6, 3)), r"port 'v' \(tensor 'v_in'\) has heads and sequence \[2, 6\]"),
    ("sdpa bias", sdpa(bias=(1, 4, 5, 2)), r"port 'bias' .* must broadcast to the scores \[1, 4, 5, 7\]"),
    ("sdpa bias rank", sdpa(bias=(5, 7)), r"port 'bias' .* has dims \[5, 7\]"),
    ("sdpa scale", sdpa(attn_scale=float("inf")), "attn_scale must be finite"),
    ("sdpa_bwd stats", sdpa_backward(stats=(1, 4, 5, 2)), r"port 'stats' .* expected \[1, 4, 5, 1\]"),
    ("sdpa_bwd d_o", sdpa_backward(d_o=(1, 4, 5, 8)), r"port 'd_o' .* expected \[1, 4, 5, 3\]"),
    # pooling / resample
    ("pool padding", single("pooling", X4, "max", (2, 2), None, (2, 0)), r"padding \(2, 2\) must be smaller"),
    ("pool window rank", single("pooling", X4, "max", (2,)), "window has 1 entries for 2 spatial dims"),
    ("pool stride", single("pooling", X4, "max", (2, 2), (0, 1)), r"stride \[0, 1\] must be >= 1"),
    ("pool mode", single("pooling", X4, "min", (2, 2)), "unknown mode 'min'"),
    ("pool window big", single("pooling", X4, "max", (7, 2)), "padded input 6 is smaller than the dilated kernel 7"),
    ("resample dims", single("resample", X4, "nearest", (2, 3, 8, 8)), r"must be y's \[N, C, out...\]"),
    ("resample corners", single("resample", X4, "nearest", X4, coordinates="align_corners"), "no align_corners"),
    ("resample scales", single("resample", X4, "bilinear", (2, 4, 9, 9), (2.0, 2.0)), "disagree with scales"),
    ("resample_bwd dims", single("resample_backward", X4, "nearest", (2, 3, 8, 8)), r"must be dx's \[N, C, in...\]"),
    ("resample_bwd rank", single("resample_backward", X4, "nearest", (2, 4, 8)), r"port 'dy''s N, C \[2, 4\]"),
    ("resample_bwd zero", single("resample_backward", X4, "nearest", (2, 4, 0, 3)), r"must be dx's"),
    ("resample_bwd dy rank", single("resample_backward", (2, 4), "nearest", (2, 4)), r"dy has rank 2 \(0 spatial"),
    ("resample_bwd corners", single("resample_backward", X4, "nearest", X4, coordinates="align_corners"), "no align_"),
    ("resample_bwd mode", single("resample_backward", X4, "cubic", X4), "unknown mode 'cubic'"),
    ("resample_bwd coords", single("resample_backward", X4, "nearest", X4, coordinates="edge"), "unknown coordinates"),
    (
        "resample_bwd scales",
        single("resample_backward", X4, "bilinear", (2, 4, 4, 4), (2.0, 2.0)),
        r"port 'dy' \[2, 4, 6, 6\] disagree with scales \[2.0, 2.0\] \(spatial \[8, 8\]\)",
    ),
    ("resample_bwd scale count", single("resample_backward", X4, "bilinear", X4, (1.0,)), "must be 2 positive finite"),
    ("resample_bwd scale sign", single("resample_backward", X4, "bilinear", X4, (1.0, -1.0)), "positive finite"),
    # data movement
    ("reshape count", single("reshape", (2, 5), (3, 4)), r"hold 12 elements, port 'x' \[2, 5\] holds 10"),
    ("reshape zero", single("reshape", (2, 5), (10, 0)), "must be one or more positive sizes"),
    ("transpose repeat", single("transpose", (2, 3, 4), (0, 0, 1)), r"permutation \[0, 0, 1\] is not a permutation"),
    ("transpose short", single("transpose", (2, 3, 4), (1, 0)), "is not a permutation of port 'x''s 3 axes"),
    ("slice empty", single("slice", (4, 5), [slice(6, 9)]), r"axis 0: slice \[4:4\] is out of range or empty"),
    ("slice reverse", single("slice", (4, 5), [slice(None), slice(None, None, -1)]), "axis 1: stride -1 must be >= 1"),
    ("slice too many", single("slice", (4,), [slice(1), slice(2)]), "at most 1 slices"),
]


@pytest.mark.parametrize(("make", "why"), [v[1:] for v in VIOLATIONS], ids=[v[0] for v in VIOLATIONS])
def test_violation_at_the_builder_call(make: Call, why: str) -> None:
    g = graph()
    with pytest.raises(GraphError, match=why) as err:
        make(g)
    assert "node 'n'" in str(err.value)
    assert not g.nodes, "a refused node must not be added"


def test_concatenate_violations() -> None:
    g = graph()
    a, b, c = g.tensor("a", (2, 3)), g.tensor("b", (2, 4)), g.tensor("c", (2, 3, 1))
    with pytest.raises(GraphError, match=r"node 'n'.*port 'x_1' \(tensor 'b'\) has dims \[2, 4\].*all dims but axis 0"):
        g.concatenate([a, b], axis=0, name="n")
    with pytest.raises(GraphError, match=r"node 'n'.*port 'x_1' \(tensor 'c'\)"):
        g.concatenate([a, c], axis=1, name="n")
    with pytest.raises(GraphError, match=r"node 'n'.*axis 2 out of range for rank 2"):
        g.concatenate([a, a], axis=2, name="n")
    with pytest.raises(GraphError, match=r"node 'n'.*needs at least one input"):
        g.concatenate([], axis=0, name="n")
    with pytest.raises(GraphError, match=r"node 'n'.*port 'x' takes a sequence of tensors"):
        g.concatenate(a, axis=0, name="n")  # type: ignore[arg-type]
    other = graph().tensor("foreign", (2, 3))
    with pytest.raises(GraphError, match=r"node 'n' port 'x_1'.*is not a tensor of graph"):
        g.concatenate([a, other], axis=0, name="n")
    assert g.concatenate([a, b, a], axis=1, name="ok").dims == (2, 10)


def test_missing_required_port_at_the_builder_call() -> None:
    g = graph()
    x, s = g.tensor("x", (2, 8)), g.tensor("s", (1, 8))
    with pytest.raises(GraphError, match=r"node 'n': layernorm needs input port\(s\) \['bias'\]"):
        g.layernorm("training", x, s, None, name="n")  # type: ignore[arg-type]


def test_epsilon_from_a_scalar_tensor() -> None:
    g = graph()
    x, s, b = g.tensor("x", (2, 8)), g.tensor("s", (1, 8)), g.tensor("b", (1, 8))
    g.layernorm("training", x, s, b, epsilon=g.scalar("eps", 0.25, dtype="float64"), name="ok")
    assert g.node_by_name("ok").op.epsilon == 0.25
    with pytest.raises(GraphError, match=r"node 'n' epsilon: tensor 'x' is not a pass-by-value scalar"):
        g.layernorm("training", x, s, b, epsilon=x, name="n")
    with pytest.raises(GraphError, match=r"node 'n'.*epsilon must be positive"):
        g.layernorm("training", x, s, b, epsilon=g.scalar("neg", -1.0), name="n")


# -- the same rules on a deserialized buffer ------------------------------------------------------


def built(make: Callable[[sigdnn.Graph], Any]) -> sigdnn.Graph:
    g = graph(intermediate_dtype="float32")
    make(g)
    return g


def retouch(g: sigdnn.Graph, node: str = "n", tensors: dict[str, tuple] | None = None, **change: Any) -> bytes:
    """The graph's bytes after changing tensor dims (strides kept packed) and node attributes behind the builder."""
    for name, dims in (tensors or {}).items():
        g.tensor_by_name(name).set_dim(dims).set_stride(packed_strides(dims))
    if change:
        n = g.node_by_name(node)
        n.op = attrs.evolve(n.op, **change)
    return g.serialize()


WIRE: list[tuple[str, Callable[[], bytes], str]] = [
    ("dgrad dims", lambda: retouch(built(conv_dgrad(X4, (4, 4, 3, 3))), dims=(2, 4, 9, 9)), "spatial dims"),
    ("wgrad stride", lambda: retouch(built(conv_wgrad(X4, (2, 4, 4, 4))), stride=(2, 2)), "several kernel sizes"),
    ("bn epsilon", lambda: retouch(built(batchnorm()), epsilon=0.0), "epsilon must be positive"),
    ("bn momentum alone", lambda: retouch(built(batchnorm()), momentum=0.5), "momentum 0.5 is given without"),
    ("bn scale", lambda: retouch(built(batchnorm()), tensors={"scale_in": (1, 4, 1)}), r"port 'scale'"),
    (
        "ln scale",
        lambda: retouch(built(norm("layernorm", (2, 8), (1, 8), (1, 8))), tensors={"scale_in": (2, 4)}),
        r"port 'scale' \(tensor 'scale_in'\) has dims \[2, 4\]",
    ),
    ("softmax axes", lambda: retouch(built(single("softmax", (2, 3))), axes=(0, 2)), r"axes \[0, 2\] out of range"),
    ("reduction axes", lambda: retouch(built(single("reduction", (2, 3), "add", (2, 1))), axes=(1, 1)), "distinct"),
    (
        "sdpa heads",
        lambda: retouch(built(sdpa()), tensors={"k_in": (1, 3, 7, 8), "v_in": (1, 3, 7, 3)}),
        "heads do not divide",
    ),
    ("sdpa bias", lambda: retouch(built(sdpa(bias=(1, 1, 5, 7))), tensors={"bias_in": (1, 1, 4, 7)}), "broadcast"),
    ("pool padding", lambda: retouch(built(single("pooling", X4, "max", (2, 2))), pre_padding=(0, 2)), "smaller than"),
    ("transpose", lambda: retouch(built(single("transpose", (2, 3), (1, 0))), permutation=(1, 1)), "not a permutation"),
    ("slice", lambda: retouch(built(single("slice", (4, 5), [slice(1, 3)])), limit_indices=(9, 5)), "out of range"),
    ("slice stride", lambda: retouch(built(single("slice", (4, 5), [slice(1, 3)])), strides=(0, 1)), "must be >= 1"),
    ("reshape", lambda: retouch(built(single("reshape", (2, 5), (10,))), dims=(11,)), "hold 11 elements"),
    ("resample", lambda: retouch(built(single("resample", X4, "nearest", (2, 4, 3, 3))), dims=(1, 4, 3, 3)), "N, C"),
    (
        "resample huge scale",  # finite, but the scaled size overflows (found by the fuzz run, case 419943)
        lambda: retouch(built(single("resample", X4, "bilinear", (2, 4, 12, 12), (2.0, 2.0))), scales=(1e308, 2.0)),
        "past 2",
    ),
    (
        "resample_backward",
        lambda: retouch(built(single("resample_backward", X4, "nearest", (2, 4, 3, 3))), dims=(2, 5, 3, 3)),
        "N, C",
    ),
    (
        "resample_backward scales",
        lambda: retouch(built(single("resample_backward", X4, "nearest", (2, 4, 3, 3), (2.0, 2.0))), scales=(2.0, 3.0)),
        "disagree with scales",
    ),
    ("required port absent", lambda: retouch(built(batchnorm()), bias=0), r"port 'bias' names uid 0.*dangling"),
]


@pytest.mark.parametrize(("data", "why"), [w[1:] for w in WIRE], ids=[w[0] for w in WIRE])
def test_violation_on_the_wire(data: Callable[[], bytes], why: str) -> None:
    raw = data()
    sigdnn.deserialize(raw, check=False)  # it parses; the rules refuse it
    with pytest.raises(GraphError, match=f"node 'n'.*{why}"):
        sigdnn.deserialize(raw)


def test_concatenate_vector_port_on_the_wire() -> None:
    def concatenated() -> tuple[sigdnn.Graph, int, int]:
        g = graph()
        a, b = g.tensor("a", (2, 3)), g.tensor("b", (2, 4))
        g.concatenate([a, b], axis=1, name="n")
        return g, a.uid, b.uid

    g, a, b = concatenated()
    assert sigdnn.deserialize(g.serialize()) == g
    with pytest.raises(GraphError, match=r"node 'n': port 'x_2' names uid 99, which is not a tensor"):
        sigdnn.deserialize(retouch(concatenated()[0], x=(a, b, 99)))
    with pytest.raises(GraphError, match=r"node 'n'.*needs at least one input"):
        sigdnn.deserialize(retouch(concatenated()[0], x=()))
    with pytest.raises(GraphError, match=r"node 'n'.*port 'x_1' \(tensor 'b'\).*all dims but axis 0"):
        sigdnn.deserialize(retouch(concatenated()[0], axis=0))
    with pytest.raises(GraphError, match=r"node 'n'.*int vector of 4 entries \(max 3\)"):
        sigdnn.deserialize(retouch(concatenated()[0], x=(a, b, a, b)), limits=sigdnn.Limits(max_tensors=3))


@pytest.mark.parametrize(
    ("make", "change", "why"),
    [
        (sdpa(), {"generate_stats": True}, r"port\(s\) \['stats'\] are missing"),
        (sdpa(generate_stats=True), {"generate_stats": False}, r"port\(s\) \['stats'\] should be absent"),
        (
            single("softmax", (2, 3)),
            {"generate_stats": True},
            r"give outputs \['stats', 'y'\]; port\(s\) \['stats'\] are missing",
        ),
        (
            norm("layernorm", (2, 8), (1, 8), (1, 8)),
            {"phase": "inference"},
            r"port\(s\) \['inv_variance', 'mean'\] should be absent",
        ),
        (norm("rmsnorm", (2, 8), (1, 8), None, phase="inference"), {"phase": "training"}, r"\['inv_variance'\]"),
        (
            backward("rmsnorm_backward", dy=(2, 8), x=(2, 8), scale=(1, 8), inv_variance=(2, 1)),
            {"has_dbias": True},
            r"port\(s\) \['dbias'\] are missing",
        ),
    ],
)
def test_optional_outputs_must_match_the_attributes_on_the_wire(make: Call, change: dict, why: str) -> None:
    """A flag that asks for an output the node does not name (or the reverse) is refused, never a KeyError."""
    with pytest.raises(GraphError, match=f"node 'n': .*{why}"):
        sigdnn.deserialize(retouch(built(make), **change))


def test_running_statistics_and_momentum_on_the_wire() -> None:
    g = graph()
    t = ts(g, x=X4, scale=C4, bias=C4, rm=C4, rv=C4)
    g.batchnorm(t["x"], t["scale"], t["bias"], t["rm"], t["rv"], name="n")
    assert sigdnn.deserialize(g.serialize()) == g
    with pytest.raises(GraphError, match=r"node 'n'.*running statistics need a momentum"):
        sigdnn.deserialize(retouch(g, momentum=None))
    with pytest.raises(GraphError, match=r"node 'n'.*momentum must be in \[0, 1\]"):
        sigdnn.deserialize(retouch(g, momentum=-0.5))


@pytest.mark.parametrize(
    "make",
    [
        conv_dgrad(X4, (4, 4, 3, 3)),
        batchnorm(),
        norm("layernorm", (2, 8), (1, 8), (1, 8)),
        single("softmax", (2, 3)),
        sdpa(),
        single("pooling", X4, "max", (2, 2)),
        single("resample", X4, "nearest", X4),
        single("resample_backward", X4, "nearest", X4),
    ],
    ids=["conv_dgrad", "batchnorm", "layernorm", "softmax", "sdpa", "pooling", "resample", "resample_backward"],
)
def test_floating_point_ops_refuse_integer_tensors(make: Call) -> None:
    """At the call and, for an output set to an integer dtype afterwards, on the wire."""
    with pytest.raises(GraphError, match=r"node 'n'.*must be floating point, is int32"):
        make(graph(io_dtype="int32"))
    g = graph()
    out = make(g)
    first = out[0] if isinstance(out, tuple) else out
    first.set_output(True).set_data_type("int8")
    with pytest.raises(GraphError, match=r"node 'n'.*must be floating point, is int8"):
        sigdnn.deserialize(g.serialize())


def test_data_movement_and_reduction_take_any_dtype() -> None:
    g = graph(io_dtype="int32")
    x = g.tensor("x", (2, 3))
    g.reduction(x, "max", (1, 3), name="r")
    g.concatenate([g.transpose(x, (1, 0)), g.reshape(x, (3, 2))], axis=0, name="c")
    g.slice(x, [slice(1, 2)], name="s")
    assert sigdnn.deserialize(g.serialize()) == g
