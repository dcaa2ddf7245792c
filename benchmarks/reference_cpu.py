"""The reference backend on the CPU, side by side in one run with torch float32, torch float64 and onnx.reference.

sigdnn's reference computes in float64 and rounds once to each output's
dtype, so the like-for-like contender is torch float64 on the same values;
torch float32 is what a user could run instead, and onnx.reference
(ReferenceEvaluator, float32) is the other NumPy reference a user might
reach for. sigdnn runs through ``Executor("reference")`` (the user's path:
variant pack, widening, rounding, outputs).

Every case's contenders run interleaved (sigdnn, torch f64, torch f32, onnx,
repeated) and each reports its fastest run, so a busy machine slows
all alike and the minimum is the run least disturbed. Pinned to one core
(--cores 1) the clock is the process's CPU time (user + system, every
thread): on a machine shared with other work, a contender's time slices
then do not count against it, where wall time would charge it for its
neighbours' (--clock wall to override). The tiny-add chain, a
few milliseconds a run, takes ten times the runs. A contender whose warm-up
run takes more than --slow seconds is timed by that run alone.
onnx.reference's ConvTranspose (conv dgrad) loops image by image in Python,
minutes a layer: it runs on one image and its time counts eight times.

Targets, as geometric means over the cases below (the tiny-add chain
excepted): sigdnn / torch f64 <= 1; onnx.reference / sigdnn >= 2 where
onnx.reference has the op; and on a 1,000-node chain of tiny adds, at most
10 us of executor time per node.

Run: python benchmarks/reference_cpu.py [--repeat 3] [--only SUBSTRING] [--cores N] [--slow 10]
(--cores pins the process to its first N cores before NumPy, BLAS and torch
start their threads.)
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import attrs

# Imported in main(), after --cores has pinned the process: OpenBLAS and torch size their thread
# pools from the cores they may use when they load.
np: Any = None
torch: Any = None
sigdnn: Any = None

# ResNet-50 (v1.5) convolutions at batch 8: name, C, K, H=W, kernel, stride, padding
RESNET50 = [
    ("stem 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 3),
    ("3x3 64->64 @56", 64, 64, 56, 3, 1, 1),
    ("1x1 64->256 @56", 64, 256, 56, 1, 1, 0),
    ("1x1 256->64 @56", 256, 64, 56, 1, 1, 0),
    ("3x3/2 128->128 @56", 128, 128, 56, 3, 2, 1),
    ("1x1/2 256->512 @56", 256, 512, 56, 1, 2, 0),
    ("3x3 256->256 @14", 256, 256, 14, 3, 1, 1),
    ("3x3 512->512 @7", 512, 512, 7, 3, 1, 1),
    ("1x1 2048->512 @7", 2048, 512, 7, 1, 1, 0),
]
CONTENDERS = ("sigdnn", "torch f64", "torch f32", "onnx f32")
Fn = Callable[[], object]


@attrs.define
class Case:
    name: str
    fns: dict[str, Fn]  # contender -> callable; a missing contender is "n/a"
    note: str = ""
    runs: int = 1  # times --repeat: cheap cases take more runs to find an undisturbed one


def _run_executor(graph: Any, values: dict[str, Any]) -> Fn:
    """A prepared plan and its variant pack: the timed call is execute() alone."""
    ex = sigdnn.Executor("reference")
    plan = ex.prepare(graph)
    return lambda: ex.execute(plan, values)


def _as_layout(a: Any, dtype: Any, channels_last: bool) -> Any:
    """a (logical N, C, spatial) as dtype, in NCHW or NHWC memory; the view keeps the logical dims."""
    a = a.astype(dtype)
    if not channels_last or a.ndim != 4:
        return a
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _torch_pair(arrays: list[Any]) -> dict[str, list[Any]]:
    """The same values as torch float64 and float32 tensors (channels-last views stay channels-last)."""
    t64 = [torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in arrays]
    return {"torch f64": t64, "torch f32": [t.float() for t in t64]}


def _onnx(node: Any, inputs: dict[str, Any], outputs: list[str], opset: int = 23) -> Fn:
    """A one-node ONNX model on float32 inputs, run by onnx.reference.ReferenceEvaluator."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph(
        [node] if not isinstance(node, list) else node,
        "bench",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
    )
    evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    feeds = {n: np.asarray(a, dtype=np.float32) for n, a in inputs.items()}
    return lambda: evaluator.run(None, feeds)


@attrs.frozen
class Scaled:
    """A contender run on a part of the case (one image of the batch): fastest() multiplies its time by ``times``."""

    fn: Fn
    times: int

    def __call__(self) -> object:
        return self.fn()


def conv_cases(io_dtype: str, channels_last: bool) -> list[Case]:
    from onnx import helper

    F = torch.nn.functional
    rng = np.random.default_rng(0)
    dtype = {"float32": np.float32, "float16": np.float16}[io_dtype]
    label = f"{'NHWC' if channels_last else 'NCHW'} {'f16' if io_dtype == 'float16' else 'f32'}"
    layout = "NHWC" if channels_last else None
    out = []
    for name, c, k, h, r, s, p in RESNET50:
        o = (h + 2 * p - r) // s + 1
        x = _as_layout(rng.standard_normal((8, c, h, h)), dtype, channels_last)
        w = _as_layout(rng.standard_normal((k, c, r, r)), dtype, channels_last)
        dy = _as_layout(rng.standard_normal((8, k, o, o)), dtype, channels_last)
        t = _torch_pair([x, w, dy])
        conv = {"padding": (p, p), "stride": (s, s), "dilation": (1, 1)}

        g = sigdnn.Graph("fprop", io_dtype=io_dtype, compute_dtype="float32")
        gx, gw = g.tensor("x", x.shape, layout=layout), g.tensor("w", w.shape, layout=layout)
        g.conv_fprop(gx, gw, **conv).set_output(True).set_name("y")
        onnx_ok = not channels_last  # ONNX's Conv is NCHW only
        attributes = {"pads": [p] * 4, "strides": [s, s]}
        fns = {
            "sigdnn": _run_executor(g, {"x": x, "w": w}),
            **{n: lambda a=a, s=s, p=p: F.conv2d(a[0], a[1], stride=s, padding=p) for n, a in t.items()},
        }
        if onnx_ok:
            fns["onnx f32"] = _onnx(helper.make_node("Conv", ["x", "w"], ["y"], **attributes), {"x": x, "w": w}, ["y"])
        out.append(Case(f"conv fprop {name} {label}", fns))

        g = sigdnn.Graph("dgrad", io_dtype=io_dtype, compute_dtype="float32")
        gdy, gw = g.tensor("dy", dy.shape, layout=layout), g.tensor("w", w.shape, layout=layout)
        g.conv_dgrad(gdy, gw, **conv, dims=x.shape).set_output(True).set_name("dx")
        fns = {
            "sigdnn": _run_executor(g, {"dy": dy, "w": w}),
            **{
                n: lambda a=a, s=s, p=p: torch.nn.grad.conv2d_input(a[0].shape, a[1], a[2], stride=s, padding=p)
                for n, a in t.items()
            },
        }
        if onnx_ok:
            extra = h + 2 * p - r - (o - 1) * s  # rows the forward's stride skipped at the end
            node = helper.make_node("ConvTranspose", ["dy", "w"], ["dx"], **attributes, output_padding=[extra] * 2)
            fns["onnx f32"] = Scaled(_onnx(node, {"dy": dy[:1], "w": w}, ["dx"]), len(dy))
        note = "onnx: one image's time x 8: its ConvTranspose loops image by image, minutes a layer" if onnx_ok else ""
        out.append(Case(f"conv dgrad {name} {label}", fns, note))

        g = sigdnn.Graph("wgrad", io_dtype=io_dtype, compute_dtype="float32")
        gx, gdy = g.tensor("x", x.shape, layout=layout), g.tensor("dy", dy.shape, layout=layout)
        g.conv_wgrad(gx, gdy, **conv, dims=w.shape).set_output(True).set_name("dw")
        fns = {
            "sigdnn": _run_executor(g, {"x": x, "dy": dy}),
            **{
                n: lambda a=a, s=s, p=p: torch.nn.grad.conv2d_weight(a[0], a[1].shape, a[2], stride=s, padding=p)
                for n, a in t.items()
            },
        }
        out.append(Case(f"conv wgrad {name} {label}", fns, "ONNX has no weight-gradient op"))
    return out


def matmul_cases() -> list[Case]:
    from onnx import helper

    rng = np.random.default_rng(1)
    out = []
    for n, io_dtype, dtype in ((2048, "float32", np.float32), (1024, "bfloat16", sigdnn.DataType.BFLOAT16.numpy)):
        a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
        g = sigdnn.Graph("mm", io_dtype=io_dtype, compute_dtype="float32")
        g.matmul(g.tensor("a", a.shape), g.tensor("b", b.shape)).set_output(True).set_name("c")
        t = _torch_pair([a, b])
        fns = {
            "sigdnn": _run_executor(g, {"a": a, "b": b}),
            **{k: lambda v=v: v[0] @ v[1] for k, v in t.items()},
            "onnx f32": _onnx(helper.make_node("MatMul", ["a", "b"], ["c"]), {"a": a, "b": b}, ["c"]),
        }
        out.append(Case(f"matmul {n}^3 {'f32' if io_dtype == 'float32' else 'bf16'}", fns))
    return out


def pointwise_cases() -> list[Case]:
    from onnx import helper

    F = torch.nn.functional
    rng = np.random.default_rng(2)
    size = 1 << 24
    a, b = (rng.standard_normal(size).astype(np.float16) for _ in range(2))
    t = _torch_pair([a, b])
    out = []
    for mode, arity, torch_fn, onnx_nodes in (
        ("add", 2, lambda v: v[0] + v[1], [helper.make_node("Add", ["a", "b"], ["y"])]),
        ("relu_fwd", 1, lambda v: F.relu(v[0]), [helper.make_node("Relu", ["a"], ["y"])]),
        ("gelu_fwd", 1, lambda v: F.gelu(v[0]), [helper.make_node("Gelu", ["a"], ["y"])]),
    ):
        g = sigdnn.Graph(mode, io_dtype="float16", compute_dtype="float32")
        ins = [g.tensor(n, (size,)) for n in "ab"[:arity]]
        g.pointwise(mode, *ins).set_output(True).set_name("y")
        values = dict(zip("ab", (a, b)[:arity]))
        fns = {
            "sigdnn": _run_executor(g, values),
            **{k: lambda v=v, f=torch_fn: f(v) for k, v in t.items()},
            "onnx f32": _onnx(onnx_nodes, values, ["y"]),
        }
        out.append(Case(f"{mode} 16M f16", fns))
    return out


def norm_cases() -> list[Case]:
    from onnx import helper

    F = torch.nn.functional
    rng = np.random.default_rng(3)
    out = []

    x = rng.standard_normal((8, 256, 56, 56)).astype(np.float32)
    s, b = (rng.standard_normal((1, 256, 1, 1)).astype(np.float32) for _ in range(2))
    rm, rv = np.zeros((1, 256, 1, 1), np.float32), np.ones((1, 256, 1, 1), np.float32)
    g = sigdnn.Graph("bn", io_dtype="float32", compute_dtype="float32")
    ports = {n: g.tensor(n, a.shape) for n, a in (("x", x), ("s", s), ("b", b), ("rm", rm), ("rv", rv))}
    for tensor, port in zip(
        g.batchnorm(*ports.values(), epsilon=1e-5, momentum=0.1), ["y", "mean", "inv", "nrm", "nrv"]
    ):
        tensor.set_output(True).set_name(port)
    t = _torch_pair([x, s.ravel(), b.ravel(), rm.ravel(), rv.ravel()])

    def bn(v):
        return F.batch_norm(v[0], v[3].clone(), v[4].clone(), v[1], v[2], training=True, momentum=0.1, eps=1e-5)

    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "rm", "rv"], ["y", "nrm", "nrv"], training_mode=1, momentum=0.9
    )
    flat = {"x": x, "s": s.ravel(), "b": b.ravel(), "rm": rm.ravel(), "rv": rv.ravel()}
    fns = {
        "sigdnn": _run_executor(g, {"x": x, "s": s, "b": b, "rm": rm, "rv": rv}),
        **{k: lambda v=v: bn(v) for k, v in t.items()},
        "onnx f32": _onnx(node, flat, ["y", "nrm", "nrv"]),
    }
    out.append(Case("batchnorm train 8x256x56x56 f32", fns))

    x2 = rng.standard_normal((8192, 4096)).astype(np.float32)
    s2, b2 = (rng.standard_normal((1, 4096)).astype(np.float32) for _ in range(2))
    t2 = _torch_pair([x2, s2.ravel(), b2.ravel()])
    g = sigdnn.Graph("ln", io_dtype="float32", compute_dtype="float32")
    y, mean, inv = g.layernorm("training", g.tensor("x", x2.shape), g.tensor("s", s2.shape), g.tensor("b", b2.shape))
    for tensor, port in ((y, "y"), (mean, "mean"), (inv, "inv")):
        tensor.set_output(True).set_name(port)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=-1, epsilon=1e-5)
    fns = {
        "sigdnn": _run_executor(g, {"x": x2, "s": s2, "b": b2}),
        **{k: lambda v=v: F.layer_norm(v[0], (4096,), v[1], v[2], 1e-5) for k, v in t2.items()},
        "onnx f32": _onnx(node, {"x": x2, "s": s2.ravel(), "b": b2.ravel()}, ["y", "mean", "inv"]),
    }
    out.append(Case("layernorm train 8192x4096 f32", fns))

    g = sigdnn.Graph("softmax", io_dtype="float32", compute_dtype="float32")
    g.softmax(g.tensor("x", x2.shape))[0].set_output(True).set_name("y")
    fns = {
        "sigdnn": _run_executor(g, {"x": x2}),
        **{k: lambda v=v: torch.softmax(v[0], -1) for k, v in t2.items()},
        "onnx f32": _onnx(helper.make_node("Softmax", ["x"], ["y"], axis=-1), {"x": x2}, ["y"]),
    }
    out.append(Case("softmax 8192x4096 f32", fns))

    q, k, v = (rng.standard_normal((1, 8, 1024, 64)).astype(np.float32) for _ in range(3))
    tq = _torch_pair([q, k, v])
    g = sigdnn.Graph("sdpa", io_dtype="float32", compute_dtype="float32")
    g.sdpa(*(g.tensor(n, q.shape) for n in "qkv"), attn_scale=0.125)[0].set_output(True).set_name("o")
    fns = {
        "sigdnn": _run_executor(g, {"q": q, "k": k, "v": v}),
        **{n: lambda a=a: F.scaled_dot_product_attention(*a) for n, a in tq.items()},
        "onnx f32": _onnx(helper.make_node("Attention", ["q", "k", "v"], ["o"]), {"q": q, "k": k, "v": v}, ["o"]),
    }
    out.append(Case("sdpa 1x8x1024x64 f32", fns))
    return out


CHAIN = 1000


def chain_case() -> Case:
    """A 1,000-node chain of adds on 4-element tensors: what each contender spends per node."""
    from onnx import helper

    g = sigdnn.Graph("chain", io_dtype="float32", compute_dtype="float32")
    y, b = g.tensor("x", (4,)), g.tensor("b", (4,))
    for i in range(CHAIN):
        y = g.pointwise("add", y, b, name=f"add{i}")
    y.set_output(True).set_name("y")
    x, bias = np.ones(4, np.float32), np.full(4, 0.5, np.float32)
    t = _torch_pair([x, bias])

    def eager(v):
        y = v[0]
        for _ in range(CHAIN):
            y = y + v[1]
        return y

    names = ["x", *(f"y{i}" for i in range(CHAIN - 1)), "y"]
    nodes = [helper.make_node("Add", [names[i], "b"], [names[i + 1]]) for i in range(CHAIN)]
    fns = {
        "sigdnn": _run_executor(g, {"x": x, "b": bias}),
        **{k: lambda v=v: eager(v) for k, v in t.items()},
        "onnx f32": _onnx(nodes, {"x": x, "b": bias}, ["y"]),
    }
    return Case(f"chain of {CHAIN} tiny adds (time per node)", fns, runs=10)


def fastest(fns: dict[str, Fn], repeat: int, slow: float, clock: Callable[[], float]) -> dict[str, float]:
    """Each contender's fastest of ``repeat`` interleaved runs after a warm-up run.

    The warm-up counts only for a contender slower than ``slow`` seconds: that one run then says how slow it is."""
    scale = {name: getattr(fn, "times", 1) for name, fn in fns.items()}
    warm: dict[str, float] = {}
    for name, fn in fns.items():
        t0 = clock()
        fn()
        warm[name] = (clock() - t0) * scale[name]
    best = {name: seconds for name, seconds in warm.items() if seconds > slow}
    for _ in range(repeat):
        for name, fn in fns.items():
            if warm[name] > slow:
                continue
            t0 = clock()
            fn()
            best[name] = min(best.get(name, math.inf), (clock() - t0) * scale[name])
    return best


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _load(cores: int | None) -> None:
    """Pin to the first ``cores`` cores, then import NumPy, torch and sigdnn."""
    global np, torch, sigdnn
    if cores:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    import numpy
    import torch as torch_module

    import sigdnn as sigdnn_module
    import sigdnn.dtypes

    np, torch, sigdnn = numpy, torch_module, sigdnn_module


def _cell(seconds: float | None, per_node: bool) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds / CHAIN * 1e6:.1f}us" if per_node else f"{seconds * 1e3:.1f}ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--cores", type=int, default=None, help="pin to this many cores first")
    parser.add_argument("--slow", type=float, default=10.0, help="time a contender once when a run takes this long")
    parser.add_argument("--clock", choices=("cpu", "wall"), default=None,
                        help="cpu: the process's CPU time, user + system (the default with --cores 1); wall: elapsed")  # fmt: skip
    args = parser.parse_args()
    _load(args.cores)
    import onnx

    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(cores)
    use_cpu = args.clock == "cpu" or (args.clock is None and cores == 1)
    clock = time.process_time if use_cpu else time.perf_counter
    print(f"date: {datetime.datetime.now().isoformat(timespec='minutes')}")
    print(
        f"machine: {platform.machine()} {cores} cores (nproc {os.cpu_count()}); python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads), onnx {onnx.__version__}"
    )
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"fastest of {args.repeat} interleaved runs after a warm-up; the warm-up alone for a contender slower than "
          f"{args.slow}s; clock: {'process CPU time (user + system)' if use_cpu else 'wall'}")  # fmt: skip
    header = "| case | " + " | ".join(CONTENDERS) + " | sigdnn / torch f64 | onnx / sigdnn |"
    print(header)
    print("|" + "---|" * (len(CONTENDERS) + 3))
    builders = [lambda: conv_cases("float32", False), lambda: conv_cases("float16", True), matmul_cases,
                pointwise_cases, norm_cases, lambda: [chain_case()]]  # fmt: skip
    vs_torch: list[float] = []
    vs_onnx: list[float] = []
    per_node = float("nan")
    for build in builders:
        for case in build():
            if args.only not in case.name:
                continue
            best = fastest(case.fns, args.repeat * case.runs, args.slow, clock)
            chain = case.name.startswith("chain")
            mine, f64, onnx_time = best["sigdnn"], best["torch f64"], best.get("onnx f32")
            if chain:
                per_node = mine / CHAIN * 1e6
            else:
                vs_torch.append(mine / f64)
                if onnx_time is not None:
                    vs_onnx.append(onnx_time / mine)
            cells = " | ".join(_cell(best.get(c), chain) for c in CONTENDERS)
            speedup = f"{onnx_time / mine:.2f}x" if onnx_time is not None else "n/a"
            note = f" ({case.note})" if case.note else ""
            print(f"| {case.name}{note} | {cells} | {mine / f64:.2f} | {speedup} |", flush=True)
            del case
    print()
    print(f"geometric mean sigdnn / torch f64 ({len(vs_torch)} cases, target <= 1): {geomean(vs_torch):.2f}")
    print(f"geometric mean onnx.reference / sigdnn ({len(vs_onnx)} cases, target >= 2): {geomean(vs_onnx):.2f}x")
    print(f"executor time per node on the {CHAIN}-node tiny chain (target <= 10 us): {per_node:.1f} us")
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
