"""hipDNN MatmulAttributes -> sigdnn matmul."""

from __future__ import annotations

from sigdnn.importers.hipdnn.mapping import NodeMapping, maps


@maps("MatmulAttributes")
def _matmul(m: NodeMapping) -> None:
    m.add("matmul", **dict(zip(("a", "b", "c"), m.get("a", "b", "c"))))
