"""Shared pytest setup: make helper modules in tests/ (oracles*.py) importable.

The test folders have no ``__init__.py``, so pytest's default import mode
puts only each test file's own folder on ``sys.path``; helpers that several
folders share live here in ``tests/`` and are imported as top-level modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(autouse=True)
def _mpmath_precision_is_restored():
    """Oracles set mpmath's global precision; a test must not leave its setting to the next one."""
    mpmath = sys.modules.get("mpmath")
    saved = mpmath.mp.prec if mpmath is not None else None
    yield
    if saved is not None:
        mpmath.mp.prec = saved
