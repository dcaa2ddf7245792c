"""cuTile backend against torch on the same GPU, in one run: pointwise modes, fusion, executor host cost.

Run on the device: ``python3 benchmarks/gpu_cutile.py [--json out.json] [--modes a,b] [--only PARTS]``.
Every figure is a median over CUDA-event-timed repetitions after a warm-up,
with torch's time for the same work measured beside it:

* pointwise: every mode on 256 MiB bfloat16 tensors (2^27 elements),
  effective bandwidth = (inputs + output) bytes / time, against torch's op
  where torch has one, and against torch's copy (the roofline). Kernels are
  timed as torch's ops are, enqueued back to back (their bound launch);
* fusion: a region of 4 pointwise ops (bias add, gelu, scale, residual add)
  as one kernel against torch eager running the 4 ops;
* host cost: a prepared 100-node chain of float32 adds on 4096 elements,
  wall clock per node around ``execute`` (bound path, then CUDA-graph
  replay), against torch eager's per-op time;
* norms: softmax, layernorm, rmsnorm (forward, backward) on 16384 x 4096
  rows and batchnorm training (NHWC 64x256x56x56) through the builder the
  registry ranks first, each against torch;
* matmul: the cuTile GEMM at 4096^3 and 8192^3 bfloat16 at its default
  configuration (bound launch on the executor's stream) against
  torch.matmul, and matmul + bias + gelu as one fused region against torch
  eager doing the three.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time

import torch
from cuda_timing import median_ms

import sigdnn
from sigdnn.graph.ops.pointwise import MODES

N = 1 << 27  # 256 MiB of bfloat16
POSITIVE = {"sqrt", "rsqrt", "log", "pow"}


def kernel_ms(ex, plan, iters: int = 10, repeats: int = 20, warmup: int = 30) -> float:
    """Milliseconds of a plan's one kernel as the GPU sees it: its bound launch enqueued ``iters`` times back to
    back, as torch's ops are timed (execute() would add its host work and a synchronize, which leave the GPU
    idle in between), with the events on the stream the plan's last execute ran on (torch's, for torch
    tensors)."""
    bound = ex.memory.bound(plan, False)
    (launch,) = bound._launches
    stream = bound.execution.stream
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream else contextlib.nullcontext():
        return median_ms(launch, iters, repeats, warmup)


def torch_op(mode: str):
    """torch's own op for a mode (inputs as given to the graph), or None."""
    F = torch.nn.functional
    aten = torch.ops.aten
    table = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "max": torch.maximum,
        "min": torch.minimum, "mod": torch.fmod, "pow": torch.pow, "cmp_eq": torch.eq, "cmp_lt": torch.lt,
        "abs": torch.abs, "neg": torch.neg, "ceil": torch.ceil, "floor": torch.floor, "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "exp": torch.exp, "log": torch.log, "sin": torch.sin,
        "cos": torch.cos, "tan": torch.tan, "erf": torch.erf, "identity": torch.clone, "relu_fwd": torch.relu,
        "tanh_fwd": torch.tanh, "sigmoid_fwd": torch.sigmoid, "elu_fwd": F.elu, "gelu_fwd": F.gelu,
        "gelu_approx_tanh_fwd": lambda x: F.gelu(x, approximate="tanh"), "softplus_fwd": F.softplus,
        "swish_fwd": F.silu, "add_square": lambda a, b: torch.addcmul(a, b, b),
        "gelu_bwd": lambda dy, x: aten.gelu_backward(dy, x),
        "gelu_approx_tanh_bwd": lambda dy, x: aten.gelu_backward(dy, x, approximate="tanh"),
        "swish_bwd": lambda dy, x: aten.silu_backward(dy, x), "relu_bwd": lambda dy, x: aten.threshold_backward(dy, x, 0),
        "softplus_bwd": lambda dy, x: aten.softplus_backward(dy, x, 1.0, 20.0),
        "binary_select": lambda a, b, m: torch.where(m != 0, a, b),
    }  # fmt: skip
    return table.get(mode)


def bench_modes(modes: list[str]) -> list[dict]:
    rows = []
    x = torch.empty(N, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
    copy_ms = median_ms(lambda: x.clone(), iters=1, warmup=3)
    copy_tbs = 2 * N * 2 / copy_ms / 1e9
    print(f"torch copy: {copy_tbs:.2f} TB/s", flush=True)
    for mode in modes:
        arity = MODES[mode].arity
        g = sigdnn.Graph(mode, io_dtype="bfloat16", compute_dtype="float32")
        ins = [g.tensor(f"x{k}", dims=(N,)) for k in range(arity)]
        kw = {"axis": 0} if mode == "gen_index" else {}
        g.pointwise(mode, *ins, **kw).set_output(True).set_name("y")
        tensors = [torch.empty(N, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2) for _ in range(arity)]
        if mode in POSITIVE:
            tensors[0].abs_()
        out = torch.empty(N, device="cuda", dtype=torch.bfloat16)
        ex = sigdnn.Executor("gpu")
        plan = ex.prepare(g)
        pack = {**{f"x{k}": t for k, t in enumerate(tensors)}, "y": out}
        t0 = time.perf_counter()
        ex.execute(plan, pack, to_host=False)
        first_s = time.perf_counter() - t0
        ms = kernel_ms(ex, plan)
        tbs = (arity + 1) * N * 2 / ms / 1e9
        op = torch_op(mode)
        torch_tbs = None
        if op is not None:
            tms = median_ms(lambda op=op, tensors=tensors: op(*tensors), warmup=30)
            torch_tbs = (arity + 1) * N * 2 / tms / 1e9
        rows.append({"mode": mode, "tb_s": tbs, "torch_tb_s": torch_tbs, "copy_tb_s": copy_tbs, "first_s": first_s})
        vs = f"{torch_tbs:6.2f}" if torch_tbs else "   n/a"
        print(
            f"{mode:22s} {tbs:6.2f} TB/s  torch {vs}  of copy {tbs / copy_tbs:5.0%}  (first {first_s:.1f}s)", flush=True
        )
    return rows


def bench_fusion() -> dict:
    rows, cols = N // 4096, 4096
    g = sigdnn.Graph("fused4", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", dims=(rows, cols))
    b = g.tensor("b", dims=(1, cols))
    s = g.scalar("s", 0.75)
    y = g.pointwise("add", g.pointwise("mul", g.pointwise("gelu_fwd", g.pointwise("add", x, b)), s), x)
    y.set_output(True).set_name("y")
    xt = torch.empty(rows, cols, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
    bt = torch.empty(1, cols, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
    out = torch.empty_like(xt)
    ex = sigdnn.Executor("gpu")
    plan = ex.prepare(g)
    assert len(plan.steps) == 1, plan.describe()
    pack = {"x": xt, "b": bt, "y": out}
    ex.execute(plan, pack, to_host=False)
    fused = kernel_ms(ex, plan)
    eager = median_ms(lambda: torch.add(torch.nn.functional.gelu(xt + bt) * 0.75, xt), warmup=30)
    result = {
        "fused_ms": fused,
        "torch_eager_ms": eager,
        "speedup": eager / fused,
        "fused_tb_s": 2 * N * 2 / fused / 1e9,
    }
    print(f"fusion (4 ops, bf16 256 MiB): fused {fused:.3f} ms ({result['fused_tb_s']:.2f} TB/s), "
          f"torch eager {eager:.3f} ms: {result['speedup']:.2f}x torch", flush=True)  # fmt: skip
    return result


def bench_host(nodes: int = 100, elems: int = 4096, reps: int = 300) -> dict:
    """Host wall time a node of ``execute`` on a 100-node chain of small adds (bound launches, CUDA-graph replay,
    fused) against torch eager's per op."""
    g = sigdnn.Graph("chain", io_dtype="float32", compute_dtype="float32")
    v = g.tensor("x", dims=(elems,))
    b = g.tensor("b", dims=(elems,))
    for _ in range(nodes):
        v = g.pointwise("add", v, b)
    v.set_output(True).set_name("y")
    x = torch.randn(elems, device="cuda")
    bt = torch.randn(elems, device="cuda")
    out = torch.empty(elems, device="cuda")
    pack = {"x": x, "b": bt, "y": out}
    result = {}
    for label, kw in (("bound", {"fusion": False}), ("cuda_graph", {"fusion": False, "cuda_graphs": True}),
                      ("fused", {})):  # fmt: skip
        ex = sigdnn.Executor("gpu", **kw)
        plan = ex.prepare(g)
        for _ in range(5):
            ex.execute(plan, pack, to_host=False)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            ex.execute(plan, pack, to_host=False)
        result[label] = {"us_per_node_wall": (time.perf_counter() - t0) / reps / nodes * 1e6}
        torch.cuda.synchronize()
        want = x + nodes * bt
        assert torch.allclose(out, want, rtol=1e-4, atol=1e-3), label
    t = x.clone()
    for _ in range(5):
        for _ in range(nodes):
            t = t + bt
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        t = x
        for _ in range(nodes):
            t = t + bt
    torch.cuda.synchronize()
    result["torch_eager"] = {"us_per_node_wall": (time.perf_counter() - t0) / reps / nodes * 1e6}
    for k, r in result.items():
        print(f"host cost {k:12s}: {r['us_per_node_wall']:.2f} us/node (wall)", flush=True)
    return result


# --- normalizations, softmax, batchnorm (row and channel kernels) -------------------------------------------------

NORM_ROWS, NORM_COLS = 16384, 4096
BN_DIMS = (64, 256, 56, 56)


def _norm_graph(kind: str) -> sigdnn.Graph:
    """The benchmarked node on 16384 x 4096 bfloat16 rows (batchnorm: NHWC 64x256x56x56)."""
    g = sigdnn.Graph(kind, io_dtype="bfloat16", compute_dtype="float32")
    dims, w = (NORM_ROWS, NORM_COLS), (1, NORM_COLS)
    stats = (NORM_ROWS, 1)
    if kind == "softmax":
        outs = g.softmax(g.tensor("x", dims=dims), axes=(1,))
    elif kind == "layernorm":
        outs = g.layernorm("training", g.tensor("x", dims=dims), g.tensor("scale", dims=w), g.tensor("bias", dims=w),
                           epsilon=1e-5)  # fmt: skip
    elif kind == "rmsnorm":
        outs = g.rmsnorm("training", g.tensor("x", dims=dims), g.tensor("scale", dims=w), epsilon=1e-5)
    elif kind == "layernorm_backward":
        outs = g.layernorm_backward(g.tensor("dy", dims=dims), g.tensor("x", dims=dims), g.tensor("scale", dims=w),
                                    g.tensor("mean", dims=stats, dtype="float32"),
                                    g.tensor("inv_variance", dims=stats, dtype="float32"))  # fmt: skip
    elif kind == "rmsnorm_backward":
        outs = g.rmsnorm_backward(g.tensor("dy", dims=dims), g.tensor("x", dims=dims), g.tensor("scale", dims=w),
                                  g.tensor("inv_variance", dims=stats, dtype="float32"))  # fmt: skip
    else:
        c = (1, BN_DIMS[1], 1, 1)
        outs = g.batchnorm(g.tensor("x", dims=BN_DIMS, layout="NHWC"), g.tensor("scale", dims=c),
                           g.tensor("bias", dims=c), g.tensor("rm", dims=c, dtype="float32"),
                           g.tensor("rv", dims=c, dtype="float32"), 1e-5, 0.1)  # fmt: skip
    for t in outs if isinstance(outs, (list, tuple)) else [outs]:
        if t is not None:
            t.set_output(True)
    return g


def _norm_torch(kind: str, data: dict):
    """torch's time for the same work (eager; backward: autograd's backward kernels on a recorded graph)."""
    F = torch.nn.functional
    if kind == "softmax":
        return lambda: torch.softmax(data["x"], -1)
    if kind == "layernorm":
        return lambda: F.layer_norm(data["x"], (NORM_COLS,), data["scale"][0], data["bias"][0], 1e-5)
    if kind == "rmsnorm":
        return lambda: F.rms_norm(data["x"], (NORM_COLS,), data["scale"][0], 1e-5)
    if kind in ("layernorm_backward", "rmsnorm_backward"):
        x = data["x"].detach().requires_grad_(True)
        w = data["scale"][0].detach().requires_grad_(True)
        if kind == "layernorm_backward":
            b = torch.zeros_like(w, requires_grad=True)
            y, params = F.layer_norm(x, (NORM_COLS,), w, b, 1e-5), (x, w, b)
        else:
            y, params = F.rms_norm(x, (NORM_COLS,), w, 1e-5), (x, w)
        return lambda: torch.autograd.grad(y, params, data["dy"], retain_graph=True)
    x = data["x"]
    rm, rv = data["rm"].flatten().clone(), data["rv"].flatten().clone()
    return lambda: F.batch_norm(x, rm, rv, data["scale"].flatten(), data["bias"].flatten(), True, 0.1, 1e-5)


def _norm_bytes(kind: str) -> int:
    """Bytes an ideal kernel moves: each big input read once and each big output written once (bfloat16)."""
    rows = NORM_ROWS * NORM_COLS * 2
    if kind == "batchnorm":
        return 2 * math.prod(BN_DIMS) * 2
    return (3 if kind.endswith("backward") else 2) * rows


def _norm_tensor(g: sigdnn.Graph, t, channels_last: bool) -> torch.Tensor:
    """An empty tensor for the node's ``t`` (``channels_last``: NHWC memory under NCHW dims, as batchnorm's x, y)."""
    dtype = torch.float32 if g.dtype_of(t).name == "FLOAT32" else torch.bfloat16
    if channels_last:
        n, c, h, w = t.dims
        return torch.empty(n, h, w, c, device="cuda", dtype=dtype).permute(0, 3, 1, 2)
    return torch.empty(t.dims, device="cuda", dtype=dtype)


def bench_norm(kind: str) -> dict:
    """One op through the GPU executor (the builder the registry ranks first) against torch."""
    g = _norm_graph(kind)
    data = {t.name: _norm_tensor(g, t, kind == "batchnorm" and t.name == "x").uniform_(-2, 2) for t in g.inputs}
    for name in {"inv_variance", "rv"} & data.keys():  # positive, as the node expects
        data[name] = data[name].abs() + 0.5
    ex = sigdnn.Executor("gpu")
    plan = ex.prepare(g)
    builder = plan.steps[0].builder.name
    pack = data | {t.name: _norm_tensor(g, t, kind == "batchnorm" and i == 0) for i, t in enumerate(g.outputs)}
    t0 = time.perf_counter()
    ex.execute(plan, pack, to_host=False)
    first_s = time.perf_counter() - t0
    ms = kernel_ms(ex, plan)
    tms = median_ms(_norm_torch(kind, data), warmup=30)
    nbytes = _norm_bytes(kind)
    row = {"op": kind, "builder": builder, "ms": ms, "tb_s": nbytes / ms / 1e9, "torch_ms": tms,
           "torch_tb_s": nbytes / tms / 1e9, "first_s": first_s}  # fmt: skip
    print(f"{kind:20s} {row['tb_s']:5.2f} TB/s ({ms * 1e3:7.1f} us)  torch {row['torch_tb_s']:5.2f} TB/s "
          f"({tms * 1e3:7.1f} us)  x{tms / ms:4.2f}  (first {first_s:.1f}s) [{builder}]", flush=True)  # fmt: skip
    return row


NORM_KINDS = ("softmax", "layernorm", "rmsnorm", "layernorm_backward", "rmsnorm_backward", "batchnorm")


def bench_matmul(sizes=(4096, 8192)) -> dict:
    """The cuTile matmul at its default configuration (the first it offers to autotune), alone against
    torch.matmul and as the fused bias + gelu region against torch eager doing the three, bf16, M = N = K."""
    torch.backends.cuda.matmul.allow_tf32 = False
    result: dict = {"matmul": [], "fused": []}
    for size in sizes:
        for kind in result:
            result[kind].append(matmul_row(size, kind == "fused"))
    return result


def matmul_row(size: int, fused: bool) -> dict:
    """bench_matmul's row for one size, plain or fused."""
    gelu = torch.nn.functional.gelu
    a, b = (torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    bias = torch.randn(1, size, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    t = g.matmul(g.tensor("a", (size, size)), g.tensor("b", (size, size)), name="mm")
    if fused:
        t = g.pointwise("gelu_fwd", g.pointwise("add", t, g.tensor("bias", (1, size))))
    t.set_output(True).set_name("y")
    ex = sigdnn.Executor("gpu", engine="cutile.matmul")
    plan = ex.prepare(g)
    pack = {"a": a, "b": b, "y": y} | ({"bias": bias} if fused else {})
    t0 = time.perf_counter()
    ex.execute(plan, pack, to_host=False)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    ms = kernel_ms(ex, plan, 1, repeats=9, warmup=3)
    want = torch.matmul(a.float(), b.float())
    want = gelu(want + bias.float()) if fused else want
    err = ((y.float() - want).abs().max() / want.abs().max()).item()
    torch_ms = median_ms(lambda: gelu(torch.matmul(a, b) + bias) if fused else torch.matmul(a, b), 1, 9, 3)
    config = plan.steps[0].plan.config.label
    row = {"size": size, "fused": fused, "config": config, "ms": ms, "tflops": 2 * size**3 / ms / 1e9,
           "torch_ms": torch_ms, "ratio": torch_ms / ms, "rel_err": err, "first_s": first_s}  # fmt: skip
    print(f"cuTile matmul{' + bias + gelu' if fused else ''} bf16 {size}^3 {config}: {row['tflops']:6.1f} TFLOP/s = "
          f"{row['ratio']:.3f}x torch{' eager' if fused else ''} (max rel err {err:.1e}, first {first_s:.1f} s)", flush=True)  # fmt: skip
    return row


PARTS = ("host", "fusion", "modes", "norms", "matmul")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    parser.add_argument("--modes", help="comma-separated modes (default: all)")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts to run (default: {','.join(PARTS)})"
    )
    parser.add_argument("--norm-kinds", default=",".join(NORM_KINDS), help="norms: comma-separated ops (default: all)")
    parser.add_argument("--mm-sizes", default="4096,8192")
    argv = sys.argv[1:]
    args = parser.parse_args()
    parts = set(args.only.split(","))
    modes = args.modes.split(",") if args.modes else [m for m in MODES if m != "gen_index"]
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"--modes: no pointwise mode {', '.join(unknown)} (torch's copy is always measured)")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "argv": argv}
    if "host" in parts:
        result["host"] = bench_host()
    if "fusion" in parts:
        result["fusion"] = bench_fusion()
    if "modes" in parts:
        result["modes"] = bench_modes(modes)
    if "norms" in parts:
        result["norms"] = [bench_norm(k) for k in NORM_KINDS if k in args.norm_kinds.split(",")]
    if "matmul" in parts:
        result["matmul"] = bench_matmul(tuple(map(int, args.mm_sizes.split(","))))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
