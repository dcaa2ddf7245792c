"""ONNX import reads only what the user gave and prices what it computes (#32).

External data resolved against the working directory (a model could copy
any readable file into the .sdg); ``load(PATH)`` called ``onnx.load`` with no
regular-file or size check (/dev/zero, a FIFO, an oversized file); folding
ran any op through onnx.reference unpriced (a MaxPool over 4096^2 for hours,
a broadcast Add or a LayerNormalization scale expanded to gigabytes).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sigdnn
from sigdnn.errors import SigdnnError
from sigdnn.importers import onnx as onnx_importer
from sigdnn.io import read_graph_file


def _external_model(location: str, count: int = 4, offset: int | None = None) -> onnx.ModelProto:
    """y = x + w, w (float32[count]) kept in external data at ``location``."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[count])
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "length": str(4 * count)}
    if offset is not None:
        entries["offset"] = str(offset)
    for key, value in entries.items():
        w.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [count])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weights(graph: sigdnn.Graph) -> np.ndarray:
    (constant,) = [t for t in graph.tensors.values() if t.data is not None]
    return np.frombuffer(constant.data, np.float32)


def test_external_data_is_read_from_the_model_files_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models").mkdir()
    np.arange(4, dtype=np.float32).tofile(tmp_path / "models" / "w.bin")
    (tmp_path / "w.bin").write_bytes(np.full(4, 7, np.float32).tobytes())  # the working directory's file
    model = tmp_path / "models" / "m.onnx"
    model.write_bytes(_external_model("w.bin").SerializeToString())
    monkeypatch.chdir(tmp_path)
    np.testing.assert_array_equal(_weights(onnx_importer.load(model)), np.arange(4, dtype=np.float32))
    data = read_graph_file(model)  # the CLI's path: sigdnn.io hands the converter the file's folder
    np.testing.assert_array_equal(_weights(sigdnn.deserialize(data)), np.arange(4, dtype=np.float32))


def test_a_model_given_as_bytes_reads_no_external_data_without_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "w.bin").write_bytes(np.full(4, 7, np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    data = _external_model("w.bin").SerializeToString()
    with pytest.raises(SigdnnError, match=r"tensor 'w' keeps its data in an external file.*pass base_dir="):
        onnx_importer.load(data)
    np.testing.assert_array_equal(_weights(onnx_importer.load(data, base_dir=tmp_path)), np.full(4, 7, np.float32))


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("/etc/hostname", "is absolute"),
        ("../secret.bin", r"climbs out of the model's folder \('..'\)"),
        ("sub/../../secret.bin", "climbs out"),
        ("link.bin", "is a link to a file outside the model's folder"),
        ("missing.bin", "No such file"),
        ("dir", "is a directory"),
    ],
)
def test_external_data_cannot_leave_the_models_folder(tmp_path: Path, location: str, message: str) -> None:
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    folder = tmp_path / "m"
    (folder / "dir").mkdir(parents=True)
    (folder / "link.bin").symlink_to(tmp_path / "secret.bin")
    (folder / "m.onnx").write_bytes(_external_model(location).SerializeToString())
    with pytest.raises(SigdnnError, match=message):
        onnx_importer.load(folder / "m.onnx")


def test_external_data_is_size_checked_before_reading(tmp_path: Path) -> None:
    with open(tmp_path / "huge.bin", "wb") as f:  # sparse: 3 GiB that would be read into memory
        f.truncate(3 << 30)
    (tmp_path / "m.onnx").write_bytes(_external_model("huge.bin", count=3 << 28).SerializeToString())
    start = time.perf_counter()
    with pytest.raises(SigdnnError, match="over what the file limit leaves"):
        onnx_importer.load(tmp_path / "m.onnx")
    assert time.perf_counter() - start < 2
    (tmp_path / "m.onnx").write_bytes(_external_model("huge.bin", count=4, offset=(3 << 30) - 8).SerializeToString())
    with pytest.raises(SigdnnError, match="external data asks for bytes"):
        onnx_importer.load(tmp_path / "m.onnx")


def test_a_model_path_goes_through_the_regular_file_checks(tmp_path: Path) -> None:
    with pytest.raises(SigdnnError, match="character device"):
        onnx_importer.load("/dev/zero")
    with open(tmp_path / "big.onnx", "wb") as f:
        f.truncate(300 << 20)
    with pytest.raises(SigdnnError, match="over the 256 MiB limit"):
        onnx_importer.load(tmp_path / "big.onnx")
    os.mkfifo(tmp_path / "fifo.onnx")
    raised: list[BaseException] = []

    def load_fifo() -> None:
        try:
            onnx_importer.load(tmp_path / "fifo.onnx")
        except BaseException as e:  # recorded for the assertion
            raised.append(e)

    reader = threading.Thread(target=load_fifo, daemon=True)
    reader.start()
    reader.join(10)
    assert len(raised) == 1 and "FIFO" in str(raised[0])


def _constant(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def _model(nodes: list[onnx.NodeProto], inputs: list, output: str, dims: list[int]) -> bytes:
    graph = helper.make_graph(nodes, "fold", inputs, [helper.make_tensor_value_info(output, TensorProto.FLOAT, dims)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_maxpool_over_a_big_constant_is_not_folded_in_python(tmp_path: Path) -> None:
    big = np.zeros((1, 1, 4096, 4096), np.float32)
    nodes = [
        helper.make_node("MaxPool", ["w"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["x", "p"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4096, 4096])
    graph = helper.make_graph(
        nodes, "pool", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4096, 4096])],
        initializer=[numpy_helper.from_array(big, "w")],
    )  # fmt: skip
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    start = time.perf_counter()
    graph_out = onnx_importer.load(data)  # the pooling becomes a node of the graph, run (priced) by the executor
    assert time.perf_counter() - start < 10
    assert any(n.op.kind == "pooling" for n in graph_out.nodes)


def test_a_broadcast_fold_past_the_element_limit_is_refused_before_computing() -> None:
    nodes = [_constant("a", np.zeros((1 << 13, 1), np.float32)), _constant("b", np.zeros((1, 1 << 13), np.float32))]
    nodes += [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 13, 1 << 13])], "y", [])
    start = time.perf_counter()
    with pytest.raises(SigdnnError, match="would make 67108864 elements"):
        onnx_importer.load(data)
    assert time.perf_counter() - start < 2


def test_folded_values_count_against_the_limits() -> None:
    nodes = [_constant("a", np.zeros((512, 1), np.float32)), _constant("b", np.zeros((1, 512), np.float32))]
    nodes += [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])], "y", [])
    assert onnx_importer.load(data).nodes  # 2 MiB of folded values: fine by default
    with pytest.raises(SigdnnError, match="values computed at import time would take 2 MiB, over the 1 MiB limit"):
        onnx_importer.load(data, limits=sigdnn.Limits(max_total_bytes=1 << 20))


def test_a_layernorm_scale_is_not_expanded_past_the_limits() -> None:
    nodes = [
        _constant("s", np.ones(1, np.float32)),
        _constant("b", np.zeros(1, np.float32)),
        helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=1),
    ]
    dims = [1, 1 << 15, 1 << 15]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)], "y", dims)
    start = time.perf_counter()
    with pytest.raises(SigdnnError, match=r"scale \[1\] broadcast to \[32768, 32768\] would make 1073741824 elements"):
        onnx_importer.load(data)
    assert time.perf_counter() - start < 2


def _with_entries(entries: dict[str, str], count: int = 4) -> onnx.ModelProto:
    model = _external_model("w.bin", count)
    (w,) = model.graph.initializer
    del w.external_data[:]
    for key, value in entries.items():
        w.external_data.add(key=key, value=value)
    return model


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"location": "w.bin", "colour": "red"}, r"unknown external_data key\(s\) \['colour'\]"),
        ({"location": ""}, "external data without a usable location"),
        ({"location": "w\0.bin"}, "external data without a usable location"),
        ({"offset": "4"}, "external data without a usable location"),
        ({"location": "w.bin", "offset": "-1"}, "offset '-1' is not an integer >= 0"),
        ({"location": "w.bin", "length": "1e3"}, "length '1e3' is not an integer >= 0"),
        ({"location": "w.bin", "length": "9" * 20}, "is not an integer >= 0"),
        ({"location": "w.bin", "offset": "33"}, "external data asks for bytes 33..33"),
    ],
)
def test_external_data_entries_are_checked(tmp_path: Path, entries: dict[str, str], message: str) -> None:
    np.arange(8, dtype=np.float32).tofile(tmp_path / "w.bin")  # 32 bytes
    with pytest.raises(SigdnnError, match=message):
        onnx_importer.load(_with_entries(entries).SerializeToString(), base_dir=tmp_path)


def test_external_data_offset_and_length_default_to_the_rest_of_the_file(tmp_path: Path) -> None:
    np.arange(8, dtype=np.float32).tofile(tmp_path / "w.bin")
    got = onnx_importer.load(
        _with_entries({"location": "w.bin", "offset": "16"}).SerializeToString(), base_dir=tmp_path
    )
    np.testing.assert_array_equal(_weights(got), np.arange(4, 8, dtype=np.float32))
    model = _with_entries({"location": "w.bin", "length": "16", "checksum": "x"})
    np.testing.assert_array_equal(
        _weights(onnx_importer.load(model, base_dir=tmp_path)), np.arange(4, dtype=np.float32)
    )


def test_the_byte_cap_counts_the_model_and_its_external_data_together(tmp_path: Path) -> None:
    np.arange(4, dtype=np.float32).tofile(tmp_path / "w.bin")
    data = _external_model("w.bin").SerializeToString()
    exact = len(data) + 16
    assert onnx_importer.load(data, base_dir=tmp_path, max_bytes=exact).nodes
    with pytest.raises(SigdnnError, match=r"external data of 16 bytes is over what the file limit leaves \(15 bytes\)"):
        onnx_importer.load(data, base_dir=tmp_path, max_bytes=exact - 1)
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    with pytest.raises(SigdnnError, match="over the"):
        onnx_importer.load(path, max_bytes=len(data) - 1)


def test_external_tensors_in_node_attributes_and_subgraphs_are_found(tmp_path: Path) -> None:
    value = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[4])
    value.data_location = TensorProto.EXTERNAL
    value.external_data.add(key="location", value="w.bin")
    constant = helper.make_node("Constant", [], ["c"], value=value)
    branch = helper.make_graph([constant], "then", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])])
    for node in (constant, helper.make_node("If", ["cond"], ["c"], then_branch=branch, else_branch=branch)):
        graph = helper.make_graph(
            [node, helper.make_node("Add", ["x", "c"], ["y"])],
            "attr",
            [helper.make_tensor_value_info(n, t, d) for n, t, d in (("x", 1, [4]), ("cond", 9, []))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        )
        data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
        with pytest.raises(SigdnnError, match="tensor 'v' keeps its data in an external file"):
            onnx_importer.load(data)


def test_models_in_other_forms() -> None:
    model = onnx.load_from_string(_model([helper.make_node("Relu", ["x"], ["y"])], [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], "y", [2]))  # fmt: skip
    assert onnx_importer.load(model).nodes  # a ModelProto as it is
    assert onnx_importer.load(memoryview(model.SerializeToString())).nodes
    with pytest.raises(SigdnnError, match="expected an ONNX ModelProto, bytes or a path, got int"):
        onnx_importer.load(3)
    with pytest.raises(SigdnnError, match="not a readable ONNX model"):
        onnx_importer.load(b"\xff\xff\xff")


def test_text_that_is_not_utf8_is_a_schema_error() -> None:
    """Found by the atheris run: an op type of invalid UTF-8 came back from protobuf as bytes, and sorting the
    unsupported ops' names (str beside bytes) raised TypeError."""
    data = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Fancy", ["r"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], "y", [2])  # fmt: skip
    for good, bad in ((b"Fancy", b"Fanc\xff"), (b"Relu", b"Rel\xff"), (b"fold", b"fol\xff")):
        with pytest.raises(SigdnnError, match=r"is not UTF-8 text"):
            onnx_importer.load(data.replace(good, bad, 1))


def test_an_external_data_location_that_is_not_utf8_is_a_schema_error(tmp_path: Path) -> None:
    """Found by the mutation fuzzer (case 14325): such a location reached the path checks as bytes (TypeError)."""
    data = _external_model("w.bin").SerializeToString().replace(b"w.bin", b"w\xffbin", 1)
    with pytest.raises(SigdnnError, match=r"StringStringEntryProto.value b'w\\xffbin' is not UTF-8 text"):
        onnx_importer.load(data, base_dir=tmp_path)


def _two_external(first_plain: bool = False) -> onnx.ModelProto:
    """y = x + a + b, a and b (float32[4]) at offsets 0 and 16 of w.bin (a kept inline when ``first_plain``)."""
    tensors = []
    for i, name in enumerate("ab"):
        if first_plain and name == "a":
            tensors.append(numpy_helper.from_array(np.full(4, 9, np.float32), "a"))
            continue
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4])
        t.data_location = TensorProto.EXTERNAL
        for key, value in {"location": "w.bin", "offset": str(16 * i), "length": "16"}.items():
            t.external_data.add(key=key, value=value)
        tensors.append(t)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "a"], ["s"]), helper.make_node("Add", ["s", "b"], ["y"])],
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=tensors,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_every_external_tensor_counts_against_one_budget(tmp_path: Path) -> None:
    np.arange(8, dtype=np.float32).tofile(tmp_path / "w.bin")
    model = _two_external()
    assert onnx_importer.load(model, base_dir=tmp_path, max_bytes=32).nodes  # a ModelProto: its own size counts 0
    with pytest.raises(SigdnnError, match=r"tensor 'b'.* 16 bytes is over what the file limit leaves \(15 bytes\)"):
        onnx_importer.load(_two_external(), base_dir=tmp_path, max_bytes=31)
    assert not any(t.external_data for t in model.graph.initializer)  # the caller's model holds the data now


def test_an_inline_tensor_before_an_external_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    np.arange(8, dtype=np.float32).tofile(tmp_path / "w.bin")
    monkeypatch.chdir(tmp_path)
    graph = onnx_importer.load(_two_external(first_plain=True).SerializeToString(), base_dir=tmp_path)
    b = next(t for t in graph.tensors.values() if t.name == "b")
    np.testing.assert_array_equal(np.frombuffer(b.data, np.float32), np.arange(4, 8, dtype=np.float32))


def test_external_tensors_in_tensor_list_attributes_are_found() -> None:
    value = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[4])
    value.data_location = TensorProto.EXTERNAL
    value.external_data.add(key="location", value="w.bin")
    node = helper.make_node("Fancy", ["x"], ["y"], parts=[value])
    data = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], "y", [4])
    with pytest.raises(SigdnnError, match=r"^ONNX model: tensor 'v' keeps its data in an external file"):
        onnx_importer.load(data)


@pytest.mark.parametrize(
    ("location", "offset", "message"),
    [
        ("sub\\..\\..\\secret.bin", "0", "climbs out of the model's folder"),
        ("\\etc\\hostname", "0", "is absolute"),
        ("w.bin", "1000000000000000000", "external data asks for bytes 1000000000000000000"),
    ],
)
def test_backslashes_and_long_offsets(tmp_path: Path, location: str, offset: str, message: str) -> None:
    folder = tmp_path / "m"
    (folder / "sub").mkdir(parents=True)
    np.arange(8, dtype=np.float32).tofile(folder / "w.bin")
    model = _with_entries({"location": location, "offset": offset, "length": "16"})
    with pytest.raises(SigdnnError, match=message):
        onnx_importer.load(model.SerializeToString(), base_dir=folder)


def test_files_and_folders_are_named_in_errors() -> None:
    with pytest.raises(SigdnnError, match=r"^ONNX model '/dev/zero' is a character device"):
        onnx_importer.load("/dev/zero")
    with pytest.raises(SigdnnError, match=r"^ONNX base_dir: the path is empty"):
        onnx_importer.load(_external_model("w.bin").SerializeToString(), base_dir="")


def test_a_fold_whose_window_is_huge_is_not_run_in_python() -> None:
    """Found by the mutation fuzzer (case 61605): a MaxPool of a 6x6 constant with a 3 x 2^20 window and as much
    padding makes 48 outputs but looped over 25 million taps in onnx.reference (18 s)."""
    nodes = [
        _constant("img", np.ones((1, 1, 6, 6), np.float32)),
        helper.make_node("MaxPool", ["img"], ["p"], kernel_shape=[3, 1 << 20], pads=[1, 1, 1, 1 << 20]),
        helper.make_node("Add", ["x", "p"], ["y"]),
    ]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 3])], "y", [])
    start = time.process_time()
    with pytest.raises(SigdnnError):  # not folded: the pooling node itself refuses such a window
        onnx_importer.load(data)
    assert time.process_time() - start < 1
