"""Every 16-bit base against many exponents: the fast-tier pow through the cuTile emulator, on the CPU.

``tests/plan_builders/cutile`` checks every base against 48 exponents; this runs thousands (every float16 and
bfloat16 base x IEEE pow's special exponents and ``--exponents`` more: random bit patterns, or uniform in
[-U, U] with ``--uniform U``) through ``sigdnn.validate`` with the GPU tests' tolerances, the emulator's exp2
skewed by ``--skew`` x 2^-21 (MUFU.EX2's documented error is 2^-22). Prints failing chunks' tables.

    PYTHONPATH=$PWD python benchmarks/cutile_pow_dense_check.py --exponents 2000 --skew 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "plan_builders", "cutile"))

from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.dtypes import round_to
from sigdnn.plan_builders.cutile import emulator

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, 7.0, -7.0, 1.5, 10.0,
           -10.0, 100.0, -100.0]  # fmt: skip


class _Patch:
    """make_available's monkeypatch, outside pytest."""

    def setattr(self, obj: Any, name: str, value: Any, raising: bool = True) -> None:
        setattr(obj, name, value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exponents", type=int, default=2000)
    parser.add_argument("--skew", type=float, default=1.0, help="exp2's results times 1 + skew 2^-21")
    parser.add_argument("--uniform", type=float, default=0.0, help="exponents uniform in [-U, U], not bit patterns")
    args = parser.parse_args()
    make_available(_Patch())
    exact = emulator.exp2
    off = np.float32(1.0 + args.skew * 2.0**-21)
    emulator.exp2 = lambda x, **kw: (exact(x, **kw) * off).astype(np.float32)
    rng = np.random.default_rng(1)
    failed = 0
    for name in ("float16", "bfloat16"):
        probe = sigdnn.Graph("probe", io_dtype=name, compute_dtype="float32")
        dtype = probe.dtype_of(probe.tensor("t", dims=(1,)))
        every = np.arange(65536, dtype=np.uint16).view(dtype.numpy)
        if args.uniform:
            more = rng.uniform(-args.uniform, args.uniform, args.exponents)
        else:
            more = every[rng.choice(65536, args.exponents, replace=False)].astype(np.float64)
        ys = round_to(np.concatenate([SPECIAL, more]), dtype)
        start = time.time()
        for c in range(0, ys.size, 16):
            y = ys[c : c + 16]
            g = sigdnn.Graph("pow", io_dtype=name, compute_dtype="float32")
            a, b = g.tensor("x0", dims=(every.size * y.size,)), g.tensor("x1", dims=(every.size * y.size,))
            g.pointwise("pow", a, b).set_output(True).set_name("y")
            data = {"x0": np.tile(every, y.size), "x1": np.repeat(y, every.size)}
            report = sigdnn.validate(g, data, executor=emulated_executor())
            if not report.passed:
                failed += 1
                print(report.table(), flush=True)
        print(f"{name}: every base x {ys.size} exponents, skew {args.skew:+g}: {time.time() - start:.0f} s", flush=True)
    print(f"failed chunks: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
