"""MaxPool, AveragePool, GlobalAveragePool / GlobalMaxPool and the Reduce ops -> sigdnn pooling / reduction."""

from __future__ import annotations

from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op
from sigdnn.importers.onnx_ops.conv import pads_of


@onnx_op("MaxPool", "AveragePool")
def pool(node: OnnxNode) -> list[Value]:
    x = node.tensor(0)
    spatial = len(x.dims) - 2
    kernel = tuple(node.attr("kernel_shape"))
    stride = tuple(node.attr("strides", None) or (1,) * spatial)
    dilation = tuple(node.attr("dilations", None) or (1,) * spatial)
    if any(d != 1 for d in dilation):
        raise node.refuse(f"dilations {list(dilation)}: sigdnn pooling windows are dense")
    if node.attr("storage_order", 0) != 0:
        raise node.refuse("storage_order=1 applies to the indices output, which is not produced")
    if len(node.proto.output) > 1 and node.proto.output[1]:
        raise node.refuse("the Indices output of MaxPool is not produced")
    pre, post = pads_of(node, spatial, x.dims[2:], kernel, stride, dilation)
    if node.attr("ceil_mode", 0):
        # ceil mode adds windows that start inside the padded input: extra post padding where it changes the count
        extra = []
        for size, k, s, a, b in zip(x.dims[2:], kernel, stride, pre, post):
            floor_out = (size + a + b - k) // s + 1
            ceil_out = -(-(size + a + b - k) // s) + 1
            if (ceil_out - 1) * s >= size + a:
                ceil_out -= 1
            extra.append((ceil_out - floor_out) * s)
        if any(extra) and node.op_type == "AveragePool":
            raise node.refuse("ceil_mode=1 that adds windows is not supported for AveragePool")
        post = tuple(b + e for b, e in zip(post, extra))
    if node.op_type == "MaxPool":
        mode = "max"
    else:
        mode = "average_count_include_pad" if node.attr("count_include_pad", 0) else "average_count_exclude_pad"
    return [node.graph.pooling(x, mode, kernel, stride, pre_padding=pre, post_padding=post, name=node.fresh(""))]


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node: OnnxNode) -> list[Value]:
    x = node.tensor(0)
    mode = "avg" if node.op_type == "GlobalAveragePool" else "max"
    return [node.graph.reduction(x, mode, axes=tuple(range(2, len(x.dims))), name=node.fresh(""))]


REDUCE = {
    "ReduceSum": "add",
    "ReduceMean": "avg",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "mul",
    "ReduceL1": "norm1",
    "ReduceL2": "norm2",
    "ReduceSumSquare": "add",
}
# Opset from which each Reduce op takes its axes as an input instead of an attribute.
AXES_INPUT_FROM = {"ReduceSum": 13}


@onnx_op(*REDUCE)
def reduce(node: OnnxNode) -> list[Value]:
    x = node.tensor(0)
    rank = len(x.dims)
    keepdims = int(node.attr("keepdims", 1))
    if node.importer.opset >= AXES_INPUT_FROM.get(node.op_type, 18):
        axes = node.ints(1, "axes") if node.has(1) else ()
    else:
        axes = tuple(node.attr("axes", None) or ())
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return [node.pointwise("identity", x)]
        axes = tuple(range(rank))
    if any(not -rank <= a < rank for a in axes):
        raise node.refuse(f"axes {list(axes)} are out of range for rank {rank}")
    axes = tuple(sorted({a + rank if a < 0 else a for a in axes}))
    source = node.pointwise("mul", x, x, what="square") if node.op_type == "ReduceSumSquare" else x
    y = node.graph.reduction(source, REDUCE[node.op_type], axes=axes, name=node.fresh("reduce"))
    if not keepdims:
        kept = tuple(d for i, d in enumerate(y.dims) if i not in axes)
        return [node.reshape(y, kept or (1,), "drop_axes") if kept != y.dims else y]
    return [y]
