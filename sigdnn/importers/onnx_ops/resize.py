"""Resize -> sigdnn resample (what torch.nn.functional.interpolate exports: segmentation heads, FPNs, upsampling).

sigdnn's resample takes torch's conventions (docs/ops.md, "resample"), so
only the ONNX settings that mean exactly one of them map:

- mode "linear" (over the spatial dims) with coordinate_transformation_mode
  half_pixel, pytorch_half_pixel (the same wherever no output length is 1),
  align_corners or asymmetric -> "bilinear";
- mode "nearest" with half_pixel and nearest_mode round_prefer_ceil (torch's
  "nearest-exact") or asymmetric and floor (torch's "nearest", how torch
  exports it) -> "nearest"; half_pixel with round_prefer_floor (ONNX's
  default) too where no sample falls on a tie (checked in exact fractions,
  output by output: an integer upscale never does; a downscale by 2 always).

Given ``sizes`` the output dims are those (samples placed by in / out, as
torch with size=); given ``scales`` they are floor(in * scale) and the
samples are placed by the scale (torch with scale_factor=), as ONNX does;
align_corners with a scale whose in * scale is not whole is refused (ONNX
places those samples by the unrounded length, torch and onnxruntime by the
output's).
N and C must keep their sizes. Refused by name: cubic, antialias, the other
coordinate and rounding conventions, tf_crop_and_resize's roi,
exclude_outside, and keep_aspect_ratio_policy other than stretch.
"""

from __future__ import annotations

import math
from fractions import Fraction

from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op

LINEAR_COORDINATES = {
    "half_pixel": "half_pixel",
    "pytorch_half_pixel": "half_pixel",
    "align_corners": "align_corners",
    "asymmetric": "asymmetric",
}
NEAREST_CONVENTIONS = {
    ("half_pixel", "round_prefer_ceil"): "half_pixel",
    ("half_pixel", "round_prefer_floor"): "half_pixel",  # the same wherever no sample ties (checked)
    ("asymmetric", "floor"): "asymmetric",
}


@onnx_op("Resize")
def resize(node: OnnxNode) -> list[Value]:
    dims = node.dims(0)
    rank = len(dims)
    mode = str(node.attr("mode", "nearest"))
    transform = str(node.attr("coordinate_transformation_mode", "half_pixel"))
    rounding = str(node.attr("nearest_mode", "round_prefer_floor"))
    node.attr("cubic_coeff_a")  # cubic's alone (refused below)
    node.attr("extrapolation_value")  # tf_crop_and_resize's alone (refused below)
    if int(node.attr("antialias", 0)):
        raise node.refuse("antialias=1 (a downsampling filter resample does not have)")
    if int(node.attr("exclude_outside", 0)):
        raise node.refuse("exclude_outside=1")
    policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        raise node.refuse(f"keep_aspect_ratio_policy {policy!r}; supported: 'stretch'")
    if rank < 3:
        raise node.refuse(f"input of rank {rank}: resample takes [N, C, spatial...]")
    if mode == "linear":
        coordinates = LINEAR_COORDINATES.get(transform)
        resample_mode = "bilinear"
    elif mode == "nearest":
        coordinates = NEAREST_CONVENTIONS.get((transform, rounding))
        resample_mode = "nearest"
    else:
        raise node.refuse(f"mode {mode!r}; supported: 'nearest', 'linear'")
    if coordinates is None:
        settings = f"coordinate_transformation_mode {transform!r}" + (
            f" with nearest_mode {rounding!r}" if mode == "nearest" else ""
        )
        raise node.refuse(f"{mode} with {settings}: resample's conventions are torch's (see docs/ops.md)")
    axes = list(node.attr("axes", None) or range(rank))
    axes = [a + rank if a < 0 else a for a in axes]
    if sorted(set(axes)) != sorted(axes) or any(not 0 <= a < rank for a in axes):
        raise node.refuse(f"axes {list(node.attr('axes'))} are not distinct axes of a rank-{rank} input")
    scales, sizes = _scales_and_sizes(node)
    given = sizes if sizes is not None else scales
    if given is None or len(given) != len(axes):
        raise node.refuse(f"give {len(axes)} scales or sizes (one per axis of {axes}), got {given}")
    per_axis = dict(zip(axes, given))
    factors = None if scales is None else [float(per_axis.get(a, 1.0)) for a in range(rank)]  # axes left out: 1
    if factors is None:
        out = [int(per_axis.get(a, dims[a])) for a in range(rank)]
    else:
        out = [math.floor(d * f) for d, f in zip(dims, factors)]
    if out[:2] != list(dims[:2]):
        raise node.refuse(f"output dims {out} change N or C of {list(dims)}; resample resizes spatial dims only")
    if transform == "align_corners" and factors is not None and out != [d * f for d, f in zip(dims, factors)]:
        raise node.refuse(
            f"align_corners with scales giving fractional lengths {[d * f for d, f in zip(dims, factors)]}: "
            "ONNX places its samples by the unrounded length, resample (as torch and onnxruntime) by the output's"
        )
    if (mode, transform, rounding) == ("nearest", "half_pixel", "round_prefer_floor"):
        tie = _first_tie(dims, out, factors)
        if tie is not None:
            raise node.refuse(
                f"nearest with half_pixel and round_prefer_floor: output {tie[1]} of axis {tie[0]} samples "
                "exactly between two inputs, where resample (torch's nearest-exact) rounds up"
            )
    if transform == "pytorch_half_pixel" and 1 in out[2:]:
        raise node.refuse("pytorch_half_pixel with an output length of 1 (samples at 0, not half_pixel's)")
    x = node.tensor(0)
    name = node.fresh("")
    if sizes is not None:
        return [node.graph.resample(x, resample_mode, dims=out, coordinates=coordinates, name=name)]
    return [node.graph.resample(x, resample_mode, scales=factors[2:], coordinates=coordinates, name=name)]


def _first_tie(dims: tuple[int, ...], out: list[int], scales: list[float] | None) -> tuple[int, int] | None:
    """(axis, output) of the first half_pixel sample exactly halfway between two inputs, or None.

    Output o samples at (o + 1/2) step - 1/2 (step = in / out by sizes, 1 / scale by scales), halfway when
    (2o + 1) step is an even integer. With step = p / q in lowest terms that needs q to divide the odd 2o + 1
    (so q is odd, 2o + 1 = q r with r odd) and r p even, so p even: then the first tie is 2o + 1 = q.
    """
    for axis in range(2, len(dims)):
        step = Fraction(dims[axis], out[axis]) if scales is None else 1 / Fraction(scales[axis])
        first = (step.denominator - 1) // 2
        if step.denominator % 2 and step.numerator % 2 == 0 and first < out[axis]:
            return axis, first
    return None


def _scales_and_sizes(node: OnnxNode) -> tuple[tuple[float, ...] | None, tuple[int, ...] | None]:
    """The scales (input 2) and sizes (input 3), each None where absent or empty (the roi, input 1, is
    tf_crop_and_resize's alone)."""
    scales = tuple(float(s) for s in node.const(2, "scales").reshape(-1)) if node.has(2) else ()
    sizes = node.ints(3, "sizes") if node.has(3) else ()
    if scales and sizes:
        raise node.refuse("both scales and sizes: ONNX allows one")
    return (scales or None), (sizes or None)
