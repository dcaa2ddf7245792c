"""Graphs for the cuTile row, channel and reduction builders on awkward shapes (CPU emulator and GPU tests).

Each case is (id, builder name, graph): rows not multiples of a tile,
rows longer than one tile (walked in chunks), size-1 dims, channels-last
and strided layouts, every dtype the builders take. Graphs keep their
shapes small so the emulator runs them quickly; the GPU tests run the same.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

import sigdnn
from sigdnn.graph.ops.reduction import MODES as REDUCTION_MODES

IO = ("float32", "float16", "bfloat16")
ROWS = [(5, 37), (3, 1, 256), (33, 64), (2, 9000), (3, 1100), (4, 5120)]  # odd rows, a size-1 dim, many rows,
# a chunked row, rows held in 5 column tiles (the last masked; all whole)
# The last two: tiles that divide x exactly (the elementwise pass's loads and stores skip their bounds checks).
CHANNELS = [((2, 3, 5, 7), "NCHW"), ((3, 40, 4, 5), "NHWC"), ((2, 5, 50, 50), "NCHW"), ((4, 1, 3, 3), "NHWC"),
            ((4, 16, 8, 8), "NHWC"), ((2, 4, 16, 16), "NCHW"), ((3, 4, 5, 5), "NCHW"),
            ((4, 40, 4, 4), "NHWC"), ((2, 4, 5, 5), "NCHW"), ((2, 3, 32, 64), "NCHW"),
            ((1, 2, 3, 683), "NCHW")]  # fmt: skip  # the last four: only C or only B overhangs its tile (by 1 last)
REDUCTIONS = [((3, 5, 7), (3, 1, 7), None), ((4, 6, 5, 3), (4, 1, 1, 3), "NHWC"), ((3000,), (1,), None),
              ((2, 9000), (2, 1), None), ((6, 4, 5), (1, 4, 1), None)]  # fmt: skip

Case = tuple[str, str, Callable[[], sigdnn.Graph]]


def _outputs(g: sigdnn.Graph, outs) -> sigdnn.Graph:
    for t in outs if isinstance(outs, (list, tuple)) else [outs]:
        if t is not None:
            t.set_output(True)
    return g


def softmax(dims, io, log, stats) -> sigdnn.Graph:
    g = sigdnn.Graph("softmax", io_dtype=io, compute_dtype="float32")
    return _outputs(g, g.softmax(g.tensor("x", dims=dims), axes=(len(dims) - 1,), log=log, generate_stats=stats))


def _param_dims(dims):
    return (1,) * (len(dims) - 1) + dims[-1:]


def layernorm(dims, io, phase, epsilon=1e-5) -> sigdnn.Graph:
    g = sigdnn.Graph("layernorm", io_dtype=io, compute_dtype="float32")
    x = g.tensor("x", dims=dims)
    s, b = g.tensor("scale", dims=_param_dims(dims)), g.tensor("bias", dims=_param_dims(dims))
    return _outputs(g, g.layernorm(phase, x, s, b, epsilon=epsilon))


def rmsnorm(dims, io, phase, bias) -> sigdnn.Graph:
    g = sigdnn.Graph("rmsnorm", io_dtype=io, compute_dtype="float32")
    x = g.tensor("x", dims=dims)
    s = g.tensor("scale", dims=_param_dims(dims))
    b = g.tensor("bias", dims=_param_dims(dims)) if bias else None
    return _outputs(g, g.rmsnorm(phase, x, s, b, epsilon=1e-5))


def layernorm_backward(dims, io) -> sigdnn.Graph:
    g = sigdnn.Graph("layernorm_backward", io_dtype=io, compute_dtype="float32")
    dy, x, s = g.tensor("dy", dims=dims), g.tensor("x", dims=dims), g.tensor("scale", dims=_param_dims(dims))
    stats = (*dims[:-1], 1)
    mean, inv = g.tensor("mean", dims=stats, dtype="float32"), g.tensor("inv", dims=stats, dtype="float32")
    return _outputs(g, g.layernorm_backward(dy, x, s, mean, inv))


def rmsnorm_backward(dims, io, dbias) -> sigdnn.Graph:
    g = sigdnn.Graph("rmsnorm_backward", io_dtype=io, compute_dtype="float32")
    dy, x, s = g.tensor("dy", dims=dims), g.tensor("x", dims=dims), g.tensor("scale", dims=_param_dims(dims))
    inv = g.tensor("inv", dims=(*dims[:-1], 1), dtype="float32")
    return _outputs(g, g.rmsnorm_backward(dy, x, s, inv, has_dbias=dbias))


def batchnorm_inference(dims, layout, io) -> sigdnn.Graph:
    g = sigdnn.Graph("batchnorm_inference", io_dtype=io, compute_dtype="float32")
    x = g.tensor("x", dims=dims, layout=layout)
    ps = [g.tensor(p, dims=(1, dims[1], 1, 1)) for p in ("mean", "inv_variance", "scale", "bias")]
    return _outputs(g, g.batchnorm_inference(x, *ps))


def batchnorm(dims, layout, io, running) -> sigdnn.Graph:
    g = sigdnn.Graph("batchnorm", io_dtype=io, compute_dtype="float32")
    x = g.tensor("x", dims=dims, layout=layout)
    cd = (1, dims[1], *(1,) * (len(dims) - 2))
    s, b = g.tensor("scale", dims=cd), g.tensor("bias", dims=cd)
    if running:
        rm, rv = g.tensor("rm", dims=cd, dtype="float32"), g.tensor("rv", dims=cd, dtype="float32")
        return _outputs(g, g.batchnorm(x, s, b, rm, rv, 1e-5, 0.1))
    return _outputs(g, g.batchnorm(x, s, b, None, None, 1e-5, None))


def batchnorm_backward(dims, layout, io) -> sigdnn.Graph:
    g = sigdnn.Graph("batchnorm_backward", io_dtype=io, compute_dtype="float32")
    dy, x = g.tensor("dy", dims=dims, layout=layout), g.tensor("x", dims=dims, layout=layout)
    ps = [g.tensor(p, dims=(1, dims[1], 1, 1), dtype="float32") for p in ("scale", "mean", "inv_variance")]
    return _outputs(g, g.batchnorm_backward(dy, x, *ps))


def reduction(dims, out, layout, io, mode) -> sigdnn.Graph:
    g = sigdnn.Graph("reduction", io_dtype=io, compute_dtype="float32")
    x = g.tensor("x", dims=dims, layout=layout) if layout else g.tensor("x", dims=dims)
    return _outputs(g, g.reduction(x, mode, out))


_NUMPY = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def awkward_rows(rows: int, n: int, dtype: str, seed: int = 0) -> np.ndarray:
    """Rows far from zero relative to their spread, with the cases a shortcut gets wrong mixed in.

    Row 0 is constant; row 1 is noise around 0 but for a first element of 1e4 (no estimate of the mean);
    row 2 starts six deviations out; the rest are an offset plus noise small beside it: 1e4 and a few ulps
    of it in 16 bits, 1e3 and std 1 in float32 (where 1e4 and std 1 already fail the two-pass default's y
    at 1000 columns, one ulp of its float32 mean being 1e-3 of a deviation).
    """
    rng = np.random.default_rng(seed)
    offset, spread = (1e3, 1.0) if dtype == "float32" else (1e4, 200.0)
    x = offset + spread * rng.standard_normal((rows, n))
    x[0] = 3.7
    x[1] = rng.standard_normal(n)
    x[1, 0] = 1e4
    x[2, 0] = offset + 6 * spread
    return x.astype(_NUMPY[dtype])


def layernorm_inputs(g: sigdnn.Graph, x: np.ndarray, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = x.shape[-1]
    return {"x": x, "scale": (1 + 0.1 * rng.standard_normal((1, n))).astype(x.dtype),
            "bias": (0.1 * rng.standard_normal((1, n))).astype(x.dtype)}  # fmt: skip


def row_cases(io_dtypes=IO) -> list[Case]:
    cases: list[Case] = []
    for io in io_dtypes:
        for dims in ROWS:
            tag = f"{io}-{'x'.join(map(str, dims))}"
            cases += [
                (f"softmax-{tag}", "cutile.softmax", lambda d=dims, io=io: softmax(d, io, False, True)),
                (f"logsoftmax-{tag}", "cutile.softmax", lambda d=dims, io=io: softmax(d, io, True, False)),
                (f"layernorm-train-{tag}", "cutile.layernorm", lambda d=dims, io=io: layernorm(d, io, "training")),
                (f"layernorm-infer-{tag}", "cutile.layernorm", lambda d=dims, io=io: layernorm(d, io, "inference")),
                (f"rmsnorm-train-{tag}", "cutile.rmsnorm", lambda d=dims, io=io: rmsnorm(d, io, "training", False)),
                (f"rmsnorm-infer-bias-{tag}", "cutile.rmsnorm", lambda d=dims, io=io: rmsnorm(d, io, "inference", True)),
                (f"layernorm-bwd-{tag}", "cutile.layernorm_backward", lambda d=dims, io=io: layernorm_backward(d, io)),
                (f"rmsnorm-bwd-{tag}", "cutile.rmsnorm_backward", lambda d=dims, io=io: rmsnorm_backward(d, io, False)),
                (f"rmsnorm-bwd-dbias-{tag}", "cutile.rmsnorm_backward",
                 lambda d=dims, io=io: rmsnorm_backward(d, io, True)),
            ]  # fmt: skip
    return cases


def channel_cases(io_dtypes=IO) -> list[Case]:
    cases: list[Case] = []
    for io in io_dtypes:
        for dims, layout in CHANNELS:
            tag = f"{io}-{layout}-{'x'.join(map(str, dims))}"
            cases += [
                (f"bn-infer-{tag}", "cutile.batchnorm_inference", lambda d=dims, la=layout, io=io: batchnorm_inference(d, la, io)),
                (f"bn-train-{tag}", "cutile.batchnorm", lambda d=dims, la=layout, io=io: batchnorm(d, la, io, False)),
                (f"bn-train-running-{tag}", "cutile.batchnorm", lambda d=dims, la=layout, io=io: batchnorm(d, la, io, True)),
                (f"bn-bwd-{tag}", "cutile.batchnorm_backward", lambda d=dims, la=layout, io=io: batchnorm_backward(d, la, io)),
            ]  # fmt: skip
    return cases


def reduction_cases(io_dtypes=IO) -> list[Case]:
    cases: list[Case] = []
    for k, (dims, out, layout) in enumerate(REDUCTIONS):
        io = io_dtypes[k % len(io_dtypes)]
        for mode in REDUCTION_MODES:
            tag = f"{mode}-{io}-{'x'.join(map(str, dims))}-to-{'x'.join(map(str, out))}"
            cases.append((f"reduction-{tag}", "cutile.reduction",
                          lambda d=dims, o=out, la=layout, io=io, m=mode: reduction(d, o, la, io, m)))  # fmt: skip
    return cases


def layout_cases() -> list[Case]:
    """Reduced axes innermost in memory although not last: strided softmax and channels-last layernorm."""

    def strided_softmax() -> sigdnn.Graph:
        g = sigdnn.Graph("softmax_strided", io_dtype="float32", compute_dtype="float32")
        x = g.tensor("x", dims=(7, 33), strides=(1, 7))
        return _outputs(g, g.softmax(x, axes=(0,), generate_stats=True))

    def channels_last_layernorm() -> sigdnn.Graph:
        g = sigdnn.Graph("layernorm_nhwc", io_dtype="bfloat16", compute_dtype="float32")
        x = g.tensor("x", dims=(2, 48, 3, 5), layout="NHWC")
        s, b = g.tensor("scale", dims=(1, 48, 1, 1)), g.tensor("bias", dims=(1, 48, 1, 1))
        return _outputs(g, g.layernorm("training", x, s, b, epsilon=1e-3))

    return [
        ("softmax-strided", "cutile.softmax", strided_softmax),
        ("layernorm-nhwc", "cutile.layernorm", channels_last_layernorm),
    ]


def all_cases() -> list[Case]:
    return row_cases() + layout_cases() + channel_cases() + reduction_cases()
