"""cuTile GPU tests (test_cutile_*.py): skipped, with the reason, where cuda.core, a GPU or cuda.tile is missing.

``SIGDNN_TEST_WALK_BLOCKS=B`` runs every forward row kernel (layernorm, rmsnorm, softmax) in B persistent blocks
at every row width, so the tests' small shapes, fewer row tiles than a band's blocks, run the walked kernels
(``row_kernel_source.walked_by``) too:

    SIGDNN_TEST_WALK_BLOCKS=3 python -m pytest -m gpu tests/gpu/test_cutile_norms.py
"""

from __future__ import annotations

import os

import attrs
import pytest


def pytest_configure(config: pytest.Config) -> None:
    blocks = os.environ.get("SIGDNN_TEST_WALK_BLOCKS")
    if blocks:
        from sigdnn.plan_builders.cutile import tiling

        for name in ("LAYERNORM_FORWARD", "RMSNORM_FORWARD", "SOFTMAX_FORWARD"):
            bands = getattr(tiling, name)
            setattr(tiling, name, tuple((w, attrs.evolve(c, blocks=int(blocks))) for w, c in bands))


def gpu_skip_reason() -> str | None:
    from sigdnn.plan_builders.cutile.pointwise import unavailable_reason

    return unavailable_reason()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if item.fspath.basename.startswith("test_cutile_") and item.get_closest_marker("gpu"):
            reason = reason or gpu_skip_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"no GPU backend here: {reason}"))
