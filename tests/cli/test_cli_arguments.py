"""sigdnn.cli.options and sigdnn.cli.files: argument types, defaults and the files a command reads, unit by unit.

Oracles: hand-worked values (a quarter of a given memory size, 2^62, byte
counts), and files written here whose names and contents the tests know.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import attrs
import numpy as np
import pytest

import sigdnn
from sigdnn.cli import files, options
from sigdnn.errors import UsageError
from sigdnn.graph.limits import DEFAULT_LIMITS, GPU_LIMITS
from sigdnn.io import DEFAULT_MAX_GRAPH_FILE_BYTES, DEFAULT_MAX_TENSOR_FILE_BYTES, FileError, write_tensor_file

GiB = 1 << 30


# -- options ------------------------------------------------------------------------------------------------


def with_memory(monkeypatch: pytest.MonkeyPatch, pages: int, page_size: int = 4096) -> None:
    values = {"SC_PHYS_PAGES": pages, "SC_PAGE_SIZE": page_size}
    monkeypatch.setattr(os, "sysconf", lambda name: values[name])


@pytest.mark.parametrize(
    ("memory", "want"),
    [
        (16 * GiB, 4 * GiB),  # a quarter
        (100 << 20, 64 << 20),  # a quarter would be 25 MiB: never under 64 MiB
        (256 << 20, 64 << 20),  # a quarter is exactly the floor
        (1 << 40, 64 * GiB),  # a quarter of 1 TiB is above the library's own 64 GiB
    ],
)
def test_default_max_bytes_is_a_quarter_of_memory_within_bounds(
    monkeypatch: pytest.MonkeyPatch, memory: int, want: int
) -> None:
    assert sigdnn.Limits().max_total_bytes == 64 * GiB
    with_memory(monkeypatch, memory // 4096)
    assert options.default_max_bytes() == want


def test_default_max_bytes_is_a_whole_number_of_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    with_memory(monkeypatch, 16 * GiB + 3, page_size=1)
    assert options.default_max_bytes() == 4 * GiB and type(options.default_max_bytes()) is int


def test_exit_statuses_are_the_documented_ones() -> None:
    """docs/usage.md: 0 success, 1 a validation that failed, 2 any error."""
    assert (options.EXIT_FAILED, options.EXIT_ERROR) == (1, 2)


def test_default_max_bytes_without_sysconf_is_the_librarys(monkeypatch: pytest.MonkeyPatch) -> None:
    def unknown(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", unknown)
    assert options.default_max_bytes() == sigdnn.Limits().max_total_bytes


def test_size_seed_count_engine() -> None:
    assert options.size("8GiB") == 8 * GiB and options.size("512M") == 512 << 20
    assert options.seed("0") == 0 and options.seed("17") == 17
    assert options.count("1") == 1 and options.count("3") == 3
    assert options.engine("12") == 12 and options.engine("cutile.pointwise") == "cutile.pointwise"
    assert options.engine("-1") == "-1"  # not digits: a name, which the engine lookup then refuses
    for convert, text, why in [
        (options.size, "lots", "is not a size"),
        (options.seed, "x", "'x' is not an integer"),
        (options.seed, "-1", "-1 is negative"),
        (options.count, "0", "give at least 1"),
        (options.count, "-2", "-2 is negative"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            convert(text)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("x=1,3,224,224", ("x", (1, 3, 224, 224))),
        ("input.1=7", ("input.1", (7,))),
        ("a=b=2, 3", ("a=b", (2, 3))),  # the last '=' splits: ONNX names may hold '='; spaces around dims go
        (f"x={1 << 62}", ("x", (1 << 62,))),
    ],
)
def test_input_shape_values(text: str, want: tuple) -> None:
    assert options.input_shape(text) == want


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("x", "is not NAME=D0,D1,..."),
        ("=1,2", "is not NAME=D0,D1,..."),
        ("x=0", "dim '0' is not a whole number from 1 to 2^62"),
        ("x=2.5", "dim '2.5' is not"),
        ("x=-3", "dim '-3' is not"),
        ("x=1,,2", "dim '' is not"),
        (f"x={(1 << 62) + 1}", "is not a whole number from 1 to 2^62"),
    ],
)
def test_input_shape_refusals(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=why.replace(".", r"\.").replace("^", r"\^")):
        options.input_shape(text)


def graph_parser() -> options.Parser:
    parser = options.Parser(prog="sigdnn test")
    options.graph_options(parser, backend_default="gpu")
    return parser


def test_graph_options_defaults() -> None:
    args = graph_parser().parse_args([])
    assert args.backend == "gpu" and args.max_file_bytes is None and args.input_shapes is None
    assert args.max_bytes == options.default_max_bytes()
    assert options.limits(args) == attrs.evolve(GPU_LIMITS, max_total_bytes=args.max_bytes)  # --backend gpu's


def test_graph_options_given() -> None:
    args = graph_parser().parse_args(
        [
            *("--backend", "reference", "--max-bytes", "1GiB", "--max-file-bytes", "2M"),
            *("--input-shape", "x=2,3", "--input-shape", "y=4"),
        ]
    )
    assert (args.backend, args.max_bytes, args.max_file_bytes) == ("reference", GiB, 2 << 20)
    assert args.input_shapes == [("x", (2, 3)), ("y", (4,))]
    assert options.limits(args).max_total_bytes == GiB


@pytest.mark.parametrize("backend", ["reference", "gpu", "gpu-reference"])
def test_every_backend_is_a_choice(backend: str) -> None:
    assert graph_parser().parse_args(["--backend", backend]).backend == backend


def test_help_names_each_option_with_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        graph_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal's width
    for shown in (
        "[--input-shape NAME=D0,D1,...] [--backend {reference,gpu,gpu-reference}] [--max-bytes SIZE] "
        "[--max-file-bytes SIZE] [--tf32]",
        "--input-shape NAME=D0,D1,... the dims of an ONNX model's input whose dims are symbolic (a batch size, "
        "a sequence length); may be repeated --backend",
    ):
        assert shown in text


def test_parser_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        graph_parser().parse_args(["--backend", "tpu"])
    assert caught.value.code == options.EXIT_ERROR == 2
    err = capsys.readouterr().err
    assert err.startswith("sigdnn test: error: argument --backend") and err.endswith("; see 'sigdnn test --help'\n")
    assert err.count("\n") == 1


# -- files ----------------------------------------------------------------------------------------------------


def namespace(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"max_file_bytes": None, "input_shapes": None, "inputs": None, **kw})


def test_file_cap_is_the_option_or_the_default() -> None:
    assert files.file_cap(namespace(), DEFAULT_MAX_GRAPH_FILE_BYTES) == 256 << 20
    assert files.file_cap(namespace(), DEFAULT_MAX_TENSOR_FILE_BYTES) == 4 * GiB
    assert files.file_cap(namespace(max_file_bytes=10), DEFAULT_MAX_GRAPH_FILE_BYTES) == 10
    assert files.file_cap(namespace(max_file_bytes=0), DEFAULT_MAX_GRAPH_FILE_BYTES) == 0


def small_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("small", io_dtype="float32")
    a, b = g.tensor("a", (2, 3)), g.tensor("b", (1, 3), dtype="float16")
    y = g.pointwise("mul", g.pointwise("add", a, b), g.scalar("s", 2.0, dtype="float64"))
    y.set_output(True).set_name("y")
    return g


def test_read_graph_caps_the_file(tmp_path: Path) -> None:
    path = small_graph().save(tmp_path / "g.sdg")
    assert files.read_graph(namespace(), path) == small_graph().serialize()
    with pytest.raises(FileError, match="over the 10 bytes limit"):
        files.read_graph(namespace(max_file_bytes=10), path)


def test_read_graph_names_the_option_in_its_input_shape_errors(tmp_path: Path) -> None:
    path = small_graph().save(tmp_path / "g.sdg")
    with pytest.raises(UsageError, match=r"^--input-shape: input shapes fix an ONNX model's symbolic dims"):
        files.read_graph(namespace(input_shapes=[("a", (2, 3))]), path)
    with pytest.raises(UsageError, match=r"^--input-shape names 'a' twice"):
        files.read_graph(namespace(input_shapes=[("a", (2, 3)), ("a", (2, 3))]), path)


def test_errors_of_a_graph_read_without_input_shapes_are_not_about_them(tmp_path: Path) -> None:
    (tmp_path / "bad.sdg").write_bytes(b"not a graph at all")
    data = files.read_graph(namespace(), tmp_path / "bad.sdg")  # no converter claims it: returned as read
    assert data == b"not a graph at all"
    with pytest.raises(FileError, match=r"^cannot read graph file .*missing\.sdg"):
        files.read_graph(namespace(), tmp_path / "missing.sdg")


def test_expected_inputs_are_the_graph_inputs_and_its_scalars() -> None:
    want = {
        "a": sigdnn.io.Expected((2, 3), sigdnn.DataType.FLOAT32),
        "b": sigdnn.io.Expected((1, 3), sigdnn.DataType.FLOAT16),
        "s": sigdnn.io.Expected((1,), sigdnn.DataType.FLOAT64),
    }
    assert files.expected(small_graph()) == want


def test_read_inputs_gathers_every_file_and_refuses_a_name_twice(tmp_path: Path) -> None:
    a, b = np.ones((2, 3), np.float32), np.full((1, 3), 2, np.float16)
    write_tensor_file(tmp_path / "one.safetensors", {"a": a})
    write_tensor_file(tmp_path / "two.npz", {"b": b})
    seen: list[str] = []
    paths = [str(tmp_path / "one.safetensors"), str(tmp_path / "two.npz")]
    given = files.read_inputs(namespace(inputs=paths), small_graph(), seen.append)
    assert sorted(given) == ["a", "b"] and np.array_equal(given["a"], a) and np.array_equal(given["b"], b)
    assert seen == [f"reading {p}" for p in paths]
    assert files.read_inputs(namespace(), small_graph(), seen.append) == {}
    write_tensor_file(tmp_path / "again.safetensors", {"a": a})
    with pytest.raises(UsageError, match=r"--inputs: tensor 'a' is in more than one file \(again in .*again"):
        files.read_inputs(namespace(inputs=[paths[0], str(tmp_path / "again.safetensors")]), small_graph(), print)
    with pytest.raises(FileError, match="over the 8 bytes limit"):
        files.read_inputs(namespace(inputs=paths, max_file_bytes=8), small_graph(), print)
    with pytest.raises(FileError, match=r"tensor 'zz': is not an input of this graph"):
        write_tensor_file(tmp_path / "zz.safetensors", {"zz": a})
        files.read_inputs(namespace(inputs=[str(tmp_path / "zz.safetensors")]), small_graph(), print)


def test_check_outputs_refuses_an_input_or_a_second_output(tmp_path: Path) -> None:
    graph = small_graph().save(tmp_path / "g.sdg")
    reads = [(graph, "graph file")]
    files.check_outputs([(None, "--out file"), (str(tmp_path / "o.npz"), "--save-inputs file")], reads)
    with pytest.raises(FileError, match=r"--out file .* is the graph file"):
        files.check_outputs([(str(tmp_path / "sub" / ".." / "g.sdg"), "--out file")], reads)
    os.link(graph, tmp_path / "hard.sdg")
    with pytest.raises(FileError, match="is the graph file"):
        files.check_outputs([(None, "--report file"), (str(tmp_path / "hard.sdg"), "--out file")], reads)
    with pytest.raises(UsageError, match=r"--out file and --save-inputs file both name .*o\.npz.*; give two files"):
        files.check_outputs(
            [(str(tmp_path / "o.npz"), "--out file"), (str(tmp_path / "." / "o.npz"), "--save-inputs file")], reads
        )


def test_a_symbolic_model_read_without_input_shapes_is_not_blamed_on_the_option(tmp_path: Path) -> None:
    """The importer's own advice names --input-shape; with no --input-shape given, no "--input-shape:" prefix."""
    onnx = pytest.importorskip("onnx")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])],
        "dynamic",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(sigdnn.GraphError) as caught:
        files.read_graph(namespace(), tmp_path / "m.onnx")
    assert str(caught.value).startswith("ONNX graph input 'x': dim 0 is symbolic ('batch')")
    assert files.read_graph(namespace(input_shapes=[("x", (2, 4))]), tmp_path / "m.onnx")[4:8] == b"SDG1"


def test_the_graph_limits_follow_the_backend() -> None:
    """--max-bytes on the backend's own limits: the GPU's work bound for --backend gpu and for the float64 GPU
    reference, the CPU reference's for it (and for a CPU truth, which asks for "reference")."""
    limits = options.limits
    for backend, base in (("gpu", GPU_LIMITS), ("reference", DEFAULT_LIMITS), ("gpu-reference", GPU_LIMITS)):
        found = limits(argparse.Namespace(backend=backend, max_bytes=12345))
        assert found.max_total_bytes == 12345 and found.max_work == base.max_work, backend
    truth = limits(argparse.Namespace(backend="gpu", max_bytes=12345), "reference")
    assert truth.max_work == DEFAULT_LIMITS.max_work
