"""1x1 conv fprop cases for ``cutile.conv_fprop_1x1``'s tests (the emulator's and the GPU's).

Each layout the GEMM views: NCHW (column-major matrices, one GEMM an
image), NHWC (the batch folded into M), NHWC with gapped channel runs (rows
of a wider buffer), 1-D and 3-D, a w in the other layout than x, mixed
x / w dtypes (widened float32) and a batch-1 conv whose few output tiles
split K among blocks; sizes leave partial tiles on every axis.
"""

from __future__ import annotations

from conv_grouped_cases import Case


def one_by_one(name: str, dims: tuple[int, ...], k: int, layout: str, dtype: str = "float32", **kw: object) -> Case:
    spatial = len(dims) - 2
    ones, zeros = (1,) * spatial, (0,) * spatial
    return Case(name, dims, (k, dims[1], *ones), layout, zeros, zeros, ones, ones, dtype, **kw)  # type: ignore[arg-type]


CASES = [
    one_by_one("nchw_f32_batched", (3, 37, 5, 7), 70, "NCHW"),
    one_by_one("nhwc_bf16_folds", (2, 40, 9, 5), 24, "NHWC", "bfloat16"),
    one_by_one("nhwc_f16_gapped_channels", (2, 19, 4, 6), 33, "NHWC", "float16", gap=True),
    one_by_one("ncw_1d_f16_w_nwc", (2, 12, 17), 9, "NCW", "float16", w_layout="NWC"),
    one_by_one("ndhwc_3d_f32", (1, 8, 3, 4, 5), 20, "NDHWC"),
    one_by_one("nchw_bf16_x_f32_w", (2, 16, 6, 6), 40, "NCHW", "bfloat16", w_dtype="float32"),
    one_by_one("batch1_nchw_f32_split_k", (1, 300, 7, 7), 48, "NCHW"),  # one output tile: K split
    one_by_one("nchw_f32_x_bf16_w_rows_of_2", (2, 5, 2, 9), 7, "NCHW", w_dtype="bfloat16"),
    one_by_one("pooled_map_nhwc_bf16", (3, 16, 1, 1), 10, "NHWC", "bfloat16"),  # a classifier conv on a 1x1 map
]


def im2col_cases() -> list[Case]:
    """What ``cutile.conv_fprop_im2col`` takes of the implicit GEMM's cases and these: ungrouped convs whose filter
    is dense in x's order."""
    from conv_gemm_cases import CASES as GEMM_CASES

    return [c for c in GEMM_CASES + CASES if c.groups == 1 and c.w_layout in (None, c.layout)]
