"""The module-level skip every CuTe GPU test file shares: no CuTe DSL, no GPU, or a GPU that is not sm_90."""

from __future__ import annotations

import pytest

from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.gpu_properties import device_properties


def skip_unless_sm90(what: str) -> None:
    """Skip the calling test module, with the reason, unless ``what`` can run here."""
    reason = unavailable_reason()
    if reason is None:
        capability, _ = device_properties(0)
        if capability != (9, 0):
            reason = f"{what} needs sm_90, this GPU is sm_{capability[0]}{capability[1]}"
    if reason is not None:
        pytest.skip(reason, allow_module_level=True)
