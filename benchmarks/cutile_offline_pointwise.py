"""Compile the benchmark's pointwise kernels (2^27 bf16 elements) for sm_90 on a CPU and count their SASS.

The arithmetic-bound modes (erf, the gelus, softplus, log, pow, mod) are judged by
instructions per element: the H200 issues ~37 per element at 3.6 TB/s of bf16 in
and out. Uses ``cutile_offline_norms.compile_one`` (the same array constraints and
counts); the same toolchain and command line shape:

    PATH=DIR/nvidia/cu13/bin:$PATH PYTHONPATH=$PWD:DIR python3.12 benchmarks/cutile_offline_pointwise.py \\
        erf,gelu_fwd --out /tmp/pw --label new

With PYTHONPATH pointing at another checkout first, the same command compiles that
checkout's kernels (old against new). Not run on the device.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cutile_offline_norms as offline

import sigdnn
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.plan_builders.cutile import codegen, pointwise

N = 2**27  # gpu_cutile.py's pointwise size: whole tiles only


def launch_of(mode: str, dtype: str) -> tuple[str, list[tuple[tuple[int, ...], tuple[int, ...], str]], int]:
    """(kernel text, its argument views, its tile) of one node of ``mode`` over N elements."""
    g = sigdnn.Graph(mode, io_dtype=dtype, compute_dtype="float32")
    ins = [g.tensor(f"x{k}", dims=(N,)) for k in range(MODES[mode].arity)]
    g.pointwise(mode, *ins).set_output(True).set_name("y")
    spec, _ = pointwise.node_spec(g.nodes[0], g)
    views = [((N,), (1,), dtype)] * (len(spec.inputs) + len(spec.outputs))
    return codegen.generate(spec), views, spec.tile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modes", help="comma-separated pointwise modes")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--label", default="", help="prefix of each kernel's name (e.g. old / new)")
    parser.add_argument("--out", required=True, help="folder for the sources, cubins and SASS")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    todo = {}
    for mode in args.modes.split(","):
        text, views, tile = launch_of(mode, args.dtype)
        todo[f"{args.label}{mode}[{args.dtype},tile{tile}]"] = (text, views)
    return offline.compile_all([(label, text, views) for label, (text, views) in todo.items()], args.jobs, args.out)


if __name__ == "__main__":
    sys.exit(main())
