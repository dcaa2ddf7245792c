"""ONNX Resize through the importer and the reference, against onnxruntime and torch.

Every convention that maps onto sigdnn's resample (linear with half_pixel,
pytorch_half_pixel, align_corners, asymmetric; nearest as torch's
"nearest-exact" and legacy "nearest"), by sizes and by scales, up and down,
over 1, 2 and 3 spatial dims, with the axes attribute; torch's own
interpolate for what torch exports. What does not map is refused naming
the node and the setting. (onnxruntime, not onnx's ReferenceEvaluator, is
the oracle: the two differ for align_corners at a scale whose length is not
whole, e.g. 9 x 1.5, where ONNX places samples by 13.5, onnxruntime and
torch by 13; the importer refuses that case, and ONNX's own backend cases
check the rest against the specification.)
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

pytest.importorskip("onnxruntime")

import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import onnx as onnx_import

RNG = np.random.default_rng(5)


def model(x: np.ndarray, scales=None, sizes=None, opset: int = 19, **attributes) -> bytes:  # type: ignore[no-untyped-def]
    known = {"scales": np.array(scales, np.float32) if scales is not None else None,
             "sizes": np.array(sizes, np.int64) if sizes is not None else None}  # fmt: skip
    names = ["x", "", *(n if known[n] is not None else "" for n in ("scales", "sizes"))]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], **attributes)
    inits = [numpy_helper.from_array(v, n) for n, v in known.items() if v is not None]
    infos = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], "g", infos, [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def ours(data: bytes, x: np.ndarray) -> np.ndarray:
    return sigdnn.Executor().run(onnx_import.load(data), {"x": x})["y"]


def onnxruntime(data: bytes, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def close(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> None:
    """Equal shapes and values within the oracle's float32 error: a few ulps of the input's magnitude for the 2^d
    weighted terms, plus the weights' own error from sample positions computed in float32 (about an ulp of the
    position, up to the longest dim, for each of d dims, times a difference of two inputs)."""
    assert got.shape == want.shape
    d, longest = x.ndim - 2, max(max(x.shape[2:]), max(got.shape[2:]))
    np.testing.assert_allclose(got, want, rtol=0, atol=(8 + 4 * d * longest) * 2.0**-24 * np.abs(x).max())


LINEAR = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
SHAPES = [  # input, sizes (or None), scales (or None)
    ((2, 3, 7), (2, 3, 16), None),
    ((1, 2, 7, 9), (1, 2, 13, 4), None),
    ((1, 2, 6, 8), None, (1.0, 1.0, 2.0, 0.5)),
    ((1, 1, 5, 4, 6), (1, 1, 3, 8, 7), None),
    ((2, 2, 9, 10), None, (1.0, 1.0, 1.5, 0.75)),
]


@pytest.mark.parametrize("transform", LINEAR)
@pytest.mark.parametrize(("shape", "sizes", "scales"), SHAPES, ids=[str(s[0]) + str(s[1] or s[2]) for s in SHAPES])
def test_linear_matches_onnxruntime(transform: str, shape, sizes, scales) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal(shape).astype(np.float32)
    data = model(x, scales, sizes, mode="linear", coordinate_transformation_mode=transform)
    if transform == "align_corners" and scales is not None and any(d * c % 1 for d, c in zip(shape, scales)):
        with pytest.raises(GraphError, match="align_corners with scales giving fractional lengths"):
            ours(data, x)
        return
    close(ours(data, x), onnxruntime(data, x), x)


NEAREST = [("half_pixel", "round_prefer_ceil"), ("asymmetric", "floor")]


@pytest.mark.parametrize(("transform", "rounding"), NEAREST)
@pytest.mark.parametrize(("shape", "sizes", "scales"), SHAPES, ids=[str(s[0]) + str(s[1] or s[2]) for s in SHAPES])
def test_nearest_matches_onnxruntime_exactly(transform: str, rounding: str, shape, sizes, scales) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal(shape).astype(np.float32)
    data = model(x, scales, sizes, mode="nearest", coordinate_transformation_mode=transform, nearest_mode=rounding)
    np.testing.assert_array_equal(ours(data, x), onnxruntime(data, x))


def test_a_downscale_by_two_rounds_its_ties_as_named() -> None:
    """half_pixel at scale 1/2 puts every sample on a tie (x.5): round_prefer_ceil takes the odd element."""
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 8)
    data = model(x, sizes=(1, 1, 4), mode="nearest", coordinate_transformation_mode="half_pixel",
                 nearest_mode="round_prefer_ceil")  # fmt: skip
    np.testing.assert_array_equal(ours(data, x).ravel(), [1, 3, 5, 7])


def test_the_axes_attribute_names_the_resized_axes() -> None:
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    data = model(x, sizes=(9, 4), mode="linear", axes=[-1, 2])
    got = ours(data, x)
    assert got.shape == (1, 2, 4, 9)
    close(got, onnxruntime(data, x), x)


@pytest.mark.parametrize(
    ("mode", "align"), [("bilinear", False), ("bilinear", True), ("nearest", None), ("nearest-exact", None)]
)
def test_torchs_exported_interpolate_matches_torch(mode: str, align: bool | None) -> None:
    """What torch.onnx exports for F.interpolate, written out as torch writes it, against torch itself."""
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((1, 3, 10, 7)).astype(np.float32)
    size = (23, 5)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode=mode, align_corners=align).numpy()
    attributes = {
        ("bilinear", False): {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
        ("bilinear", True): {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        ("nearest", None): {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        ("nearest-exact", None): {"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                                  "nearest_mode": "round_prefer_ceil"},
    }[(mode, align)]  # fmt: skip
    close(ours(model(x, sizes=(1, 3, *size), **attributes), x), want, x)


def test_a_segmentation_heads_upsampling() -> None:
    """fcn / deeplabv3 export: 21 class maps from 28 x 28 to the 224 x 224 input."""
    x = RNG.standard_normal((2, 21, 28, 28)).astype(np.float32)
    data = model(x, sizes=(2, 21, 224, 224), mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    close(ours(data, x), onnxruntime(data, x), x)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"mode": "cubic"}, "mode 'cubic'"),
        ({"mode": "linear", "antialias": 1}, "antialias=1"),
        ({"mode": "linear", "exclude_outside": 1}, "exclude_outside=1"),
        ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, "'tf_crop_and_resize'"),
        ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, "'half_pixel_symmetric'"),
        ({"mode": "nearest", "coordinate_transformation_mode": "align_corners"}, "'align_corners' with nearest_mode"),
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "ceil"},
         "nearest_mode 'ceil'"),
        ({"mode": "linear", "keep_aspect_ratio_policy": "not_larger"}, "keep_aspect_ratio_policy 'not_larger'"),
    ],
)  # fmt: skip
def test_what_does_not_map_is_refused_by_name(setting: dict, message: str) -> None:
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(GraphError, match=f"node .*Resize.*{message}"):
        onnx_import.load(model(x, sizes=(1, 2, 8, 8), **setting))


@pytest.mark.parametrize(
    ("sizes", "scales", "message"),
    [
        ((1, 3, 8, 8), None, r"change N or C"),
        (None, (2.0, 1.0, 2.0, 2.0), r"change N or C"),
        ((1, 2, 1, 8), None, "pytorch_half_pixel with an output length of 1"),
        (None, (1.0, 1.0, 0.25, 2.0), "pytorch_half_pixel with an output length of 1"),
        ((8, 8), None, "give 4 scales or sizes"),
    ],
)
def test_sizes_it_cannot_take_are_refused(sizes, scales, message: str) -> None:  # type: ignore[no-untyped-def]
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(GraphError, match=message):
        onnx_import.load(model(x, scales, sizes, mode="linear", coordinate_transformation_mode="pytorch_half_pixel"))


def test_both_scales_and_sizes_are_refused() -> None:
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(GraphError, match="both scales and sizes"):
        onnx_import.load(model(x, (1.0, 1.0, 2.0, 2.0), (1, 2, 8, 8), mode="linear"))


@pytest.mark.parametrize(("axes", "scales"), [([3], [2.0]), ([-1, 2], [0.5, 3.0])])
def test_scales_on_the_named_axes_alone(axes: list[int], scales: list[float]) -> None:
    """Axes left out keep their size (a scale of 1); negative axes count from the end."""
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    data = model(x, scales=scales, mode="linear", axes=axes)
    close(ours(data, x), onnxruntime(data, x), x)


def test_the_attributes_torch_writes_beside_the_mode_are_taken() -> None:
    """torch.onnx writes cubic_coeff_a and nearest_mode for every mode, which linear ignores; a node without a mode
    is nearest."""
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    data = model(x, sizes=(1, 2, 7, 3), mode="linear", cubic_coeff_a=-0.75, extrapolation_value=0.0,
                 nearest_mode="floor", coordinate_transformation_mode="pytorch_half_pixel")  # fmt: skip
    close(ours(data, x), onnxruntime(data, x), x)
    data = model(x, sizes=(1, 2, 7, 3), coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    np.testing.assert_array_equal(ours(data, x), onnxruntime(data, x))


@pytest.mark.parametrize("axes", [[2, 2], [4], [2, -5]])
def test_axes_that_are_not_distinct_axes_are_refused(axes: list[int]) -> None:
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(GraphError, match="are not distinct axes of a rank-4 input"):
        onnx_import.load(model(x, sizes=[8] * len(axes), mode="linear", axes=axes))


@pytest.mark.parametrize("port", ["scales", "sizes"])
def test_scales_or_sizes_computed_at_run_time_are_refused(port: str) -> None:
    """resample's output dims are part of the graph: a scales / sizes input must be known when it is imported."""
    names = ["x", "", "scales", "sizes"] if port == "sizes" else ["x", "", "scales"]
    node = helper.make_node("Resize", names, ["y"], mode="linear")
    given = {"scales": helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4]),
             "sizes": helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])}  # fmt: skip
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "scales")] if port == "sizes" else []
    infos = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4]), given[port]]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], "g", infos, [out], inits)
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    with pytest.raises(GraphError, match=f"{port} \\(input {names.index(port)}, '{port}'\\) must be known"):
        onnx_import.load(data)


def test_an_input_without_n_and_c_is_refused() -> None:
    with pytest.raises(GraphError, match=r"input of rank 2: resample takes \[N, C, spatial...\]"):
        onnx_import.load(model(np.zeros((4, 4), np.float32), sizes=(8, 8), mode="linear"))


@pytest.mark.parametrize(("shape", "sizes", "scales"), [((1, 2, 4, 5), (1, 2, 8, 15), None),
                                                        ((1, 2, 4, 5), None, (1.0, 1.0, 3.0, 2.0)),
                                                        ((1, 1, 6, 7), (1, 1, 4, 3), None),
                                                        ((1, 1, 1, 4), None, (1.0, 1.0, 1.5, 2.0))])  # fmt: skip
def test_onnxs_default_nearest_is_taken_where_no_sample_ties(shape, sizes, scales) -> None:  # type: ignore[no-untyped-def]
    """half_pixel with round_prefer_floor (ONNX's default) rounds as resample wherever no position is k + 1/2:
    integer upscales, 6 -> 4 / 7 -> 3, and 1 -> 1 at a scale of 3/2 (its first tie would be output 1)."""
    x = RNG.standard_normal(shape).astype(np.float32)
    data = model(x, scales, sizes, mode="nearest")
    np.testing.assert_array_equal(ours(data, x), onnxruntime(data, x))


@pytest.mark.parametrize(
    ("sizes", "where"), [((1, 1, 4, 9), "output 0 of axis 2"), ((1, 1, 8, 6), "output 1 of axis 3")]
)
def test_onnxs_default_nearest_is_refused_where_a_sample_ties(sizes, where: str) -> None:  # type: ignore[no-untyped-def]
    """8 -> 4: output 0's position is (0 + 1/2) * 8/4 - 1/2 = 1/2, a tie; 8 -> 6: output 1's is 3/2 * 8/6 - 1/2 =
    3/2 (9 -> 9 and 8 -> 8 have none)."""
    x = np.zeros((1, 1, 8, 9 if sizes[3] == 9 else 8), np.float32)
    with pytest.raises(GraphError, match=f"round_prefer_floor: {where} samples exactly between two inputs"):
        onnx_import.load(model(x, sizes=sizes, mode="nearest"))


def test_align_corners_scales_on_named_axes_leave_the_others_whole() -> None:
    """An axis the axes attribute leaves out keeps its length: no fractional length to refuse."""
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    data = model(x, scales=[2.0], mode="linear", coordinate_transformation_mode="align_corners", axes=[3])
    close(ours(data, x), onnxruntime(data, x), x)
