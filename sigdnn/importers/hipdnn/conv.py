"""hipDNN convolution tables (forward, data gradient, weight gradient) -> sigdnn conv_fprop / dgrad / wgrad."""

from __future__ import annotations

from typing import Any

from sigdnn.importers.hipdnn.mapping import NodeMapping, maps

CONV_MODES = {0: "UNSET", 1: "CONVOLUTION", 2: "CROSS_CORRELATION"}


def _conv_common(m: NodeMapping, data_port: str) -> dict[str, Any]:
    """Padding, stride, dilation (an absent vector is its default: 0 padding, stride and dilation 1)."""
    mode = m.get("conv_mode")
    if mode == 1:
        raise m.refuse("conv_mode CONVOLUTION (flipped kernel) is not supported; sigdnn convolves by cross-correlation")
    if mode not in CONV_MODES:
        raise m.refuse(f"unknown conv_mode {mode}")
    spatial = max(len(m.dims(m.fields[data_port])) - 2, 0)
    names = ("pre_padding", "post_padding", "stride", "dilation")
    return {n: v or (d,) * spatial for n, v, d in zip(names, m.get(*names), (0, 0, 1, 1))}


@maps("ConvolutionFwdAttributes")
def _conv_fprop(m: NodeMapping) -> None:
    conv = _conv_common(m, "x")
    m.add("conv_fprop", **dict(zip(("x", "w", "y"), m.get("x", "w", "y"))), **conv)


@maps("ConvolutionBwdAttributes")
def _conv_dgrad(m: NodeMapping) -> None:
    conv = _conv_common(m, "dy")
    dy, w, dx = m.get("dy", "w", "dx")
    m.add("conv_dgrad", dy=dy, w=w, dx=dx, dims=m.dims(dx), **conv)


@maps("ConvolutionWrwAttributes")
def _conv_wgrad(m: NodeMapping) -> None:
    conv = _conv_common(m, "x")
    x, dy, dw = m.get("x", "dy", "dw")
    m.add("conv_wgrad", x=x, dy=dy, dw=dw, dims=m.dims(dw), **conv)
