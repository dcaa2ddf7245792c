"""POINTWISE nodes -> sigdnn pointwise (the mode by its name)."""

from __future__ import annotations

from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps

POINTWISE_PARAMS = (
    "relu_lower_clip",
    "relu_upper_clip",
    "relu_lower_clip_slope",
    "swish_beta",
    "elu_alpha",
    "softplus_beta",
)


@maps("POINTWISE")
def _pointwise(m: NodeMapping) -> None:
    mode = R.text(m.attr("mode"), f"{m.where} mode", optional=False)
    params = {p: m.real(p) for p in POINTWISE_PARAMS}
    axis = m.attr("axis")
    if axis is not None:
        params["axis"] = R.int_(axis, f"{m.where} axis")
    m.add(
        "pointwise",
        mode=mode.lower(),
        in_0=m.input("IN_0"),
        in_1=m.input("IN_1", False),
        in_2=m.input("IN_2", False),
        out_0=m.output("OUT_0"),
        **{k: v for k, v in params.items() if v is not None},
    )
