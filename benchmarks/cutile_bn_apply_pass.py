"""Batchnorm training forward's elementwise pass in cuTile: variants against sigdnn's own kernel.

sigdnn's cuTile batchnorm (NHWC 64x256x56x56 bf16) ends with an elementwise
pass, one (16, 256) tile a block at occupancy 4, last tile first, that
reads x and four per-channel vectors (mean, inv_variance from the
workspace, scale, bias) and writes y: about 54 us of the node's 87, x and y
together at 3.8 TB/s where torch's copy of x reaches 3.9-4.2. Each variant
(``LABELS``) replaces that launch; the partial pass and finalize stay
sigdnn's:

* geometry: tile rows and occupancy (bytes in flight a SM), 8 worker warps;
* ``latency``: a DRAM latency hint on the loads of x;
* ``coef``: inv_variance * scale precomputed (as the finalize could write
  it), three vectors instead of four, the same arithmetic (y bit-equal);
* ``shift``: y = x * a + c, two precomputed vectors (a = inv * scale,
  c = bias - mean * a; rounding differs from sigdnn's form).

Per variant: y against sigdnn's (largest difference), then the median of 15
samples of 10 runs of the whole node, interleaved with sigdnn's. On the H200:

    python3 benchmarks/cutile_bn_apply_pass.py [LABEL,...]
"""

from __future__ import annotations

import argparse

import attrs
import torch
from cutile_bn_stats_pass import NODE_BYTES, ROWS, C, Node, launcher, timed

from sigdnn.plan_builders.cutile import channelgen
from sigdnn.plan_builders.cutile.kernels import CUTILE
from sigdnn.plan_builders.cutile.rowgen import KernelHints
from sigdnn.plan_builders.cutile.source import KernelSource

ZERO = "padding_mode=ct.PaddingMode.ZERO"


@attrs.frozen
class Variant:
    """An elementwise pass over (rows, C) tiles of x, one tile a block, last tile first."""

    rows: int = 16
    occupancy: int | None = 4
    warps: int | None = None
    latency: int | None = None
    vectors: str = "sigdnn"  # "sigdnn" (mean, inv, scale, bias), "coef" (mean, inv * scale, bias), "shift" (a, c)

    @property
    def hints(self) -> KernelHints:
        return KernelHints(occupancy=self.occupancy, num_worker_warps=self.warps)


def _vec(name: str) -> str:
    return f"ct.reshape(ct.astype(ct.load({name}, index=(0,), shape=({C},), {ZERO}), ct.float32), (1, {C}))"


def source(v: Variant) -> str:
    """The kernel text: sigdnn's own generator, or the same walk over precomputed vectors."""
    tiles = ROWS // v.rows
    load = "check_bounds=False" + (f", latency={v.latency}" if v.latency else "")
    if v.vectors == "sigdnn":
        text = channelgen.apply((v.rows, C), (tiles, 1, 1), False, False, v.hints, True)
        return text.replace("check_bounds=False)", f"{load})", 1)
    xt = f"ct.astype(ct.load(x, index=(tile, 0), shape=({v.rows}, {C}), {load}), ct.float32)"
    if v.vectors == "coef":
        params, out = "x, mean, a, b, y", f"(xt - {_vec('mean')}) * {_vec('a')} + {_vec('b')}"
    else:
        params, out = "x, a, c, y", f"xt * {_vec('a')} + {_vec('c')}"
    body = [f"tile = {tiles - 1} - ct.bid(0)", f"xt = {xt}", f"out = {out}"]
    body.append("ct.store(y, index=(tile, 0), tile=ct.astype(out, y.dtype), check_bounds=False)")
    return f"{v.hints.decorator()}\ndef kernel({params}):\n" + "".join(f"    {line}\n" for line in body)


LABELS = {
    "default": Variant(),
    **{f"r{r}o{o}": Variant(rows=r, occupancy=o) for r, o in ((16, 6), (16, 8), (8, 8), (8, 12), (32, 2), (32, 3))},
    "r32w8o2": Variant(rows=32, occupancy=2, warps=8),
    "r64w8o1": Variant(rows=64, occupancy=1, warps=8),
    "latency2": Variant(latency=2),
    "latency8": Variant(latency=8),
    "coef": Variant(vectors="coef"),
    "coefr16o8": Variant(occupancy=8, vectors="coef"),
    "shift": Variant(vectors="shift"),
    "shiftr16o8": Variant(occupancy=8, vectors="shift"),
}


def vector_args(node: Node, v: Variant) -> tuple:
    """The variant's arguments: sigdnn's, or vectors precomputed from the finalize's float32 output and the node's
    scale and bias."""
    x, mean, inv, scale, bias, y = node.calls[2][3]
    if v.vectors == "sigdnn":
        return (x, mean, inv, scale, bias, y)
    f32 = [torch.as_tensor(t, device="cuda").float() for t in (mean, inv)]
    s, b = (node.data[name].reshape(-1).float() for name in ("scale", "bias"))
    a = f32[1] * s
    if v.vectors == "coef":
        return (x, f32[0], a, b, y)
    return (x, a, b - f32[0] * a, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", nargs="?", default=",".join(LABELS), help="comma-separated LABELS")
    args = parser.parse_args()
    node = Node()
    stream, _, _, _ = node.calls[2]
    table = {}
    with node.stream():
        for label in args.labels.split(","):
            v = LABELS[label]
            try:
                kernel = CUTILE.kernel(KernelSource("bn_apply", source(v)))
                runs = [*node.calls[:2], (stream, (ROWS // v.rows,), kernel, vector_args(node, v))]
                print(f"{label}: {node.check(launcher(runs))}", flush=True)
            except Exception as e:  # report every variant
                print(f"{label}: FAILED {type(e).__name__}: {str(e)[:500]}", flush=True)
                continue
            table[label] = launcher(runs)
        table["sigdnn"] = launcher(node.calls)
        timed(table, "node in sequence (rate: x read + y written)", NODE_BYTES)


if __name__ == "__main__":
    main()
