"""REDUCTION and RESAMPLE (the pooling modes) nodes -> sigdnn reduction / pooling."""

from __future__ import annotations

from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps


@maps("REDUCTION")
def _reduction(m: NodeMapping) -> None:
    mode = R.text(m.attr("mode"), f"{m.where} mode", optional=False)
    m.attr("is_deterministic")
    x, y = m.input("X"), m.output("Y")
    xd, yd = m.tensor(x).dims, m.tensor(y).dims  # type: ignore[arg-type]
    if len(xd) != len(yd) or any(b not in (1, a) for a, b in zip(xd, yd)):
        raise m.refuse(f"Y {list(yd)} is no reduction of X {list(xd)}")
    axes = tuple(i for i, (a, b) in enumerate(zip(xd, yd)) if b == 1 and a != 1)
    m.add("reduction", mode=mode.lower(), x=x, y=y, axes=axes)


RESAMPLE_POOLING = {
    "MAXPOOL": "max",
    "AVGPOOL_INCLUDE_PADDING": "average_count_include_pad",
    "AVGPOOL_EXCLUDE_PADDING": "average_count_exclude_pad",
}


@maps("RESAMPLE")
def _resample(m: NodeMapping) -> None:
    mode = m.attr("resample_mode")
    if mode not in RESAMPLE_POOLING:
        raise m.refuse(f"resample_mode {mode!r}: only the pooling modes {sorted(RESAMPLE_POOLING)} are mapped")
    mode = RESAMPLE_POOLING[mode]
    if R.boolean(m.attr("generate_index"), f"{m.where} generate_index") or m.output("Index", False) is not None:
        raise m.refuse("the max-pooling Index output is not supported")
    pre, post, stride, window = (m.ints(k) for k in ("pre_padding", "post_padding", "stride", "window"))
    padding = m.attr("padding_mode")
    expected = "NEG_INF_PAD" if mode == "max" else "ZERO_PAD"
    if (any(pre) or any(post)) and padding not in (None, expected):
        raise m.refuse(f"padding_mode {padding!r} with {mode} pooling is not supported")
    m.add(
        "pooling",
        mode=mode,
        x=m.input("X"),
        y=m.output("Y"),
        window=window,
        pre_padding=pre,
        post_padding=post,
        stride=stride,
    )
