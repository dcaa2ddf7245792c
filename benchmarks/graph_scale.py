"""Scale benchmarks for the CPU path.

1. A 10,000-node graph: serialize + deserialize + prepare (target: < 2 s total).
2. A 100-node pointwise chain on 1M-element tensors: peak intermediate memory
   with liveness reuse (target: <= 2 tensors' worth) against allocating every
   intermediate (what an executor without reuse would hold), and run time.

Run: python benchmarks/graph_scale.py [--nodes 10000] [--chain 100] [--elements 1048576]
"""

from __future__ import annotations

import argparse
import platform
import time
import tracemalloc

import numpy as np

import sigdnn

MODES = ("add", "relu_fwd", "mul", "tanh_fwd", "sub", "sigmoid_fwd", "abs", "swish_fwd")


def wide_graph(nodes: int) -> sigdnn.Graph:
    """A DAG of ``nodes`` pointwise/matmul nodes over small tensors, with fan-in."""
    g = sigdnn.Graph("scale", io_dtype="float16", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 64))
    bias = g.tensor("bias", dims=(1, 64))
    w = g.tensor("w", dims=(64, 64))
    recent = [x]
    for i in range(nodes):
        mode = MODES[i % len(MODES)]
        a = recent[-1]
        if i % 97 == 96:
            t = g.matmul(a, w, name=f"n{i}")
        elif mode in ("add", "mul", "sub"):
            other = recent[-7] if len(recent) > 7 else bias
            t = g.pointwise(mode, a, other, name=f"n{i}")
        else:
            t = g.pointwise(mode, a, name=f"n{i}")
        recent.append(t)
    recent[-1].set_output(True).set_name("y")
    return g


def chain_graph(length: int, elements: int) -> sigdnn.Graph:
    g = sigdnn.Graph("chain", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    t = g.tensor("x", dims=(elements,))
    for i in range(length):
        mode = MODES[i % len(MODES)]
        t = (
            g.pointwise(mode, t, t, name=f"n{i}")
            if mode in ("add", "mul", "sub")
            else g.pointwise(mode, t, name=f"n{i}")
        )
    t.set_output(True).set_name("y")
    return g


def bench_scale(nodes: int) -> dict[str, float]:
    g = wide_graph(nodes)
    t0 = time.perf_counter()
    data = g.serialize()
    t1 = time.perf_counter()
    parsed = sigdnn.deserialize(data, check=False)
    t2 = time.perf_counter()
    plan = sigdnn.Executor().prepare(parsed)  # checks, orders, keys, plans, memory plan
    t3 = time.perf_counter()
    plan_bytes = sigdnn.Executor().prepare(data)  # the path `sigdnn run` takes: bytes in
    t4 = time.perf_counter()
    assert len(plan.steps) == len(plan_bytes.steps) == nodes
    return {
        "bytes": len(data),
        "serialize": t1 - t0,
        "deserialize": t2 - t1,
        "prepare_graph": t3 - t2,
        "prepare_bytes": t4 - t3,
        "total": (t1 - t0) + (t4 - t3),
    }


def bench_chain(length: int, elements: int) -> dict[str, float]:
    g = chain_graph(length, elements)
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    x = np.random.default_rng(0).uniform(-2, 2, elements).astype(np.float32)
    ex.execute(plan, {"x": x})  # warm-up
    tracemalloc.start()
    t0 = time.perf_counter()
    ex.execute(plan, {"x": x})
    elapsed = time.perf_counter() - t0
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tensor = elements * 4
    return {
        "tensor_bytes": tensor,
        "peak_intermediate": plan.memory.peak_bytes,
        "without_reuse": plan.memory.total_bytes,
        "peak_in_tensors": plan.memory.peak_bytes / tensor,
        "traced_peak_bytes": traced_peak,
        "execute_s": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--elements", type=int, default=1 << 20)
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()} "
          f"numpy {np.__version__}")  # fmt: skip
    s = bench_scale(args.nodes)
    print(f"{args.nodes}-node graph ({s['bytes']} bytes): serialize {s['serialize']:.3f} s, "
          f"deserialize {s['deserialize']:.3f} s, prepare(Graph) {s['prepare_graph']:.3f} s, "
          f"prepare(bytes: parse+check+plan) {s['prepare_bytes']:.3f} s; "
          f"serialize + deserialize + prepare = {s['total']:.3f} s (target < 2 s)")  # fmt: skip
    c = bench_chain(args.chain, args.elements)
    print(f"{args.chain}-node chain on {args.elements} float32 elements: peak intermediate "
          f"{c['peak_intermediate']} bytes = {c['peak_in_tensors']:.2f} tensors (target <= 2); "
          f"without reuse {c['without_reuse']} bytes = {c['without_reuse'] / c['tensor_bytes']:.0f} tensors; "
          f"execute {c['execute_s']:.3f} s; traced peak during execute "
          f"{c['traced_peak_bytes'] / c['tensor_bytes']:.1f} tensors (arena + output + NumPy temporaries of one node)")  # fmt: skip


if __name__ == "__main__":
    main()
