"""1x1 convolutions, which conv_forward runs as one GEMM on x itself when it may, against torch.

Integer-valued inputs make every float64 sum exact, so results must equal
torch's bit for bit. Planes of 64 positions or more take the in-place path
in either layout; a stride or any padding must keep a 1x1 kernel off it.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from math_oracles import import_torch, in_layout

from sigdnn.plan_builders.reference.math import conv_forward

torch = import_torch()


def torch_conv(x: np.ndarray, w: np.ndarray, pre: tuple[int, ...], post: tuple[int, ...], stride: tuple[int, ...]):
    pad = [p for a, b in zip(reversed(pre), reversed(post)) for p in (a, b)]  # F.pad wants the last axis first
    xp = torch.nn.functional.pad(torch.from_numpy(np.ascontiguousarray(x)), pad)
    conv = torch.nn.functional.conv1d if x.ndim == 3 else torch.nn.functional.conv2d
    groups = x.shape[1] // w.shape[1]
    return conv(xp, torch.from_numpy(w), stride=stride, groups=groups).numpy()


CASES = [  # x dims, w dims, pre, post, stride
    ((2, 4, 9, 8), (6, 4, 1, 1), (0, 0), (0, 0), (1, 1)),
    ((2, 4, 9, 8), (6, 2, 1, 1), (0, 0), (0, 0), (1, 1)),  # two groups
    ((3, 6, 70), (9, 2, 1), (0,), (0,), (1,)),  # three groups, one spatial axis
    ((2, 4, 9, 8), (6, 4, 1, 1), (0, 0), (0, 0), (1, 2)),  # a stride on one axis
    ((2, 4, 9, 8), (6, 2, 1, 1), (1, 0), (0, 0), (1, 1)),  # padding before, on one axis
    ((2, 4, 9, 8), (6, 4, 1, 1), (0, 0), (0, 1), (1, 1)),  # padding after, on one axis
]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize(("xd", "wd", "pre", "post", "stride"), CASES)
def test_one_by_one_convolutions_match_torch(xd, wd, pre, post, stride, layout: str) -> None:
    rng = np.random.default_rng(sum(xd) + sum(wd))
    x = rng.integers(-8, 9, xd).astype(np.float64)
    w = rng.integers(-8, 9, wd).astype(np.float64)
    dilation = (1,) * len(pre)
    got = conv_forward(in_layout(x, layout), w, pre, post, stride, dilation)
    np.testing.assert_array_equal(got, torch_conv(x, w, pre, post, stride))


def traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("xd", "layout"),
    [((1, 8, 8, 8), "contiguous"), ((1, 8, 8, 512), "contiguous"), ((2, 8, 8, 8), "channels_last")],
)
def test_a_one_by_one_convolution_of_mergeable_planes_allocates_only_its_output(xd, layout: str) -> None:
    """The in-place GEMM's claim, held at its strength: no columns, no scratch chunk (several MiB), only y.

    64 positions a plane is the smallest that the channels-first path multiplies in place.
    """
    x = in_layout(np.random.default_rng(0).standard_normal(xd), layout)
    w = np.random.default_rng(1).standard_normal((16, 8, 1, 1))
    y_bytes = xd[0] * 16 * xd[2] * xd[3] * 8
    peak = traced_peak(lambda: conv_forward(x, w, (0, 0), (0, 0), (1, 1), (1, 1)))
    assert peak < y_bytes + (64 << 10), (peak, y_bytes)
