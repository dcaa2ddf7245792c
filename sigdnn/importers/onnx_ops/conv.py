"""Conv and ConvTranspose -> sigdnn conv_fprop / conv_dgrad (+ the bias as a broadcast add)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sigdnn.graph.tensor import Tensor
from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op


def pads_of(
    node: OnnxNode,
    spatial: int,
    in_dims: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    transposed: bool = False,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pre, post) padding from ``pads`` or ``auto_pad`` (SAME_* pads so that out = ceil(in / stride))."""
    auto = node.attr("auto_pad", "NOTSET")
    pads = node.attr("pads", None)
    if auto in ("NOTSET", "") or auto is None:
        pads = tuple(pads) if pads else (0,) * (2 * spatial)
        if len(pads) != 2 * spatial:
            raise node.refuse(f"pads {list(pads)} should have {2 * spatial} entries")
        return tuple(pads[:spatial]), tuple(pads[spatial:])
    if pads:
        raise node.refuse("give pads or auto_pad, not both")
    if auto == "VALID":
        return (0,) * spatial, (0,) * spatial
    if auto not in ("SAME_UPPER", "SAME_LOWER") or transposed:
        raise node.refuse(f"auto_pad={auto!r} is not supported here")
    pre, post = [], []
    for size, k, s, d in zip(in_dims, kernel, stride, dilation):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        pre.append(small if auto == "SAME_UPPER" else big)
        post.append(big if auto == "SAME_UPPER" else small)
    return tuple(pre), tuple(post)


def add_channel_bias(node: OnnxNode, y: Tensor, bias: Value) -> Value:
    """y + bias over the channel dim (ONNX gives the bias as [C])."""
    channels = int(np.prod(bias.shape)) if isinstance(bias, np.ndarray) else bias.size
    b = node.reshape(bias, (1, channels, *(1,) * (len(y.dims) - 2)), "bias_shape")
    return node.pointwise("add", y, b, what="bias")


def _geometry(node: OnnxNode, w_dims: Sequence[int]) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    x_dims = node.dims(0)
    if not 3 <= len(w_dims) == len(x_dims) <= 5:
        raise node.refuse(f"x {list(x_dims)} and weights {list(w_dims)} need the same rank, 3 to 5")
    spatial = len(w_dims) - 2
    kernel = tuple(node.attr("kernel_shape", None) or w_dims[2:])
    if tuple(kernel) != tuple(w_dims[2:]):
        raise node.refuse(f"kernel_shape {list(kernel)} disagrees with the weights' {list(w_dims[2:])}")
    stride = tuple(node.attr("strides", None) or (1,) * spatial)
    dilation = tuple(node.attr("dilations", None) or (1,) * spatial)
    return spatial, kernel, stride, dilation


@onnx_op("Conv")
def conv(node: OnnxNode) -> list[Value]:
    x = node.tensor(0)
    w_dims = node.dims(1)
    spatial, kernel, stride, dilation = _geometry(node, w_dims)
    groups = int(node.attr("group", 1))
    if x.dims[1] != w_dims[1] * groups:
        raise node.refuse(
            f"x has {x.dims[1]} channels; weights {list(w_dims)} with group={groups} need {w_dims[1] * groups}"
        )
    pre, post = pads_of(node, spatial, x.dims[2:], kernel, stride, dilation)
    y = node.graph.conv_fprop(
        x,
        node.materialize(node.value(1), "w"),
        stride=stride,
        dilation=dilation,
        pre_padding=pre,
        post_padding=post,
        name=node.fresh("conv"),
    )
    return [add_channel_bias(node, y, node.value(2)) if node.has(2) else y]


@onnx_op("ConvTranspose")
def conv_transpose(node: OnnxNode) -> list[Value]:
    """The data gradient of a convolution: W [C_in, C_out/group, k...] is conv_dgrad's w [K, C/groups, R...]."""
    x = node.tensor(0)
    w_dims = node.dims(1)
    spatial, kernel, stride, dilation = _geometry(node, w_dims)
    groups = int(node.attr("group", 1))
    if x.dims[1] != w_dims[0]:
        raise node.refuse(f"x has {x.dims[1]} channels, weights {list(w_dims)} expect {w_dims[0]}")
    out_pad = tuple(node.attr("output_padding", None) or (0,) * spatial)
    pre, post = pads_of(node, spatial, x.dims[2:], kernel, stride, dilation, transposed=True)
    sizes = [
        s * (n - 1) + op + (k - 1) * d + 1 - a - b
        for n, s, op, k, d, a, b in zip(x.dims[2:], stride, out_pad, kernel, dilation, pre, post)
    ]
    shape = node.attr("output_shape", None)
    if shape:
        if len(shape) != spatial:
            raise node.refuse(f"output_shape {list(shape)} should have {spatial} entries")
        if tuple(shape) != tuple(sizes):
            raise node.refuse(f"output_shape {list(shape)} differs from the size the pads give {sizes}")
    dims = (x.dims[0], w_dims[1] * groups, *sizes)
    y = node.graph.conv_dgrad(
        x,
        node.materialize(node.value(1), "w"),
        stride=stride,
        dilation=dilation,
        pre_padding=pre,
        post_padding=post,
        dims=dims,
        name=node.fresh("conv_transpose"),
    )
    return [add_channel_bias(node, y, node.value(2)) if node.has(2) else y]
