"""Random graphs, one node each, for every op: the agreement campaign between the GPU and CPU references.

``random_case(op, rng, dtype, size)`` draws the op's attributes and shapes
(ranks, groups, strides, paddings, broadcasting, layouts, modes) and builds
a one-node graph whose outputs are all graph outputs. ``size`` scales the
extents: 1 keeps every tensor small enough for the CPU emulator, the GPU
campaign (benchmarks/gpu_reference.py) takes more. The tests run these on
the emulated GPU reference; the campaign runs them on the H200.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.graph.ops.ragged import token_major
from sigdnn.graph.ops.reduction import Reduction
from sigdnn.graph.tensor import Tensor

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
NARROW_FLOATS = ("fp8_e4m3", "fp8_e5m2")
INTEGER_DTYPES = ("int8", "uint8", "int32", "int64", "bool")
Builder = Callable[[Graph, np.random.Generator, int], None]


def _extent(rng: np.random.Generator, low: int, high: int, size: int) -> int:
    return int(rng.integers(low, high * size + 1))


def _dims(rng: np.random.Generator, rank: int, size: int, high: int = 6) -> tuple[int, ...]:
    return tuple(_extent(rng, 1, high, size) for _ in range(rank))


def _outputs(*tensors: Tensor | None) -> None:
    for t in tensors:
        if t is not None:
            t.set_output(True)


def _pointwise(g: Graph, rng: np.random.Generator, size: int) -> None:
    mode = str(rng.choice(sorted(MODES)))
    info = MODES[mode]
    dims = _dims(rng, int(rng.integers(1, 5)), size)
    inputs = []
    for i in range(info.arity):
        broadcast = tuple(1 if rng.random() < 0.3 else d for d in dims) if i else dims
        inputs.append(g.tensor(f"in_{i}", broadcast))
    params: dict[str, float | int] = {}
    if mode == "gen_index":
        params["axis"] = int(rng.integers(0, len(dims)))
    for p in info.params:
        if rng.random() < 0.5 and p not in params:  # gen_index's axis is a position, drawn above
            params[p] = _parameter(p, rng)
    _outputs(g.pointwise(mode, *inputs, name="pw", **params))


def _parameter(name: str, rng: np.random.Generator) -> float:
    """A value the op takes for pointwise parameter ``name`` (a negative lower clip slope it refuses)."""
    if name == "relu_upper_clip":
        return float(rng.uniform(0.5, 3))
    value = float(np.round(rng.normal(), 2))
    return abs(value) if name == "relu_lower_clip_slope" else value


def _matmul(g: Graph, rng: np.random.Generator, size: int) -> None:
    batch = _dims(rng, int(rng.integers(0, 3)), size, 3)
    m, k, n = (_extent(rng, 1, 24, size) for _ in range(3))
    a_batch = tuple(1 if rng.random() < 0.3 else d for d in batch)
    _outputs(g.matmul(g.tensor("a", (*a_batch, m, k)), g.tensor("b", (*batch, k, n)), name="mm"))


def _conv_geometry(rng: np.random.Generator, size: int) -> dict:
    spatial = int(rng.integers(1, 3))
    groups = int(rng.choice([1, 1, 2]))
    c, k = groups * _extent(rng, 1, 3, size), groups * _extent(rng, 1, 3, size)
    kernel = tuple(int(rng.integers(1, 4)) for _ in range(spatial))
    stride = tuple(int(rng.integers(1, 3)) for _ in range(spatial))
    dilation = tuple(int(rng.integers(1, 3)) for _ in range(spatial))
    pre = tuple(int(rng.integers(0, r)) for r in kernel)
    post = tuple(int(rng.integers(0, r)) for r in kernel)
    image = tuple(d * (r - 1) + _extent(rng, 1, 5, size) for d, r in zip(dilation, kernel))
    layout = str(rng.choice(["NCHW", "NHWC"]))
    n = _extent(rng, 1, 2, size)
    out = tuple(
        (s + a + b - d * (r - 1) - 1) // st + 1 for s, a, b, d, r, st in zip(image, pre, post, dilation, kernel, stride)
    )
    return dict(n=n, c=c, k=k, groups=groups, kernel=kernel, stride=stride, dilation=dilation, pre=pre, post=post,
                image=image, out=out, layout=layout)  # fmt: skip


def _conv(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        s = _conv_geometry(rng, size)
        x_dims, w_dims = (s["n"], s["c"], *s["image"]), (s["k"], s["c"] // s["groups"], *s["kernel"])
        dy_dims = (s["n"], s["k"], *s["out"])
        geometry = dict(pre_padding=s["pre"], post_padding=s["post"], stride=s["stride"], dilation=s["dilation"])
        layout = s["layout"] if len(x_dims) == 4 else None
        if kind == "conv_fprop":
            x, w = g.tensor("x", x_dims, layout=layout), g.tensor("w", w_dims, layout=layout)
            _outputs(g.conv_fprop(x, w, name="conv", **geometry))
        elif kind == "conv_dgrad":
            dy, w = g.tensor("dy", dy_dims, layout=layout), g.tensor("w", w_dims, layout=layout)
            _outputs(g.conv_dgrad(dy, w, dims=x_dims, name="dgrad", **geometry))
        else:
            x, dy = g.tensor("x", x_dims, layout=layout), g.tensor("dy", dy_dims, layout=layout)
            _outputs(g.conv_wgrad(x, dy, dims=w_dims, name="wgrad", **geometry))

    return build


def _channel_param(g: Graph, name: str, x_dims: tuple[int, ...]) -> Tensor:
    return g.tensor(name, (1, x_dims[1]) + (1,) * (len(x_dims) - 2))


def _batchnorm(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        dims = (_extent(rng, 1, 3, size), _extent(rng, 1, 4, size), *_dims(rng, int(rng.integers(0, 3)), size, 5))
        layout = str(rng.choice(["NCHW", "NHWC"])) if len(dims) == 4 else None
        x = g.tensor("x", dims, layout=layout)
        scale, bias = _channel_param(g, "scale", dims), _channel_param(g, "bias", dims)
        if kind == "batchnorm":
            running = rng.random() < 0.5
            rm = _channel_param(g, "running_mean", dims) if running else None
            rv = _channel_param(g, "running_var", dims) if running else None
            _outputs(*g.batchnorm(x, scale, bias, rm, rv, epsilon=1e-5, momentum=0.1, name="bn"))
        elif kind == "batchnorm_inference":
            mean, inv = _channel_param(g, "mean", dims), _channel_param(g, "inv_variance", dims)
            _outputs(g.batchnorm_inference(x, mean, inv, scale, bias, name="bn"))
        else:
            dy = g.tensor("dy", dims, layout=layout)
            mean, inv = _channel_param(g, "mean", dims), _channel_param(g, "inv_variance", dims)
            _outputs(*g.batchnorm_backward(dy, x, scale, mean, inv, name="bn_bwd"))

    return build


def _row_norm(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        dims = _dims(rng, int(rng.integers(2, 4)), size, 8)
        kept = int(rng.integers(1, len(dims)))  # normalized: the trailing axes from ``kept`` on
        param = (1,) * kept + dims[kept:]
        stat = dims[:kept] + (1,) * (len(dims) - kept)
        x, scale = g.tensor("x", dims), g.tensor("scale", param)
        if kind == "layernorm":
            _outputs(*g.layernorm("training", x, scale, g.tensor("bias", param), epsilon=1e-5, name="ln"))
        elif kind == "rmsnorm":
            bias = g.tensor("bias", param) if rng.random() < 0.5 else None
            _outputs(*g.rmsnorm("training", x, scale, bias, epsilon=1e-5, name="rms"))
        elif kind == "layernorm_backward":
            dy, mean, inv = g.tensor("dy", dims), g.tensor("mean", stat), g.tensor("inv_variance", stat)
            _outputs(*g.layernorm_backward(dy, x, scale, mean, inv, name="ln_bwd"))
        else:
            dy, inv = g.tensor("dy", dims), g.tensor("inv_variance", stat)
            _outputs(*g.rmsnorm_backward(dy, x, scale, inv, has_dbias=bool(rng.random() < 0.5), name="rms_bwd"))

    return build


def _axes(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    chosen = tuple(a for a in range(rank) if rng.random() < 0.5)
    return chosen or (rank - 1,)


def _softmax(g: Graph, rng: np.random.Generator, size: int) -> None:
    dims = _dims(rng, int(rng.integers(1, 4)), size, 8)
    x = g.tensor("x", dims)
    _outputs(*g.softmax(x, _axes(rng, len(dims)), log=bool(rng.random() < 0.5), generate_stats=True, name="sm"))


def _reduction(g: Graph, rng: np.random.Generator, size: int) -> None:
    dims = _dims(rng, int(rng.integers(1, 4)), size, 8)
    mode = str(rng.choice(Reduction.enums["mode"]))
    _outputs(g.reduction(g.tensor("x", dims), mode, axes=_axes(rng, len(dims)), name="red"))


def _varlen(g: Graph, rng: np.random.Generator, shapes: dict[str, tuple[int, ...]]) -> tuple[dict, dict]:
    """(layout strides by port, the node's varlen keywords): none, padding lengths, or lengths with ragged
    offsets for a random choice of q / k / v / o laid out token by token."""
    if rng.random() < 0.5:
        return {}, {}
    b = shapes["q"][0]
    lengths = {n: g.tensor(n, (b,), dtype=str(rng.choice(["int32", "int64"]))) for n in ("seq_len_q", "seq_len_kv")}
    chosen = [p for p in "qkvo" if rng.random() < 0.5] if rng.random() < 0.6 else []
    strides = {p: token_major(shapes[p]) for p in chosen}
    offsets = {p: g.tensor(f"{p}_ragged_offset", (b + 1,), dtype="int64") for p in chosen}
    return strides, {**lengths, "ragged_offsets": offsets}


def _band(rng: np.random.Generator) -> dict[str, object]:
    """A diagonal band for three cases in ten: either alignment, a window of 1-4 keys and a right bound in
    [-1, 2], each maybe absent."""
    if rng.random() >= 0.3:
        return {}
    left = int(rng.integers(1, 5)) if rng.random() < 0.6 else None
    right = int(rng.integers(-1, 3)) if rng.random() < 0.6 else None
    return {"diagonal_bottom_right": bool(rng.random() < 0.5), "left_bound": left, "right_bound": right}


def _attention(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        b, hkv, groups = _extent(rng, 1, 2, size), int(rng.integers(1, 3)), int(rng.integers(1, 3))
        sq, skv, d, dv = (_extent(rng, 1, 9, size) for _ in range(4))
        hq = hkv * groups
        shapes = {"q": (b, hq, sq, d), "k": (b, hkv, skv, d), "v": (b, hkv, skv, dv), "o": (b, hq, sq, dv)}
        strides, varlen = _varlen(g, rng, shapes)
        q, k, v = (g.tensor(p, shapes[p], strides=strides.get(p)) for p in "qkv")
        bias = g.tensor("bias", (1, 1, sq, skv)) if rng.random() < 0.4 else None
        causal, scale = bool(rng.random() < 0.5), float(rng.uniform(0.1, 1.0))
        varlen.update(_band(rng))
        if kind == "sdpa":
            found = g.sdpa(q, k, v, scale, bias, use_causal_mask=causal, generate_stats=True, name="sdpa", **varlen)
            if "o" in strides:
                found[0].set_stride(strides["o"])
            _outputs(*found)
            return
        o, do = (g.tensor(n, shapes["o"], strides=strides.get("o")) for n in ("o", "d_o"))
        stats = g.tensor("stats", (b, hq, sq, 1), dtype="float32")
        grads = g.sdpa_backward(q, k, v, o, do, stats, scale, bias, use_causal_mask=causal, name="sdpa_bwd", **varlen)
        for grad, port in zip(grads, "qkv"):
            if port in strides:
                grad.set_stride(strides[port])
        _outputs(*grads)

    return build


def _pooling(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        spatial = int(rng.integers(1, 3))
        window = tuple(int(rng.integers(1, 4)) for _ in range(spatial))
        stride = tuple(int(rng.integers(1, 3)) for _ in range(spatial))
        pre = tuple(int(rng.integers(0, w)) for w in window)
        post = tuple(int(rng.integers(0, w)) for w in window)
        image = tuple(w + _extent(rng, 0, 4, size) for w in window)
        dims = (_extent(rng, 1, 2, size), _extent(rng, 1, 3, size), *image)
        mode = str(rng.choice(["max", "average_count_include_pad", "average_count_exclude_pad"]))
        x = g.tensor("x", dims)
        geometry = dict(stride=stride, pre_padding=pre, post_padding=post)
        if kind == "pooling":
            _outputs(g.pooling(x, mode, window, name="pool", **geometry))
            return
        out = tuple((s + a + b - w) // st + 1 for s, a, b, w, st in zip(image, pre, post, window, stride))
        dy = g.tensor("dy", (*dims[:2], *out))
        _outputs(g.pooling_backward(dy, x, mode, window, name="pool_bwd", **geometry))

    return build


def _resample(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        spatial = int(rng.integers(1, 4))
        mode = str(rng.choice(["nearest", "bilinear"]))
        coordinates = str(rng.choice(["half_pixel", "asymmetric"] + (["align_corners"] if mode == "bilinear" else [])))
        lead = (_extent(rng, 1, 2, size), _extent(rng, 1, 2, size))
        small, large = (lead + _dims(rng, spatial, size, 5) for _ in range(2))
        if kind == "resample":
            _outputs(g.resample(g.tensor("x", small), mode, dims=large, coordinates=coordinates, name="rs"))
            return
        dy = g.tensor("dy", large)
        _outputs(g.resample_backward(dy, mode, dims=small, coordinates=coordinates, name="rs_bwd"))

    return build


def _movement(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        dims = _dims(rng, int(rng.integers(1, 5)), size, 5)
        x = g.tensor("x", dims)
        if kind == "reshape":
            _outputs(g.reshape(x, (int(np.prod(dims)),) if rng.random() < 0.5 else tuple(reversed(dims)), name="rs"))
        elif kind == "transpose":
            _outputs(g.transpose(x, tuple(int(a) for a in rng.permutation(len(dims))), name="tr"))
        elif kind == "slice":
            index = []
            for d in dims:
                start = int(rng.integers(0, d))
                index.append(slice(start, int(rng.integers(start + 1, d + 1)), int(rng.integers(1, 3))))
            _outputs(g.slice(x, tuple(index), name="sl"))
        else:
            axis = int(rng.integers(0, len(dims)))
            others = [g.tensor(f"x{i}", (*dims[:axis], _extent(rng, 1, 4, size), *dims[axis + 1 :])) for i in range(2)]
            _outputs(g.concatenate([x, *others], axis, name="cat"))

    return build


def _delta_rule(kind: str) -> Builder:
    def build(g: Graph, rng: np.random.Generator, size: int) -> None:
        tokens, heads, n = _extent(rng, 1, 6, size), int(rng.integers(1, 3)), int(rng.integers(1, 3))
        kd, vd = _extent(rng, 1, 4, size), _extent(rng, 1, 4, size)
        per_channel = kind.startswith("kda")
        ins = {
            "q": g.tensor("q", (tokens, heads, kd)),
            "k": g.tensor("k", (tokens, heads, kd)),
            "v": g.tensor("v", (tokens, heads, vd)),
            "g": g.tensor("g", (tokens, heads, kd) if per_channel else (tokens, heads), dtype="float32"),
            "beta": g.tensor("beta", (tokens, heads)),
            "cu_seqlens": g.tensor("cu_seqlens", (n + 1,), dtype=str(rng.choice(["int32", "int64"]))),
        }
        if rng.random() < 0.5:
            ins["initial_state"] = g.tensor("h0", (n, heads, kd, vd), dtype="float32")
        scale = float(rng.uniform(0.3, 1.0)) if rng.random() < 0.5 else None
        l2norm = bool(rng.random() < 0.5)
        if kind.endswith("_bwd"):
            ins["d_o"] = g.tensor("d_o", (tokens, heads, vd))
            if rng.random() < 0.5:
                ins["d_final_state"] = g.tensor("d_final", (n, heads, kd, vd), dtype="float32")
            _outputs(*getattr(g, kind)(**ins, scale=scale, use_qk_l2norm=l2norm, name=kind))
        else:
            final = bool(rng.random() < 0.5)
            _outputs(*getattr(g, kind)(**ins, scale=scale, use_qk_l2norm=l2norm, output_final_state=final, name=kind))

    return build


BUILDERS: dict[str, Builder] = {
    "pointwise": _pointwise,
    "matmul": _matmul,
    **{k: _conv(k) for k in ("conv_fprop", "conv_dgrad", "conv_wgrad")},
    **{k: _batchnorm(k) for k in ("batchnorm", "batchnorm_inference", "batchnorm_backward")},
    **{k: _row_norm(k) for k in ("layernorm", "layernorm_backward", "rmsnorm", "rmsnorm_backward")},
    "softmax": _softmax,
    "reduction": _reduction,
    **{k: _attention(k) for k in ("sdpa", "sdpa_backward")},
    **{k: _pooling(k) for k in ("pooling", "pooling_backward")},
    **{k: _resample(k) for k in ("resample", "resample_backward")},
    **{k: _movement(k) for k in ("reshape", "transpose", "slice", "concatenate")},
    **{k: _delta_rule(k) for k in ("gdn", "gdn_bwd", "kda", "kda_bwd")},
}
ANY_DTYPE = ("pointwise", "reduction", "reshape", "transpose", "slice", "concatenate", "matmul")


def dtypes_of(op: str) -> tuple[str, ...]:
    """The io dtypes a case of ``op`` is drawn in."""
    return FLOAT_DTYPES + NARROW_FLOATS + (INTEGER_DTYPES if op in ANY_DTYPE else ())


def random_case(op: str, rng: np.random.Generator, dtype: str, size: int = 1) -> Graph:
    """A one-node graph of ``op`` in io dtype ``dtype`` (compute float32, or int32 for integer io)."""
    compute = "int32" if dtype in INTEGER_DTYPES else "float32"
    g = Graph(f"{op}_{dtype}", io_dtype=dtype, compute_dtype=compute)
    BUILDERS[op](g, rng, size)
    return g
