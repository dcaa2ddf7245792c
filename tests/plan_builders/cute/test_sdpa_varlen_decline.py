"""The CuTe attention kernels take no padding masks or ragged offsets yet: both builders decline such nodes,
by key and by node, so the GPU executor never runs a variable-length node as if it were dense."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.sdpa import CuteSdpaBuilder
from sigdnn.plan_builders.cute.sdpa_backward import CuteSdpaBackwardBuilder
from sigdnn.signature_keys import key_for


def varlen_graph(ragged: bool, backward: bool) -> sigdnn.Graph:
    g = sigdnn.Graph("attn", io_dtype="bfloat16", compute_dtype="float32")
    dims, strides = (2, 4, 64, 128), (64 * 4 * 128, 128, 4 * 128, 1)
    q, k, v = (g.tensor(n, dims, strides) for n in ("q", "k", "v"))
    lengths = {"seq_len_q": g.tensor("lq", (2, 1, 1, 1), dtype="int32")}
    offsets = {"q": g.tensor("q_off", (3, 1, 1, 1), dtype="int32")} if ragged else {}
    if backward:
        o, do = g.tensor("o", dims, strides), g.tensor("do", dims, strides)
        st = g.tensor("st", (2, 4, 64, 1), dtype="float32")
        g.sdpa_backward(q, k, v, o, do, st, 0.1, **lengths, ragged_offsets=offsets, name="sdpa")[0].set_output(True)
    else:
        g.sdpa(q, k, v, 0.1, **lengths, ragged_offsets=offsets, name="sdpa")[0].set_output(True)
    return g


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("ragged", [False, True])
def test_variable_length_nodes_are_declined_with_the_reason(ragged: bool, backward: bool) -> None:
    builder = CuteSdpaBackwardBuilder() if backward else CuteSdpaBuilder()
    g = varlen_graph(ragged, backward)
    node = g.node_by_name("sdpa")
    assert not builder.serves(key_for(node, g))
    with pytest.raises(NotSupported, match=r"variable-length attention \(ports \['seq_len_q'.*not supported"):
        builder.plan(node, g)
