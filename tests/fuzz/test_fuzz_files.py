"""Mutation fuzzing of the files users hand sigdnn: tensor files, campaign specs, ONNX models with external
data and with import-time folds (#32). Every case ends in a SigdnnError (or succeeds), within 2 s.

Case ``i`` of a format draws everything from ``random.Random(f"{seed}-{format}-{i}")``. CI runs a slice per
format; the ``fuzz``-marked test runs ``SIGDNN_FUZZ_CASES`` per format from ``SIGDNN_FUZZ_START``. A case
is bounded by the CPU time it takes (wall time on a shared machine measures the other processes too; the
slowest wall time is reported beside it):

    SIGDNN_FUZZ_CASES=100000 python -m pytest tests/fuzz/test_fuzz_files.py -m fuzz -s
"""

from __future__ import annotations

import io
import os
import random
import resource
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sigdnn.errors import SigdnnError

SEED = int(os.environ.get("SIGDNN_FUZZ_SEED", "0"))
CI_CASES = 150
CASE_SECONDS = 2.0
RSS_GROWTH_LIMIT = 512 << 20
INTERESTING = [0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 31, (1 << 63) - 1, -1]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """One to three byte edits: flips, interesting integers, truncation, extension, duplicated or deleted runs."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not b:
            b = bytearray(rng.randbytes(rng.randint(1, 64)))
        at, kind = rng.randrange(len(b)), rng.randrange(6)
        if kind == 0:
            b[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            width = rng.choice((1, 2, 4, 8))
            b[at : at + width] = (rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        elif kind == 2:
            del b[rng.randrange(len(b)) :]
        elif kind == 3:
            b += rng.randbytes(rng.randint(1, 64))
        elif kind == 4:
            b[at:at] = b[rng.randrange(len(b)) :][: rng.randint(1, 32)]
        else:
            del b[at : at + rng.randint(1, 16)]
    return bytes(b)


# -- tensor files ---------------------------------------------------------------------------------
def tensor_seeds(folder: Path) -> list[tuple[str, bytes]]:
    from sigdnn.dtypes import as_data_type
    from sigdnn.io import write_tensor_file

    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64)}
    seeds = []
    for name in ("t.npz", "t.safetensors"):
        bf16 = np.ones(3, dtype=as_data_type("bfloat16").numpy)
        write_tensor_file(folder / name, {**arrays, "h": bf16}, what="seed")
        seeds.append((name, (folder / name).read_bytes()))
    buffer = io.BytesIO()
    np.save(buffer, arrays["a"])
    seeds.append(("t.npy", buffer.getvalue()))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    seeds.append(("c.npz", buffer.getvalue()))
    return seeds


def tensor_case(folder: Path, seeds: list[tuple[str, bytes]], rng: random.Random) -> Any:
    from sigdnn.io import read_tensor_file

    name, data = rng.choice(seeds)
    path = folder / name
    path.write_bytes(mutate_bytes(data, rng))
    return read_tensor_file(path, max_bytes=1 << 20)


# -- campaign specs -------------------------------------------------------------------------------
SPEC = """name = "fz"
backend = "reference"
seeds = 2
engines = ["reference.pointwise"]
[tolerance]
rtol = 1e-3
[[generate]]
op = "pointwise"
modes = ["add", "relu_fwd"]
dtypes = ["float16", "float32"]
shapes = [["1..4", "2..8/2"], [3, 5]]
layouts = ["packed"]
attributes = { relu_lower_clip = [0.0, 0.5] }
[[graphs]]
files = ["g/*.sdg", "**/b.sdg"]
"""
SPEC_TOKENS = ['"/**/*.sdg"', '"../*.sdg"', '"1..4096"', "10000000000", "-1", '"a..b*0"', "[]", "{}", '"x"', "1e308",
               '"1..9999999999/1"', '"**/**/**"', "nan", "inf", '"g/[*"', "9223372036854775808", '["1..4096","1..4096"]']  # fmt: skip


def spec_case(folder: Path, seeds: list[tuple[str, bytes]], rng: random.Random) -> Any:
    from sigdnn.campaign.cases import count_cases, generate_cases
    from sigdnn.campaign.spec import parse_spec

    text = SPEC
    for _ in range(rng.randint(1, 3)):
        words = text.split(" ")
        at = rng.randrange(len(words))
        if rng.random() < 0.6:
            words[at] = rng.choice(SPEC_TOKENS) + ("\n" if words[at].endswith("\n") else "")
        else:
            text = mutate_bytes(text.encode(), rng).decode("utf-8", "replace")
            continue
        text = " ".join(words)
    spec = parse_spec(text, folder)
    if count_cases(spec) <= 16:
        return generate_cases(spec)
    return spec


def spec_seeds(folder: Path) -> list[tuple[str, bytes]]:
    import sigdnn

    (folder / "g" / "deep").mkdir(parents=True)
    g = sigdnn.Graph("g", io_dtype="float32")
    g.pointwise("add", g.tensor("a", (2, 3)), g.tensor("b", (2, 3)), name="add").set_output(True)
    (folder / "g" / "a.sdg").write_bytes(g.serialize())
    (folder / "g" / "deep" / "b.sdg").write_bytes(g.serialize())
    return []


# -- ONNX: external data and folds ----------------------------------------------------------------
def onnx_seeds(folder: Path) -> list[tuple[str, bytes]]:
    from onnx import TensorProto, helper, numpy_helper

    np.arange(12, dtype=np.float32).tofile(folder / "w.bin")
    (folder / "elsewhere").mkdir()
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    w.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", "offset": "8", "length": "24"}.items():
        w.external_data.add(key=key, value=value)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    external = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext", [x], [y], initializer=[w])
    consts = [numpy_helper.from_array(np.array(v), n) for n, v in
              (("shape", np.array([2, 3], np.int64)), ("one", np.ones((1, 3), np.float32)), ("k", np.array([1], np.int64)),
               ("img", np.ones((1, 1, 6, 6), np.float32)), ("sc", np.ones(1, np.float32)), ("start", np.array(0, np.int64)),
               ("limit", np.array(6, np.int64)), ("delta", np.array(1, np.int64)))]  # fmt: skip
    folds = [
        helper.make_node("ConstantOfShape", ["shape"], ["c"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Expand", ["one", "shape"], ["e"]),
        helper.make_node("Tile", ["one", "k"], ["t"]),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("MaxPool", ["img"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["p"], ["ps"], start=2),
        helper.make_node("LayerNormalization", ["x", "sc", "sc"], ["ln"], axis=1),
        helper.make_node("Add", ["c", "e"], ["s1"]),
        helper.make_node("Add", ["s1", "ln"], ["y"]),
    ]
    fold = helper.make_graph(folds, "fold", [x], [y], initializer=consts)
    return [
        (name, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
        for name, graph in (("ext.onnx", external), ("fold.onnx", fold))
    ]


LOCATIONS = ["w.bin", "/etc/hostname", "../w.bin", "elsewhere", "w.bin\0x", "", "missing.bin", "./w.bin", "a/../w.bin"]


def onnx_case(folder: Path, seeds: list[tuple[str, bytes]], rng: random.Random) -> Any:
    import onnx

    from sigdnn.importers import onnx as onnx_import

    _, data = rng.choice(seeds)
    if rng.random() < 0.3:
        data = mutate_bytes(data, rng)
    else:
        model = onnx.load_from_string(data)
        for _ in range(rng.randint(1, 3)):
            _mutate_proto(model, rng)
        data = model.SerializeToString()
    return onnx_import.load(data, base_dir=folder, max_bytes=1 << 20)


def _mutate_proto(model: Any, rng: random.Random) -> None:
    """A structure-aware edit: an int attribute, an initializer's dims or values, or an external data entry."""
    from onnx import AttributeProto

    graph = model.graph
    kind = rng.randrange(4)
    value = rng.choice([0, 1, -1, 2, 3, 33, 4096, 1 << 20, 1 << 31, (1 << 63) - 1, -(1 << 63)])
    if kind == 0 and graph.node:
        node = rng.choice(graph.node)
        ints = [a for a in node.attribute if a.type in (AttributeProto.INT, AttributeProto.INTS)]
        if ints:
            a = rng.choice(ints)
            if a.type == AttributeProto.INT:
                a.i = value
            elif a.ints:
                a.ints[rng.randrange(len(a.ints))] = value
    elif kind == 1 and graph.initializer:
        t = rng.choice(graph.initializer)
        if t.dims and rng.random() < 0.5:
            t.dims[rng.randrange(len(t.dims))] = abs(value) % (1 << 40)
        elif t.raw_data and t.data_type == 7:  # int64 values (shapes, repeats, range bounds)
            values = np.frombuffer(t.raw_data, np.int64).copy()
            values[rng.randrange(values.size)] = value
            t.raw_data = values.tobytes()
    elif kind == 2:
        for t in graph.initializer:
            for entry in t.external_data:
                if entry.key == "location":
                    entry.value = rng.choice(LOCATIONS)
                else:
                    entry.value = str(rng.choice([0, 4, 24, 48, 1 << 40, -1]))
    elif graph.node:
        graph.node.remove(rng.choice(graph.node))


FORMATS: dict[str, tuple[Callable[[Path], list[tuple[str, bytes]]], Callable[..., Any]]] = {
    "tensor_files": (tensor_seeds, tensor_case),
    "campaign_specs": (spec_seeds, spec_case),
    "onnx_external_and_folds": (onnx_seeds, onnx_case),
}


def fuzz(fmt: str, start: int, cases: int) -> dict[str, Any]:
    """Run cases ``start .. start + cases - 1`` of ``fmt``; an escape, a slow case or memory growth fails."""
    seeds_of, case = FORMATS[fmt]
    outcomes: Counter = Counter()
    slowest = slowest_cpu = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        seeds = seeds_of(folder)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        for i in range(start, start + cases):
            rng = random.Random(f"{SEED}-{fmt}-{i}")
            began, cpu = time.perf_counter(), time.process_time()
            try:
                case(folder, seeds, rng)
                outcomes["ok"] += 1
            except SigdnnError as e:
                outcomes[type(e).__name__] += 1
            except Exception as e:  # the bug this fuzzer exists to find
                raise AssertionError(f"{fmt} case {i}: {type(e).__name__}: {e}") from e
            took, cpu = time.perf_counter() - began, time.process_time() - cpu
            slowest, slowest_cpu = max(slowest, took), max(slowest_cpu, cpu)
            assert cpu < CASE_SECONDS, f"{fmt} case {i} took {cpu:.2f} s of CPU ({took:.2f} s wall)"
        growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - peak
    assert growth < RSS_GROWTH_LIMIT, f"{fmt}: peak RSS grew by {growth >> 20} MiB"
    return {
        "cases": cases,
        "outcomes": dict(outcomes),
        "slowest_cpu_s": round(slowest_cpu, 3),
        "slowest_wall_s": round(slowest, 3),
        "rss_growth_mib": growth >> 20,
    }


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_mutated_files_end_in_sigdnn_errors(fmt: str) -> None:
    result = fuzz(fmt, 0, CI_CASES)
    assert sum(v for k, v in result["outcomes"].items() if k != "ok") > CI_CASES // 10, result  # mutations bite


@pytest.mark.fuzz
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_fuzz_files_long(fmt: str) -> None:
    start = int(os.environ.get("SIGDNN_FUZZ_START", str(CI_CASES)))
    print(fmt, fuzz(fmt, start, int(os.environ.get("SIGDNN_FUZZ_CASES", "10000"))))
