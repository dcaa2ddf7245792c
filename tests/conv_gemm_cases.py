"""Conv fprop cases for the cuTile implicit-GEMM builder's tests: the emulator's and the GPU's.

What the CuTe conv builders decline and users export: float32 NCHW (ONNX
from torchvision), the 3-channel stem, 1-D and 3-D convs, NCHW 16-bit,
mixed x / w dtypes (the widened MMA), a gapped x, groups with wide C/G, and
sizes that leave partial tiles on every axis: pixels past TM, K past TN,
reductions past TK (and shorter than one TK); and batch-1 convs whose few
output tiles split K among blocks (uneven splits, a partial channel tile).
"""

from __future__ import annotations

from conv_grouped_cases import Case

CASES = [
    Case("nchw_f32_3x3", (2, 5, 7, 6), (6, 5, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1)),
    Case("stem_7x7_s2_nhwc_bf16", (1, 3, 13, 11), (8, 3, 7, 7), "NHWC", (3, 3), (3, 3), (2, 2), (1, 1),
         "bfloat16"),
    Case("nchw_f16_wide_k", (1, 20, 5, 4), (70, 20, 3, 3), "NCHW", (1, 0), (0, 1), (1, 1), (1, 1), "float16",
         w_layout="NHWC"),
    Case("1x1_s2_gapped_f32", (2, 9, 6, 7), (17, 9, 1, 1), "NCHW", (0, 0), (0, 0), (2, 2), (1, 1), gap=True),
    Case("1d_ncw_dilation2", (2, 6, 12), (5, 6, 3), "NCW", (2,), (1,), (1,), (2,), "float16"),
    Case("3d_ndhwc_f32", (1, 8, 5, 3, 4), (3, 8, 3, 2, 2), "NDHWC", (1, 0, 1), (0, 1, 0), (1, 2, 1), (1, 1, 1)),
    Case("bf16_x_f32_w", (2, 8, 5, 5), (16, 8, 3, 3), "NHWC", (1, 1), (1, 1), (1, 1), (1, 1), "bfloat16",
         w_dtype="float32"),
    Case("g2_c20_nchw", (1, 40, 5, 6), (24, 20, 3, 3), "NCHW", (1, 1), (1, 1), (2, 1), (1, 1)),
    Case("size_one_dims", (1, 4, 1, 9), (6, 4, 1, 3), "NHWC", (0, 1), (0, 1), (1, 2), (1, 1), "float16"),
    Case("many_pixels_few_channels", (5, 2, 9, 10), (3, 2, 2, 2), "NCHW", (0, 0), (1, 1), (1, 1), (1, 1)),
    # 603 reduction indices, 19 K steps: 2 splits of 10 and 9 (split-K)
    Case("split_k_nchw_f32", (1, 67, 7, 7), (40, 67, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1)),
    # 2 groups of 144 channels, 41 K steps each: 5 splits, the last of 5 steps; 20 channels a group in 32-wide tiles
    Case("split_k_g2_nhwc_bf16", (1, 288, 6, 5), (40, 144, 3, 3), "NHWC", (1, 1), (1, 1), (1, 1), (1, 1),
         "bfloat16"),
]  # fmt: skip
