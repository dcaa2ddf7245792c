"""MATMUL nodes -> sigdnn matmul."""

from __future__ import annotations

from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps


@maps("MATMUL")
def _matmul(m: NodeMapping) -> None:
    if R.real(m.attr("padding_value", 0.0), f"{m.where} padding_value") != 0.0:
        raise m.refuse("padding_value (ragged matmul padding) is not supported")
    m.add("matmul", a=m.input("A"), b=m.input("B"), c=m.output("C"))
