"""Mutation fuzzing of the importers: hostile hipDNN buffers, cuDNN JSON and ONNX bytes raise SchemaError or
GraphError only (never another exception, a hang or a huge allocation).

Case ``i`` draws everything from ``random.Random(f"{seed}-{format}-{i}")``. The default run takes a few
hundred cases per format; the ``fuzz``-marked test takes ``SIGDNN_FUZZ_CASES`` (default 10,000) per format:

    python -m pytest tests/importers/test_fuzz_importers.py -m fuzz
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from cudnn_json_writer import graph_json, hex_float, node
from hipdnn_writer import graph_buffer

import sigdnn
from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError
from sigdnn.importers import cudnn_json, hipdnn

SEED = int(os.environ.get("SIGDNN_FUZZ_SEED", "0"))
CI_CASES = 250
CASE_SECONDS = 2.0


def _graph() -> tuple[sigdnn.Graph, dict[str, int]]:
    g = sigdnn.Graph("fz", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x, w = g.tensor("x", (1, 2, 5, 5), uid=1), g.tensor("w", (3, 2, 3, 3), uid=2)
    eps = g.scalar("eps", 1e-5, "float32", uid=3)
    scale, bias = g.tensor("s", (1, 3, 1, 1), uid=4), g.tensor("b", (1, 3, 1, 1), uid=5)
    y = g.conv_fprop(x, w, padding=(1, 1), name="conv")
    r = g.pointwise("relu_fwd", y, name="relu", relu_lower_clip_slope=0.1)
    z, *_ = g.batchnorm(r, scale, bias, epsilon=eps, name="bn")
    z.set_output(True).set_name("z")
    bn = g.node_by_name("bn").op
    return g, {"y": y.uid, "r": r.uid, "z": z.uid, "mean": bn.mean, "inv": bn.inv_variance}


def hipdnn_seeds() -> list[bytes]:
    g, u = _graph()
    return [
        graph_buffer(
            g,
            [
                (
                    "conv",
                    None,
                    "ConvolutionFwd",
                    {0: ("long", 1), 1: ("long", 2), 2: ("long", u["y"]), 3: ("longs", [1, 1]), 4: ("longs", [1, 1])},
                ),
                ("relu", None, "Pointwise", {0: ("u8", 34), 3: ("f32", 0.1), 5: ("long", u["y"]), 8: ("long", u["r"])}),
                (
                    "bn",
                    None,
                    "Batchnorm",
                    {
                        0: ("long", u["r"]),
                        1: ("long", 4),
                        2: ("long", 5),
                        3: ("long", 3),
                        8: ("long", u["z"]),
                        9: ("long", u["mean"]),
                        10: ("long", u["inv"]),
                    },
                ),
            ],
        )
    ]


def json_seeds() -> list[bytes]:
    g, u = _graph()
    return [
        graph_json(
            g,
            [
                node(
                    "CONV_FPROP",
                    "conv",
                    {"X": 1, "W": 2},
                    {"Y": u["y"]},
                    pre_padding=[1, 1],
                    post_padding=[1, 1],
                    stride=[1, 1],
                    dilation=[1, 1],
                    math_mode="CROSS_CORRELATION",
                ),
                node(
                    "POINTWISE",
                    "relu",
                    {"IN_0": u["y"]},
                    {"OUT_0": u["r"]},
                    mode="RELU_FWD",
                    relu_lower_clip_slope=hex_float(0.1),
                ),
                node(
                    "BATCHNORM",
                    "bn",
                    {"X": u["r"], "SCALE": 4, "BIAS": 5, "EPSILON": 3},
                    {"Y": u["z"], "MEAN": u["mean"], "INV_VARIANCE": u["inv"]},
                    peer_stats=[],
                ),
            ],
        )
    ]


INTERESTING = [0, 1, 2, 3, 4, 7, 8, 15, 16, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(7)
        if not b:
            b = bytearray(rng.randbytes(rng.randint(1, 64)))
        at = rng.randrange(len(b))
        if kind == 0:
            b[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            width = rng.choice((1, 2, 4, 8))
            value = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            b[at : at + width] = value.to_bytes(width, "little")
        elif kind == 2:
            del b[rng.randrange(len(b)) :]
        elif kind == 3:
            b += rng.randbytes(rng.randint(1, 64))
        elif kind == 4:
            start = rng.randrange(len(b))
            chunk = b[start : start + rng.randint(1, 32)]
            b[at:at] = chunk
        elif kind == 5:
            del b[at : at + rng.randint(1, 16)]
        else:
            b[at] = rng.randrange(256)
    return bytes(b)


JSON_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**63,
    -(2**63) - 1,
    1e308,
    -0.5,
    "",
    "X",
    "3F800000",
    "ZZZZZZZZ",
    [],
    [1],
    [[0, 1]],
    {},
    {"index": 3, "value": "3F800000"},
    {"index": 9},
    "FLOAT",
    "HALF",
    "INT4",
    "TRAINING",
    "MAXPOOL",
    [1, 2, 3, 4, 5, 6, 7, 8, 9],
    [-1, -1],
]


def mutate_json(data: bytes, rng: random.Random) -> bytes:
    """Structured mutations: replace, delete or add values anywhere in the document; sometimes bytes too."""
    if rng.random() < 0.2:
        return mutate_bytes(data, rng)
    doc = json.loads(data)
    for _ in range(rng.randint(1, 3)):
        path: list[Any] = []
        cur = doc
        while isinstance(cur, (dict, list)) and cur and rng.random() < 0.75:
            key = rng.choice(list(cur)) if isinstance(cur, dict) else rng.randrange(len(cur))
            path.append((cur, key))
            cur = cur[key]
        if not path:
            continue
        parent, key = path[-1]
        action = rng.randrange(3)
        if action == 0:
            parent[key] = copy.deepcopy(rng.choice(JSON_VALUES))
        elif action == 1 and isinstance(parent, dict):
            del parent[key]
        elif isinstance(parent, dict):
            parent[rng.choice(["fancy", "uid", "tag", "inputs", "dim"])] = copy.deepcopy(rng.choice(JSON_VALUES))
        else:
            parent.append(copy.deepcopy(rng.choice(JSON_VALUES)))
    return json.dumps(doc).encode()


def onnx_seeds() -> list[bytes]:
    pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("Softmax", ["f"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "fz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 75])],
        [w, shape],
    )
    first = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    pads = numpy_helper.from_array(np.array([0, 1, 2, 0, 0, 2], np.int64), "pads")
    k = numpy_helper.from_array(np.ones((4, 8, 3), np.float32), "k")
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
        helper.make_node("Einsum", ["p", "k"], ["y"], equation="bij,bjk->bik"),
    ]
    graph = helper.make_graph(
        nodes,
        "fz_pad_einsum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5, 3])],
        [pads, k],
    )
    second = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    known = {n: numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("sizes", [1, 2, 9, 7]), ("s", [0]), ("e", [0]), ("a", [3]))}  # fmt: skip
    nodes = [
        helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode="linear",
                         coordinate_transformation_mode="pytorch_half_pixel"),
        helper.make_node("Slice", ["r", "s", "e", "a"], ["empty"]),
        helper.make_node("Concat", ["empty", "r"], ["y"], axis=3),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "fz_resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 9, 7])],
        list(known.values()),
    )
    third = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    return [first, second, third]


def _onnx_load(data: bytes) -> Any:
    from sigdnn.importers import onnx as onnx_import

    return onnx_import.load(data)


FORMATS: dict[str, tuple[Callable[[], list[bytes]], Callable[[bytes, random.Random], bytes], Callable]] = {
    "hipdnn": (hipdnn_seeds, mutate_bytes, hipdnn.load),
    "cudnn_json": (json_seeds, mutate_json, cudnn_json.load),
    "onnx": (onnx_seeds, mutate_bytes, _onnx_load),
}


def fuzz(fmt: str, cases: int) -> Counter:
    seeds_of, mutate, load = FORMATS[fmt]
    seeds = seeds_of()
    for seed in seeds:  # valid; their whole path runs once, so no case pays for the lazy imports
        sigdnn.deserialize(load(seed).serialize())
    for dtype in DataType:  # ml_dtypes too (bfloat16, fp8), imported on first use: ~1 s on a loaded machine
        assert dtype.itemsize > 0
    outcomes: Counter = Counter()
    for i in range(cases):
        rng = random.Random(f"{SEED}-{fmt}-{i}")
        data = mutate(rng.choice(seeds), rng)
        start = time.perf_counter()
        try:
            graph = load(data)
            sigdnn.deserialize(graph.serialize())
            outcomes["valid"] += 1
        except (SchemaError, GraphError) as e:
            outcomes[type(e).__name__] += 1
        except Exception as e:  # the bug this test exists to find
            raise AssertionError(f"{fmt} case {i}: {type(e).__name__}: {e}") from e
        assert time.perf_counter() - start < CASE_SECONDS, f"{fmt} case {i} took too long"
    return outcomes


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_mutated_inputs_raise_only_schema_or_graph_errors(fmt: str) -> None:
    outcomes = fuzz(fmt, CI_CASES)
    assert outcomes["SchemaError"] + outcomes["GraphError"] > CI_CASES // 4, outcomes  # mutations do bite


@pytest.mark.fuzz
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_fuzz_long(fmt: str) -> None:
    print(fmt, dict(fuzz(fmt, int(os.environ.get("SIGDNN_FUZZ_CASES", "10000")))))
