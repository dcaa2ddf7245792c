"""hipDNN ReductionAttributes and ResampleFwdAttributes (the pooling modes) -> sigdnn reduction / pooling."""

from __future__ import annotations

from sigdnn.importers.hipdnn.mapping import NodeMapping, maps

REDUCTION_MODES = {
    1: "add",
    2: "mul",
    3: "min",
    4: "max",
    5: "amax",
    6: "avg",
    7: "norm1",
    8: "norm2",
    9: "mul_no_zeros",
}
RESAMPLE_MODES = {1: "max", 2: "average_count_exclude_pad", 3: "average_count_include_pad"}
PADDING_MODES = {0: "PADDING_NOT_SET", 1: "NEG_INF_PAD", 2: "ZERO_PAD"}


@maps("ReductionAttributes")
def _reduction(m: NodeMapping) -> None:
    mode = REDUCTION_MODES.get(m.get("mode"))
    if mode is None:
        raise m.refuse(f"unknown or unset reduction mode {m.fields['mode']}")
    x, y = m.get("in", "out")
    xd, yd = m.dims(x), m.dims(y)
    if len(xd) != len(yd) or any(b not in (1, a) for a, b in zip(xd, yd)):
        raise m.refuse(f"out {list(yd)} is no reduction of in {list(xd)}")
    axes = tuple(i for i, (a, b) in enumerate(zip(xd, yd)) if b == 1 and a != 1)
    m.add("reduction", mode=mode, x=x, y=y, axes=axes)


@maps("ResampleFwdAttributes")
def _resample_fwd(m: NodeMapping) -> None:
    """hipDNN's resample forward holds cuDNN's pooling modes; padding never wins a max, zeros count in an average."""
    mode = RESAMPLE_MODES.get(m.get("resample_mode"))
    if mode is None:
        raise m.refuse(f"unknown or unset resample_mode {m.fields['resample_mode']}")
    x, y, index, generate = m.get("x", "y", "index", "generate_index")
    if index is not None or generate:
        raise m.refuse("the max-pooling index output is not supported")
    pre, post, stride, window = m.get("pre_padding", "post_padding", "stride", "window")
    padding = PADDING_MODES.get(m.get("padding_mode"))
    padded = any(pre) or any(post)
    expected = "NEG_INF_PAD" if mode == "max" else "ZERO_PAD"
    if padding is None or (padded and padding not in (expected, "PADDING_NOT_SET")):
        raise m.refuse(f"padding_mode {m.fields['padding_mode']} with {mode} pooling is not supported")
    m.add("pooling", mode=mode, x=x, y=y, window=window, pre_padding=pre, post_padding=post, stride=stride)
