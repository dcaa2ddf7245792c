"""validate(): the same graph and inputs through the reference and the GPU backend."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from sigdnn.executor import Executor
from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.graph import Graph
from sigdnn.validation.compare import Comparison, compare
from sigdnn.validation.inputs import random_inputs
from sigdnn.validation.tolerances import tolerance_for


@attrs.frozen
class ValidationReport:
    graph: str
    builders: dict[str, str]  # node -> GPU builder that ran it
    outputs: tuple[Comparison, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.outputs)

    def table(self) -> str:
        head = f"{'output':<24} {'dtype':<9} {'max abs':>10} {'max rel':>10} {'mismatch':>9} {'size':>9}  tolerance"
        rows = [f"validation of '{self.graph}': {'PASS' if self.passed else 'FAIL'}", head]
        for c in self.outputs:
            rows.append(
                f"{c.name:<24} {c.dtype:<9} {c.max_abs_error:>10.3g} {c.max_rel_error:>10.3g} "
                f"{c.mismatches + c.nan_inf_mismatches:>9} {c.size:>9}  {c.tolerance}"
            )
            if not c.passed:
                rows.append(f"    worst at {c.worst_index}: got {c.worst_got!r}, want {c.worst_want!r}")
        return "\n".join(rows)

    def to_json(self) -> str:
        return json.dumps(
            {
                "graph": self.graph,
                "passed": self.passed,
                "builders": self.builders,
                "outputs": [c.as_dict() for c in self.outputs],
            },
            indent=2,
        )


def validate(
    graph: Graph | bytes,
    inputs: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    *,
    backend: str = "gpu",
    executor: Executor | None = None,
) -> ValidationReport:
    """Run ``graph`` on ``backend`` and on the reference with the same inputs; compare outputs."""
    g = graph if isinstance(graph, Graph) else deserialize(graph)
    data: dict[str, Any] = dict(inputs) if inputs is not None else random_inputs(g, seed)
    reference = Executor("reference")
    want = reference.execute(reference.prepare(g), data)
    device = executor or Executor(backend)
    plan = device.prepare(g)
    got = device.execute(plan, data, to_host=True)
    comparisons = tuple(compare(t.name, got[t.name], want[t.name], tolerance_for(g, t.uid)) for t in g.outputs)
    return ValidationReport(g.name, {s.node.name: s.builder.name for s in plan.steps}, comparisons)
