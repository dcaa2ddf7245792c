"""Helpers for end-to-end tests of single ops: random inputs in a chosen layout, one executor run, torch views.

Nothing here computes an op; the oracles (torch float64, loops) live in each
test module beside what they check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import sigdnn


def normal(rng: np.random.Generator, dims: Sequence[int], channels_last: bool = False) -> np.ndarray:
    """float64 standard normal values of logical ``dims``, stored channels-last (axis 1 innermost) if asked."""
    if not channels_last or len(dims) < 3:
        return rng.standard_normal(tuple(dims))
    stored = rng.standard_normal((dims[0], *dims[2:], dims[1]))
    return np.moveaxis(stored, -1, 1)


def outputs(g: sigdnn.Graph, named: Mapping[str, sigdnn.Tensor | None]) -> None:
    """Mark tensors as graph outputs under the given names (None entries are skipped)."""
    for name, t in named.items():
        if t is not None:
            t.set_output(True).set_name(name)


def run(g: sigdnn.Graph, inputs: Mapping[str, np.ndarray], dtype: Any = np.float64) -> dict[str, np.ndarray]:
    """One reference run through serialize -> deserialize (so the wire is on the path), inputs cast to ``dtype``."""
    back = sigdnn.deserialize(g.serialize())
    pack = {k: np.asarray(v).astype(dtype) if np.asarray(v).dtype != dtype else v for k, v in inputs.items()}
    return sigdnn.Executor().run(back, pack)


def torch64(a: np.ndarray, grad: bool = False) -> Any:
    import torch

    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def close(got: Any, want: Any, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    """float64 results agree with the oracle to a few ulps of the largest magnitude involved."""
    got, want = (a.detach().numpy() if hasattr(a, "detach") else np.asarray(a, dtype=np.float64) for a in (got, want))
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale)
