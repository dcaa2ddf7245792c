"""Helpers for the pygraph tests: the cuDNN-frontend lifecycle, run the way its samples run it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import sigdnn.cudnn as cudnn  # noqa: E402

F64 = cudnn.data_type.DOUBLE


@pytest.fixture
def handle() -> Any:
    return cudnn.create_handle(device="cpu")


@pytest.fixture
def graph(handle: Any) -> Any:
    return cudnn.pygraph(io_data_type=F64, intermediate_data_type=F64, compute_data_type=F64, handle=handle)


def run(graph: Any, inputs: dict[Any, Any], outputs: list[Any]) -> list[Any]:
    """validate .. build_plans, then execute with fresh output buffers; the outputs as torch tensors."""
    for t in outputs:
        t.set_output(True)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    made = [torch.empty_strided(t.get_dim(), t.get_stride(), dtype=torch.float64) for t in outputs]
    workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8)
    graph.execute({**inputs, **dict(zip(outputs, made))}, workspace)
    return made


def close(a: Any, b: Any) -> None:
    torch.testing.assert_close(a, b.to(a.dtype), rtol=1e-10, atol=1e-10)
