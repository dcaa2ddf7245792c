"""CONV_FPROP, CONV_DGRAD and CONV_WGRAD nodes -> sigdnn conv_fprop / dgrad / wgrad."""

from __future__ import annotations

from typing import Any

from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps


def _conv(m: NodeMapping, data_port: str) -> dict[str, Any]:
    mode = m.attr("math_mode", "CROSS_CORRELATION")
    if mode != "CROSS_CORRELATION":
        raise m.refuse(f"math_mode {mode!r}: sigdnn convolves by cross-correlation only")
    spatial = max(len(m.tensor(m.input(data_port)).dims) - 2, 0)  # type: ignore[arg-type]
    names = ("pre_padding", "post_padding", "stride", "dilation")
    return {n: m.ints(n) or (d,) * spatial for n, d in zip(names, (0, 0, 1, 1))}


@maps("CONV_FPROP")
def _conv_fprop(m: NodeMapping) -> None:
    conv = _conv(m, "X")
    m.add("conv_fprop", x=m.input("X"), w=m.input("W"), y=m.output("Y"), **conv)


@maps("CONV_DGRAD")
def _conv_dgrad(m: NodeMapping) -> None:
    conv = _conv(m, "DY")
    dx = m.output("DX")
    m.add("conv_dgrad", dy=m.input("DY"), w=m.input("W"), dx=dx, dims=m.tensor(dx).dims, **conv)  # type: ignore[arg-type]


@maps("CONV_WGRAD")
def _conv_wgrad(m: NodeMapping) -> None:
    conv = _conv(m, "X")
    dw = m.output("DW")
    m.add("conv_wgrad", x=m.input("X"), dy=m.input("DY"), dw=dw, dims=m.tensor(dw).dims, **conv)  # type: ignore[arg-type]
