"""read_graph_file's hand-off to the registered graph formats: which format gets a file, and who takes input shapes.

Oracles: formats written here whose calls are recorded, so each test sees
exactly which converter ran with which arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sigdnn.errors import UsageError
from sigdnn.io import FileError, GraphFormat, read_graph_file


class Recorder:
    """A graph format's converters that note each call and return a marked result."""

    def __init__(self, mark: bytes) -> None:
        self.mark = mark
        self.calls: list[tuple] = []

    def to_sdg(self, data: bytes) -> bytes:
        self.calls.append(("to_sdg", data))
        return self.mark

    def to_sdg_at(self, data: bytes, path: str, max_bytes: int, **kw: object) -> bytes:
        self.calls.append(("to_sdg_at", data, path, max_bytes, kw))
        return self.mark


def everything(data: bytes, path: str) -> bool:
    return True


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.bin"
    path.write_bytes(b"model bytes")
    return path


def test_a_format_takes_no_input_shapes_unless_it_says_so(model: Path) -> None:
    plain = Recorder(b"plain")
    fmt = GraphFormat("plain", everything, plain.to_sdg)
    assert fmt.takes_input_shapes is False
    assert read_graph_file(model, formats=[fmt]) == b"plain"
    with pytest.raises(UsageError, match=r"input shapes fix an ONNX model's symbolic dims; graph file .*model\.bin"):
        read_graph_file(model, formats=[fmt], input_shapes={"x": (1, 3)})
    assert plain.calls == [("to_sdg", b"model bytes")]


def test_input_shapes_reach_the_format_that_takes_them_by_keyword(model: Path) -> None:
    onnx_like = Recorder(b"fixed")
    fmt = GraphFormat("shaped", everything, onnx_like.to_sdg, to_sdg_at=onnx_like.to_sdg_at, takes_input_shapes=True)
    assert read_graph_file(model, formats=[fmt], max_bytes=1000, input_shapes={"x": (2, 3)}) == b"fixed"
    assert read_graph_file(model, formats=[fmt], max_bytes=1000) == b"fixed"
    assert onnx_like.calls == [
        ("to_sdg_at", b"model bytes", str(model), 1000, {"input_shapes": {"x": (2, 3)}}),
        ("to_sdg_at", b"model bytes", str(model), 1000, {}),  # no shapes given: none passed
    ]


def test_the_first_format_that_recognizes_a_file_owns_it(model: Path) -> None:
    """A later format that would take input shapes never sees a file an earlier format recognized."""
    first, second = Recorder(b"first"), Recorder(b"second")
    formats = [
        GraphFormat("first", everything, first.to_sdg),
        GraphFormat("second", everything, second.to_sdg, to_sdg_at=second.to_sdg_at, takes_input_shapes=True),
    ]
    with pytest.raises(UsageError, match="input shapes fix"):
        read_graph_file(model, formats=formats, input_shapes={"x": (1,)})
    assert first.calls == second.calls == []


def test_bytes_no_format_recognizes_are_returned_unless_input_shapes_were_given(model: Path) -> None:
    never = GraphFormat("never", lambda data, path: False, Recorder(b"never").to_sdg)
    assert read_graph_file(model, formats=[never]) == b"model bytes"
    with pytest.raises(UsageError, match="is no ONNX model, its dims are fixed"):
        read_graph_file(model, formats=[never], input_shapes={"x": (1,)})


def test_path_errors_name_a_graph_file() -> None:
    with pytest.raises(FileError, match=r"^graph file: the path is empty"):
        read_graph_file("")
