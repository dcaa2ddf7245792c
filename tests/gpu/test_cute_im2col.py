"""The im2col kernels (kernels/im2col.py) on a GPU, bit for bit against im2col written as loops over a NumPy x.

The narrow kernel (any channel count, rows padded to ``kpad``) steps
through its vector's taps by counting; every case makes those steps cross
a channel, a tap and a filter row inside one vector, or end in the
padding columns, and the filter's own padding (a 1 x 1 "image" of
R * S * C channels) runs through it too; rows not a multiple of 8 long
(the wgrad's copy of dw out of its padded rows) take the element kernel. A's buffer holds NaN before the
launch and one vector past its end, which must stay NaN. Skips without a
GPU, torch, nvidia-cutlass-dsl or sm_90.
"""

from __future__ import annotations

import numpy as np
import pytest
from cute_skip import skip_unless_sm90

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe im2col")
torch = pytest.importorskip("torch")


def im2col_loops(x: np.ndarray, geometry: tuple[int, ...], kpad: int) -> np.ndarray:
    """A[(n, p, q), (r, s, c)] padded to (or cut at) ``kpad`` columns, from NHWC ``x`` by plain loops (zero outside
    x)."""
    n, h, w, c, p, q, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w = geometry
    a = np.zeros((n, p, q, kpad), x.dtype)
    for nn in range(n):
        for pp in range(p):
            for qq in range(q):
                for rr in range(r):
                    for ss in range(s):
                        hi, wi = pp * stride_h - pad_h + rr * dil_h, qq * stride_w - pad_w + ss * dil_w
                        start = (rr * s + ss) * c
                        width = max(0, min(c, kpad - start))  # a row shorter than R * S * C keeps its first kpad
                        if 0 <= hi < h and 0 <= wi < w:
                            a[nn, pp, qq, start : start + width] = x[nn, hi, wi, :width]
    return a.reshape(n * p * q, kpad)


CASES = {
    # name: n, h, w, c, r, s, pad, stride, dilation
    "stem_7x7_3_channels": (2, 19, 23, 3, 7, 7, (3, 3), (2, 2), (1, 1)),
    "1_channel_5x3_dilated": (3, 11, 9, 1, 5, 3, (2, 1), (1, 1), (2, 1)),
    "5_channels_3x3": (2, 6, 7, 5, 3, 3, (1, 1), (1, 2), (1, 1)),
    "12_channels_1x1": (2, 5, 7, 12, 1, 1, (0, 0), (1, 1), (1, 1)),
    "patch_4x4_3_channels": (1, 8, 12, 3, 4, 4, (0, 0), (4, 4), (1, 1)),
    "filter_as_image": (64, 1, 1, 147, 1, 1, (0, 0), (1, 1), (1, 1)),  # the stem's filter rows: 147 -> 152
}
UNPAD = (16, 1, 1, 152, 1, 1, (0, 0), (1, 1), (1, 1))  # the wgrad's copy of dw's 147 real columns: elements


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", [*CASES, "unpad_147_of_152"])
def test_the_narrow_kernels_write_a_exactly(name: str, dtype: str) -> None:
    from sigdnn.plan_builders.cute.kernels.im2col import VECTOR, Im2colLaunch

    n, h, w, c, r, s, pad, stride, dilation = CASES.get(name, UNPAD)
    p = (h + 2 * pad[0] - (r - 1) * dilation[0] - 1) // stride[0] + 1
    q = (w + 2 * pad[1] - (s - 1) * dilation[1] - 1) // stride[1] + 1
    geometry = (n, h, w, c, p, q, r, s, *pad, *stride, *dilation)
    kpad = 147 if name == "unpad_147_of_152" else -(-r * s * c // VECTOR) * VECTOR
    rng = np.random.default_rng(sum(geometry))
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    want = im2col_loops(x, geometry, kpad)
    kind = getattr(torch, dtype)
    x_gpu = torch.from_numpy(x).to(device="cuda", dtype=kind)
    a = torch.full((want.size + VECTOR,), float("nan"), device="cuda", dtype=kind)
    Im2colLaunch(dtype, (*geometry, kpad))(x_gpu.data_ptr(), a.data_ptr(), torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    got = a[: want.size].float().cpu().numpy().reshape(want.shape)
    exact = torch.from_numpy(want).to(kind).float().numpy()  # x's own values, moved unchanged
    np.testing.assert_array_equal(got, exact)
    assert a[want.size :].isnan().all()
