"""cuTile GPU tests (test_cutile_*.py): skipped, with the reason, where cuda.core, a GPU or cuda.tile is missing."""

from __future__ import annotations

import pytest


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
