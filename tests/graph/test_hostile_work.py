"""Small buffers must not buy large work: limits count logical sizes and each op's declared work.

Regression cases from the second adversarial round (issue 11): each ends in
a GraphError / SchemaError naming the culprit, at prepare, before anything
large is allocated (checked with tracemalloc, not the clock).
"""

from __future__ import annotations

import contextlib
import tracemalloc
from collections.abc import Callable

import flatbuffers
import numpy as np
import pytest

import sigdnn
import sigdnn.schemas.Graph as fb_graph
import sigdnn.schemas.Node as fb_node
from sigdnn.errors import GraphError, SchemaError
from sigdnn.graph import Limits
from sigdnn.graph.serialize import FILE_IDENTIFIER

SMALL = Limits(max_total_bytes=16 << 20)


def peak_bytes(action: Callable[[], object]) -> int:
    tracemalloc.start()
    with contextlib.suppress(sigdnn.SigdnnError):
        action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def overlapping_matmul() -> bytes:
    """a is 4096 x 65536 logically, but its overlapping strides span only ~70k elements."""
    g = sigdnn.Graph("mm", io_dtype="float32")
    a = g.tensor("a", (4096, 65536), strides=(1, 1))
    b = g.tensor("b", (65536, 1))
    g.matmul(a, b, name="mm").set_output(True)
    return g.serialize()


def test_overlapping_input_strides_are_priced_at_their_logical_size() -> None:
    data = overlapping_matmul()
    assert len(data) < 600
    with pytest.raises(GraphError, match="largest is tensor 'a'"):
        sigdnn.Executor(limits=SMALL).prepare(data)
    assert peak_bytes(lambda: sigdnn.Executor(limits=SMALL).prepare(data)) < 4 << 20


def test_the_reference_widening_of_a_whole_tensor_op_counts_against_the_limit() -> None:
    """Operands within the byte limit, but their float64 widening is not."""
    g = sigdnn.Graph("mm", io_dtype="float16")
    g.matmul(g.tensor("a", (512, 2048)), g.tensor("b", (2048, 256)), name="mm").set_output(True)
    tensors = (512 * 2048 + 2048 * 256 + 512 * 256) * 2
    limits = Limits(max_total_bytes=tensors + (1 << 20))
    with pytest.raises(GraphError, match=r"node 'mm': needs \d+ bytes of scratch"):
        sigdnn.Executor(limits=limits).prepare(g)
    sigdnn.Executor(limits=Limits(max_total_bytes=tensors * 6)).prepare(g)


def test_conv_weights_with_overlapping_strides_are_priced_logically() -> None:
    g = sigdnn.Graph("conv", io_dtype="float32")
    x = g.tensor("x", (1, 512, 64, 64))
    w = g.tensor("w", (512, 512, 3, 3), strides=(1, 1, 1, 1))
    g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True)
    with pytest.raises(GraphError):
        sigdnn.Executor(limits=Limits(max_total_bytes=8 << 20)).prepare(g.serialize())


def test_a_matmul_whose_multiply_adds_exceed_the_work_limit_is_refused_before_running() -> None:
    g = sigdnn.Graph("big", io_dtype="int8", compute_dtype="int32")
    g.matmul(g.tensor("a", (2048, 2048)), g.tensor("b", (2048, 2048)), name="mm").set_output(True)
    with pytest.raises(GraphError, match=r"node 'mm'.*work reaches 8589934592 element operations.*limit 1048576"):
        sigdnn.Executor(limits=Limits(max_work=1 << 20)).prepare(g)


def test_an_integer_matmul_within_the_limits_runs_on_blas() -> None:
    """The 3 MiB int8 graph that once took a minute in NumPy's integer loop: exact and BLAS-backed now."""
    g = sigdnn.Graph("int8", io_dtype="int8", compute_dtype="int32")
    g.matmul(g.tensor("a", (256, 512)), g.tensor("b", (512, 128)), name="mm").set_output(True).set_name("c")
    g.tensors[g.tensor_by_name("c").uid].set_data_type("int32")
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (256, 512), dtype=np.int8)
    b = rng.integers(-128, 128, (512, 128), dtype=np.int8)
    got = sigdnn.Executor().run(g, {"a": a, "b": b})["c"]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def shared_node_buffer(references: int) -> bytes:
    """A graph whose node vector holds ``references`` offsets to ONE node table."""
    builder = flatbuffers.Builder(1024)
    name = builder.CreateString("n")
    fb_node.Start(builder)
    fb_node.AddName(builder, name)
    node = fb_node.End(builder)
    builder.StartVector(4, references, 4)
    for _ in range(references):
        builder.PrependUOffsetTRelative(node)
    nodes = builder.EndVector()
    fb_graph.Start(builder)
    fb_graph.AddSchemaVersionMajor(builder, 1)
    fb_graph.AddNodes(builder, nodes)
    builder.Finish(fb_graph.End(builder), FILE_IDENTIFIER)
    return bytes(builder.Output())


def test_a_table_referenced_many_times_is_refused_at_the_second_reference() -> None:
    data = shared_node_buffer(1 << 16)
    with pytest.raises(SchemaError, match="entry #1 points at a table an earlier entry already uses"):
        sigdnn.deserialize(data)
