"""Dump the PTX of a fixed set of CuTe GEMM and conv specializations, to show a kernel refactor changes no device code.

Compiles on the CPU (nvidia-cutlass-dsl, Python 3.12, no GPU): each case in a
process of its own, since the DSL reads its dump directory from the
environment when it is imported. Compare two trees with ``diff -r`` (the DSL's
PTX is deterministic: two runs of one commit match byte for byte).

    CUTE_DSL_ARCH=sm_90a PYTHONPATH=$PWD python3.12 scripts/cute_ptx_dump.py OUT [CASE ...]
    git stash; ... scripts/cute_ptx_dump.py before; git stash pop; ... after; diff -r before after
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# case: (spec fields beyond the bf16 operands, tile config label, kernel kind ("gemm" or conv_launch's), rank)
FPROP = {"a_major": "k", "b_major": "k", "c_major": "n", "a_batched": False, "b_batched": False}
FUSED = {"bias_dtype": "bfloat16", "activation": "relu", "round_x": "bfloat16"}
WGRAD = {"a_major": "m", "b_major": "n", "c_major": "n", "a_batched": True, "b_batched": True}
GEMM = {"a_major": "k", "b_major": "n", "c_major": "n", "a_batched": False, "b_batched": False}
CASES = {
    "gemm": (GEMM, "coop128x256c2x1s4n", "gemm", 0),
    "gemm_bias_gelu": ({**GEMM, "bias_dtype": "bfloat16", "activation": "gelu"}, "pp64x256c2x1s4n", "gemm", 0),
    "gemm_fp8_scaled": (
        {
            **GEMM,
            "a_dtype": "fp8_e4m3",
            "b_dtype": "fp8_e4m3",
            "b_major": "k",
            "scale_dtypes": ("float32", "float32"),
            "round_s": ("float32", "float32"),
        },
        "coop128x128c2x1s4n",
        "gemm",
        0,
    ),
    "fprop_plain": (FPROP, "coop256x64c1x1s1", "fprop", 2),
    "fprop_fused": ({**FPROP, **FUSED}, "pp128x64c1x1s1", "fprop", 2),
    "fprop_split": (FPROP, "coop128x64c1x1s1k3", "fprop", 2),
    "fprop_cluster": (FPROP, "coop128x64c1x8s1", "fprop", 2),
    "fprop3d": (FPROP, "coop256x64c1x1s1", "fprop", 3),
    "transposed": ({**FPROP, "c_major": "m", "bias_per": "m"}, "pp64x256c1x1s1", "fprop_t", 2),
    "transposed_fused": ({**FPROP, **FUSED, "c_major": "m", "bias_per": "m"}, "pp64x256c1x1s1", "fprop_t", 2),
    "rows": ({**FPROP, "c_major": "m", "bias_per": "m"}, "pp64x256c1x1s1", "fprop_rows", 2),
    "rows_fused": ({**FPROP, **FUSED, "c_major": "m", "bias_per": "m"}, "pp64x256c1x1s1", "fprop_rows", 2),
    "wgrad": ({**WGRAD, "c_dtype": "float32"}, "pp64x192c1x1s1", "wgrad", 2),
    "wgrad_coop": (WGRAD, "coop128x128c1x1s1", "wgrad", 2),
    "wgrad_rows": ({**WGRAD, "c_dtype": "float32"}, "pp64x192c1x1s1", "wgrad_rows", 2),
}


def compile_case(name: str) -> None:
    """In this process: compile ``name`` (its PTX goes to $CUTE_DSL_DUMP_DIR)."""
    from sigdnn.plan_builders.cute.gemm_layout import GemmSpec
    from sigdnn.plan_builders.cute.kernels import conv_launch, launch
    from sigdnn.plan_builders.cute.matmul import parse_config

    fields, label, kind, rank = CASES[name]
    spec = GemmSpec(**{"a_dtype": "bfloat16", "b_dtype": "bfloat16", "c_dtype": "bfloat16", **fields})
    if kind == "gemm":
        launch._compile(spec, parse_config(label).kernel, 132)
    else:
        conv_launch._compile(spec, parse_config(label).kernel, 132, (kind, rank))


def dump(out: Path, name: str) -> str:
    target = out / name
    target.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CUTE_DSL_DUMP_DIR": str(target), "CUTE_DSL_KEEP": "ptx", "SIGDNN_CUTE_CACHE": "0"}
    run = subprocess.run([sys.executable, __file__, "--one", name], env=env, capture_output=True, text=True)
    found = list(target.glob("*.ptx"))
    return f"{name}: {'ok' if run.returncode == 0 and len(found) == 1 else 'FAILED ' + run.stderr[-400:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("cases", nargs="*", choices=[[], *CASES], default=[])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        compile_case(args.one)
        return
    with ThreadPoolExecutor(2) as pool:
        for line in pool.map(lambda name: dump(args.out, name), args.cases or list(CASES)):
            print(line, flush=True)


if __name__ == "__main__":
    main()
