"""Graph.save / sigdnn.load: exact round trip through a file, the safe reader's refusals, and the hint from deserialize."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sigdnn
from sigdnn.errors import SchemaError, SigdnnError


def graph() -> sigdnn.Graph:
    g = sigdnn.Graph("saved", io_dtype="bfloat16", compute_dtype="float32")
    g.pointwise("gelu_fwd", g.tensor("x", (4, 4)), name="act").set_output(True).set_name("y")
    return g


def test_save_then_load_gives_the_same_graph_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "g.sdg"
    assert graph().save(path) == str(path)
    assert path.read_bytes() == graph().serialize()
    assert sigdnn.load(path) == graph()
    assert sigdnn.Executor().prepare(path).graph == graph()


def test_load_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SigdnnError, match="pipe"):
        sigdnn.load(fifo)  # refused by its type, before any read could block
    with pytest.raises(SigdnnError, match="directory"):
        sigdnn.load(tmp_path)
    with pytest.raises(SigdnnError):
        sigdnn.load(tmp_path / "missing.sdg")


def test_deserialize_points_a_path_to_load(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"use sigdnn\.load\(path\)"):
        sigdnn.deserialize(str(tmp_path / "g.sdg"))
