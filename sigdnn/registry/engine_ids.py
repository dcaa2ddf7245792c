"""Engine ids: one flat space, stable across releases, partitioned by library.

``IN_TREE`` is the one table of every in-tree builder's id: builders take
their id from it by name, and a test holds it fixed, so an id is never
reused or changed. Plugins pick ids from 30000 up.
"""

from __future__ import annotations

from sigdnn.errors import RegistryError

RANGES: dict[str, range] = {
    "reference": range(1000, 2000),
    "cutile": range(2000, 3000),
    "cute": range(3000, 4000),
    "gpu_reference": range(4000, 5000),
}
OUT_OF_TREE_START = 30000

IN_TREE: dict[str, int] = {
    "reference.pointwise": 1000,
    "reference.matmul": 1001,
    "reference.conv_fprop": 1002,
    "reference.conv_dgrad": 1003,
    "reference.conv_wgrad": 1004,
    "reference.batchnorm_inference": 1005,
    "reference.batchnorm": 1006,
    "reference.batchnorm_backward": 1007,
    "reference.layernorm": 1008,
    "reference.layernorm_backward": 1009,
    "reference.rmsnorm": 1010,
    "reference.rmsnorm_backward": 1011,
    "reference.softmax": 1012,
    "reference.reduction": 1013,
    "reference.sdpa": 1014,
    "reference.sdpa_backward": 1015,
    "reference.gdn": 1040,
    "reference.gdn_bwd": 1041,
    "reference.kda": 1042,
    "reference.kda_bwd": 1043,
    "reference.pooling": 1016,
    "reference.pooling_backward": 1017,
    "reference.resample": 1018,
    "reference.reshape": 1019,
    "reference.transpose": 1020,
    "reference.slice": 1021,
    "reference.concatenate": 1022,
    "reference.resample_backward": 1023,
    "cutile.pointwise": 2001,
    "cutile.fusion.pointwise": 2002,
    "cutile.softmax": 2010,
    "cutile.layernorm": 2011,
    "cutile.rmsnorm": 2012,
    "cutile.layernorm_backward": 2013,
    "cutile.rmsnorm_backward": 2014,
    "cutile.batchnorm_inference": 2015,
    "cutile.batchnorm": 2016,
    "cutile.batchnorm_backward": 2017,
    "cutile.reduction": 2018,
    "cutile.pooling": 2019,
    "cutile.pooling_backward": 2020,
    "cutile.movement": 2021,
    "cutile.resample": 2022,
    "cutile.resample_backward": 2023,
    "cutile.matmul": 2030,
    "cutile.gdn": 2040,
    "cutile.kda": 2041,
    "cutile.gdn_bwd": 2042,
    "cutile.kda_bwd": 2043,
    "cutile.conv_fprop_grouped": 2050,
    "cutile.conv_fprop_gemm": 2051,
    "cutile.conv_dgrad_gemm": 2052,
    "cutile.conv_wgrad_gemm": 2053,
    "cutile.sdpa": 2054,
    "cutile.sdpa_backward": 2055,
    "cutile.conv_fprop_1x1": 2056,
    "cutile.conv_fprop_im2col": 2057,
    "cute.matmul": 3000,
    "cute.conv_fprop": 3001,
    "cute.conv_fprop_implicit": 3002,
    "cute.conv_dgrad": 3003,
    "cute.conv_wgrad": 3004,
    "cute.conv_wgrad_implicit": 3005,
    "cute.conv_wgrad_rows": 3006,
    "cute.conv_fprop_transposed": 3007,
    "cute.conv_fprop_rows": 3008,
    "cute.sdpa": 3010,
    "cute.sdpa_backward": 3011,
    "cute.batchnorm": 3012,
    "cute.conv_fprop_folded": 3013,
    "gpu_reference.pointwise": 4000,
    "gpu_reference.matmul": 4001,
    "gpu_reference.conv_fprop": 4002,
    "gpu_reference.conv_dgrad": 4003,
    "gpu_reference.conv_wgrad": 4004,
    "gpu_reference.batchnorm_inference": 4005,
    "gpu_reference.batchnorm": 4006,
    "gpu_reference.batchnorm_backward": 4007,
    "gpu_reference.layernorm": 4008,
    "gpu_reference.layernorm_backward": 4009,
    "gpu_reference.rmsnorm": 4010,
    "gpu_reference.rmsnorm_backward": 4011,
    "gpu_reference.softmax": 4012,
    "gpu_reference.reduction": 4013,
    "gpu_reference.sdpa": 4014,
    "gpu_reference.sdpa_backward": 4015,
    "gpu_reference.pooling": 4016,
    "gpu_reference.pooling_backward": 4017,
    "gpu_reference.resample": 4018,
    "gpu_reference.reshape": 4019,
    "gpu_reference.transpose": 4020,
    "gpu_reference.slice": 4021,
    "gpu_reference.concatenate": 4022,
    "gpu_reference.resample_backward": 4023,
    "gpu_reference.gdn": 4024,
    "gpu_reference.gdn_bwd": 4025,
    "gpu_reference.kda": 4026,
    "gpu_reference.kda_bwd": 4027,
}


def check_engine_id(library: str, engine_id: int, name: str) -> None:
    """In-tree libraries keep to their range; plugins start at 30000."""
    if isinstance(engine_id, bool) or not isinstance(engine_id, int):
        raise RegistryError(f"builder '{name}': engine id must be an int, got {engine_id!r}")
    allowed = RANGES.get(library)
    if allowed is not None and engine_id not in allowed:
        raise RegistryError(
            f"builder '{name}': engine id {engine_id} is outside {library}'s range {allowed.start}-{allowed.stop - 1}"
        )
    if allowed is None and engine_id < OUT_OF_TREE_START:
        raise RegistryError(f"builder '{name}': out-of-tree engine ids start at {OUT_OF_TREE_START}, got {engine_id}")
