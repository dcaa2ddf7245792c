"""Executor.prepare(Graph) keys its plan cache on a fingerprint that hashes the weights instead of copying them into
a FlatBuffer (#32: ViT-B/16's import + prepare, most of which was that copy)."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.graph.serialize import fingerprint


def weighted(w: np.ndarray, b: np.ndarray | None = None) -> sigdnn.Graph:
    g = sigdnn.Graph("weighted", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (4, w.shape[0]))
    y = g.matmul(x, g.constant("w", w))
    if b is not None:
        y = g.pointwise("add", y, g.constant("b", b))
    y.set_output(True).set_name("y")
    return g


W = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)


def test_the_fingerprint_holds_a_digest_not_the_weights() -> None:
    g = weighted(W)
    assert len(g.serialize()) > W.nbytes
    assert len(fingerprint(g)) < 4096


def test_graphs_that_differ_in_one_weight_differ_in_fingerprint_and_in_plan() -> None:
    other = W.copy()
    other[511, 511] = np.nextafter(other[511, 511], np.float32(np.inf))
    assert fingerprint(weighted(W)) == fingerprint(weighted(W.copy()))
    assert fingerprint(weighted(W)) != fingerprint(weighted(other))
    small, small2 = np.ones((1, 512), np.float32), np.full((1, 512), 2, np.float32)  # 2 KiB: digests
    assert fingerprint(weighted(W, small)) != fingerprint(weighted(W, small2))
    tiny, tiny2 = np.ones((1, 4), np.float32), np.full((1, 4), 2, np.float32)  # 16 bytes: written as they are
    assert fingerprint(weighted(W[:, :4].copy(), tiny)) != fingerprint(weighted(W[:, :4].copy(), tiny2))
    ex = sigdnn.Executor()
    x = np.ones((4, 512), np.float32)
    one, two = ex.prepare(weighted(W)), ex.prepare(weighted(other))
    assert one is not two and one is ex.prepare(weighted(W))
    want = (x.astype(np.float64) @ W.astype(np.float64)).astype(np.float32)  # float64, rounded once
    np.testing.assert_array_equal(ex.execute(one, {"x": x})["y"], want)


def test_prepare_of_a_graph_never_serializes_its_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: sigdnn.Graph) -> bytes:
        raise AssertionError("prepare copied the weights into a FlatBuffer")

    monkeypatch.setattr(sigdnn.Graph, "serialize", refuse)
    plan = sigdnn.Executor().prepare(weighted(W))
    assert plan.steps
