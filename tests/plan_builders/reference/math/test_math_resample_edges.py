"""resample with align_corners and explicit scales against torch, and the arguments it refuses."""

from __future__ import annotations

import numpy as np
import pytest
from math_oracles import import_torch

from sigdnn.plan_builders.reference.math import resample, resample_backward

torch = import_torch()


@pytest.mark.parametrize("out", [(9, 7), (1, 7), (3, 1), (2, 2)])
def test_align_corners_with_scales_matches_torch(out: tuple[int, int]) -> None:
    """align_corners places outputs by the sizes alone (torch ignores the scale there too); one output is at 0."""
    rng = np.random.default_rng(sum(out))
    x = rng.standard_normal((1, 2, 5, 4))
    scales = (out[0] / 5, out[1] / 4)
    got = resample(x, "bilinear", (1, 2, *out), scales=scales, coordinates="align_corners")
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size=out, mode="bilinear", align_corners=True)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-13, atol=1e-14)


def test_bad_arguments_are_refused_forward_and_backward() -> None:
    x = np.zeros((1, 2, 4, 4))
    with pytest.raises(ValueError, match="coordinates 'corners'"):
        resample(x, "bilinear", (1, 2, 8, 8), coordinates="corners")
    with pytest.raises(ValueError, match="positive"):
        resample(x, "bilinear", (1, 2, 8, 8), scales=(2.0, 0.0))
    dy = np.zeros((1, 2, 8, 8))
    with pytest.raises(ValueError, match="mode 'cubic'"):
        resample_backward(dy, (1, 2, 4, 4), "cubic")
    with pytest.raises(ValueError, match="does not keep"):
        resample_backward(np.zeros((1, 3, 8, 8)), (1, 2, 4, 4), "bilinear")
    with pytest.raises(ValueError, match="does not keep"):
        resample_backward(np.zeros((1, 2, 8)), (1, 2, 4, 4), "bilinear")
