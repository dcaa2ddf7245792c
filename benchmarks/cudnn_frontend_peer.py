"""sigdnn's fused GPU graphs against cuDNN-frontend's own fused graphs on the same shapes, in one run.

Two patterns, both bf16 with float32 compute:
- matmul + bias + gelu at M = N = K (4096, 8192);
- conv fprop + bias + relu, NHWC, batch 64, on ResNet-50 layers.

Each is timed three ways in turn (CUDA events, back-to-back calls, median of
``--repeats`` samples of about ``--sample-ms`` each): torch eager doing the
ops one by one; cuDNN-frontend's fused graph (``cudnn.pygraph``, plans from
heuristics A then fallback, executed with a preallocated workspace); and
sigdnn's executor on the same graph (``Executor("gpu")``, prepared once;
which builder ran each step is printed). Every result is checked against a
float32 torch computation.

    PYTHONPATH=/opt/fe:$PWD python3 benchmarks/cudnn_frontend_peer.py --json $OUT/peer.json

Needs torch with CUDA, nvidia-cudnn-frontend (``../shared/gpu/README.md``
says how to carry its wheel) and the GPU builders' DSLs. Results go in
``benchmarks/results/cudnn_frontend_peer_<date>.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch
from cuda_timing import interleaved_samples

import sigdnn

RESNET_CONVS = {
    # name: (C, H = W, K, R = S, stride), batch 64, padding R // 2
    "conv2_3x3": (64, 56, 64, 3, 1),
    "conv3_3x3": (128, 28, 128, 3, 1),
    "conv4_3x3": (256, 14, 256, 3, 1),
    "conv5_3x3": (512, 7, 512, 3, 1),
    "conv2_1x1": (64, 56, 256, 1, 1),
}


def fe_graph(build: Callable[[Any, Any], dict[Any, torch.Tensor]]) -> Callable[[], None]:
    """A built cuDNN-frontend graph as a call; ``build(cudnn, graph)`` adds the ops and returns the variant pack."""
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    graph = cudnn.pygraph(
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )
    pack = build(cudnn, graph)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    workspace = torch.empty(max(1, graph.get_workspace_size()), device="cuda", dtype=torch.uint8)
    return lambda: graph.execute(pack, workspace, handle=handle)


def sigdnn_call(g: sigdnn.Graph, pack: dict[str, torch.Tensor]) -> tuple[Callable[[], None], str]:
    executor = sigdnn.Executor("gpu")
    plan = executor.prepare(g)
    builders = ", ".join(f"{s.name}: {s.builder.name}" for s in plan.steps)
    return lambda: executor.execute(plan, pack, to_host=False), builders


def measure(impls: dict[str, Callable[[], Any]], flops: float, args: argparse.Namespace) -> dict[str, float]:
    iters = max(3, int(args.sample_ms * 1e-3 / (flops / 500e12)))
    samples = interleaved_samples(impls, iters, args.repeats, warmup=2)
    return {name: statistics.median(ts) for name, ts in samples.items()}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want).norm() / want.norm())


def matmul_bias_gelu(size: int, args: argparse.Namespace) -> dict[str, Any]:
    m = n = k = size
    gen = torch.Generator(device="cuda").manual_seed(size)
    a = torch.randn(1, m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(1, k, n, device="cuda", generator=gen).to(torch.bfloat16)
    bias = torch.randn(1, 1, n, device="cuda", generator=gen).to(torch.bfloat16)
    want = torch.nn.functional.gelu(torch.matmul(a.float(), b.float()) + bias.float())
    y_fe, y_sig = (torch.empty(1, m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def build(cudnn: Any, graph: Any) -> dict[Any, torch.Tensor]:
        ta, tb, tbias = graph.tensor_like(a), graph.tensor_like(b), graph.tensor_like(bias)
        c = graph.matmul(name="mm", A=ta, B=tb)
        ty = graph.gelu(name="gelu", input=graph.bias(name="bias", input=c, bias=tbias))
        ty.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
        return {ta: a, tb: b, tbias: bias, ty: y_fe}

    g = sigdnn.Graph(f"mm_bias_gelu_{size}", io_dtype="bfloat16", compute_dtype="float32")
    t = g.matmul(g.tensor("a", (1, m, k)), g.tensor("b", (1, k, n)), name="mm")
    t = g.pointwise("add", t, g.tensor("bias", (1, 1, n)), name="bias")
    g.pointwise("gelu_fwd", t, name="gelu").set_output(True).set_name("y")
    run_sigdnn, builders = sigdnn_call(g, {"a": a, "b": b, "bias": bias, "y": y_sig})
    impls = {
        "torch eager (matmul, add, gelu)": lambda: torch.nn.functional.gelu(torch.matmul(a, b) + bias),
        "cudnn-frontend fused": fe_graph(build),
        "sigdnn": run_sigdnn,
    }
    times = measure(impls, 2.0 * m * n * k, args)
    return report(f"matmul+bias+gelu {size}^3", times, 2.0 * m * n * k, builders, y_fe, y_sig, want)


def conv_bias_relu(name: str, args: argparse.Namespace) -> dict[str, Any]:
    c, hw, k, r, stride = RESNET_CONVS[name]
    pad = r // 2
    gen = torch.Generator(device="cuda").manual_seed(c + hw + k)
    x = torch.randn(64, c, hw, hw, device="cuda", generator=gen).to(torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    w = (torch.randn(k, c, r, r, device="cuda", generator=gen) / (c * r * r) ** 0.5).to(torch.bfloat16)
    w = w.to(memory_format=torch.channels_last)
    bias = torch.randn(1, k, 1, 1, device="cuda", generator=gen).to(torch.bfloat16)
    conv = torch.nn.functional.conv2d
    want = torch.relu(conv(x.float(), w.float(), padding=pad, stride=stride) + bias.float())
    y_fe, y_sig = (torch.empty_like(want, dtype=torch.bfloat16).to(memory_format=torch.channels_last) for _ in range(2))

    def build(cudnn: Any, graph: Any) -> dict[Any, torch.Tensor]:
        tx, tw, tbias = graph.tensor_like(x), graph.tensor_like(w), graph.tensor_like(bias)
        ty = graph.conv_fprop(image=tx, weight=tw, padding=[pad, pad], stride=[stride, stride], dilation=[1, 1])
        ty = graph.relu(name="relu", input=graph.bias(name="bias", input=ty, bias=tbias))
        ty.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
        return {tx: x, tw: w, tbias: bias, ty: y_fe}

    g = sigdnn.Graph(f"conv_bias_relu_{name}", io_dtype="bfloat16", compute_dtype="float32")
    xt, wt = g.tensor("x", tuple(x.shape), layout="NHWC"), g.tensor("w", tuple(w.shape), layout="NHWC")
    t = g.conv_fprop(xt, wt, padding=(pad, pad), stride=(stride, stride), name="conv")
    t = g.pointwise("add", t, g.tensor("bias", (1, k, 1, 1)), name="bias")
    g.pointwise("relu_fwd", t, name="relu").set_output(True).set_name("y")
    run_sigdnn, builders = sigdnn_call(g, {"x": x, "w": w, "bias": bias, "y": y_sig})
    torch.backends.cudnn.benchmark = True
    impls = {
        "torch eager (conv, add, relu)": lambda: torch.relu(conv(x, w, padding=pad, stride=stride) + bias),
        "cudnn-frontend fused": fe_graph(build),
        "sigdnn": run_sigdnn,
    }
    flops = 2.0 * want.numel() * c * r * r
    times = measure(impls, flops, args)
    return report(f"conv+bias+relu {name}", times, flops, builders, y_fe, y_sig, want)


def report(
    label: str,
    times: dict[str, float],
    flops: float,
    builders: str,
    y_fe: torch.Tensor,
    y_sig: torch.Tensor,
    want: torch.Tensor,
) -> dict[str, Any]:
    fe = times["cudnn-frontend fused"]
    row = {
        "case": label,
        "ms": times,
        "tflops": {name: flops / t / 1e9 for name, t in times.items()},
        "sigdnn_over_frontend": fe / times["sigdnn"],
        "rel_error": {"cudnn-frontend": relative_error(y_fe, want), "sigdnn": relative_error(y_sig, want)},
        "sigdnn_builders": builders,
    }
    cells = "  ".join(f"{name} {row['tflops'][name]:.0f}" for name in times)
    print(f"{label}: TFLOP/s {cells}; sigdnn / frontend speed {row['sigdnn_over_frontend']:.3f}; {builders}")
    print(f"  relative errors {row['rel_error']}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    parser.add_argument("--convs", nargs="*", default=list(RESNET_CONVS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sample-ms", type=float, default=40.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for case in [*(lambda s=s: matmul_bias_gelu(s, args) for s in args.sizes),
                 *(lambda c=c: conv_bias_relu(c, args) for c in args.convs)]:  # fmt: skip
        try:
            rows.append(case())
        except Exception as error:  # one failing case must not lose the others' figures
            print(f"FAILED: {type(error).__name__}: {error}", flush=True)
            rows.append({"error": f"{type(error).__name__}: {error}"})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
