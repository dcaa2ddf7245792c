"""POINTWISE nodes -> sigdnn pointwise (the mode by its name)."""

from __future__ import annotations

from sigdnn.graph.ops.pointwise import PARAMS
from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps

REAL_PARAMS = tuple(p for p in PARAMS if p != "axis")  # the real-valued ones; axis is an integer


@maps("POINTWISE")
def _pointwise(m: NodeMapping) -> None:
    mode = R.text(m.attr("mode"), f"{m.where} mode", optional=False)
    params = {p: m.real(p) for p in REAL_PARAMS}
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
