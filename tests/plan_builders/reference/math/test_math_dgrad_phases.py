"""conv_dgrad where some residue classes of dx get nothing, against torch autograd.

The phase algorithm writes dx one residue class (mod the stride) at a time.
A class can lie past x's end (a stride longer than x), have no tap that
reaches it, or have taps that read only padding; dx there is 0. Each case
pairs such an axis with an ordinary one, so that only part of a class's
region is empty. Integer-valued inputs: every sum is exact, results equal
bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from math_oracles import import_torch

from sigdnn.plan_builders.reference.math import conv_dgrad
from sigdnn.plan_builders.reference.math.windows import out_size

torch = import_torch()

# per axis: size, kernel, stride, dilation, pre, post
ORDINARY = (4, 2, 1, 1, 0, 0)
ONLY_PADDING = (1, 2, 2, 1, 2, 0)  # the one window reads padded 0 and 1: x[0] is never read
NO_TAP_AND_PAST_THE_END = (2, 1, 3, 1, 0, 1)  # class 1: no tap reaches it; class 2: past x's end
AXES = [(ONLY_PADDING, ORDINARY), (ORDINARY, NO_TAP_AND_PAST_THE_END), (ONLY_PADDING, NO_TAP_AND_PAST_THE_END)]


def torch_dgrad(dy: np.ndarray, w: np.ndarray, x_dims: tuple[int, ...], axes) -> np.ndarray:
    x = torch.zeros(x_dims, dtype=torch.float64, requires_grad=True)
    pad = [p for axis in reversed(axes) for p in (axis[4], axis[5])]
    stride, dilation = tuple(a[2] for a in axes), tuple(a[3] for a in axes)
    y = torch.nn.functional.conv2d(torch.nn.functional.pad(x, pad), torch.from_numpy(w), stride=stride,
                                   dilation=dilation)  # fmt: skip
    y.backward(torch.from_numpy(dy))
    return x.grad.numpy()


@pytest.mark.parametrize("channels", [(3, 2), (2, 3)], ids=["k<=c phases", "k>c scatter"])
@pytest.mark.parametrize("axes", AXES)
def test_empty_residue_classes_get_zero(axes, channels: tuple[int, int]) -> None:
    c, k = channels
    x_dims = (2, c, axes[0][0], axes[1][0])
    kernel = tuple(a[1] for a in axes)
    out = tuple(out_size(*a[:1], a[4], a[5], a[1], a[2], a[3]) for a in axes)
    rng = np.random.default_rng(sum(out) + c)
    w = rng.integers(-4, 5, (k, c, *kernel)).astype(np.float64)
    dy = rng.integers(-4, 5, (2, k, *out)).astype(np.float64)
    got = conv_dgrad(dy, w, tuple(a[4] for a in axes), tuple(a[5] for a in axes), tuple(a[2] for a in axes),
                     tuple(a[3] for a in axes), x_dims)  # fmt: skip
    np.testing.assert_array_equal(got, torch_dgrad(dy, w, x_dims, axes))
