"""varlen_ports: the padding / ragged rules hipDNN and cuDNN JSON share, each half of each rule on its own."""

from __future__ import annotations

import pytest

from sigdnn.errors import GraphError
from sigdnn.importers.common import varlen_ports

NAMES = ("SEQ_LEN_Q", "SEQ_LEN_KV")
QKVO = {"q": 1, "k": 2, "v": 3, "o": 4}


def refuse(why: str) -> GraphError:
    return GraphError(f"node 'attn': {why}")


@pytest.mark.parametrize("lengths", [(10, None), (None, 11), (None, None)])
def test_padding_needs_both_lengths(lengths: tuple[int | None, int | None]) -> None:
    with pytest.raises(GraphError, match="padding_mask needs both SEQ_LEN_Q and SEQ_LEN_KV"):
        varlen_ports(refuse, (*lengths, True), NAMES, {}, QKVO, {}, set())


@pytest.mark.parametrize("lengths", [(10, None), (None, 11), (10, 11)])
def test_a_length_without_padding_is_refused(lengths: tuple[int | None, int | None]) -> None:
    with pytest.raises(GraphError, match="SEQ_LEN_Q / SEQ_LEN_KV are given without padding_mask"):
        varlen_ports(refuse, (*lengths, False), NAMES, {}, QKVO, {}, set())


def test_ports_offsets_and_the_tensors_consumed() -> None:
    consumed: set[int] = set()
    ports = varlen_ports(refuse, (10, 11, True), NAMES, {1: 21, 4: 24, 5: 21}, QKVO, {"dq": ("q", 5)}, consumed)
    assert ports == {
        "seq_len_q": 10,
        "seq_len_kv": 11,
        "q_ragged_offset": 21,
        "k_ragged_offset": None,
        "v_ragged_offset": None,
        "o_ragged_offset": 24,
    }
    assert consumed == {1, 2, 3, 4, 5}


def test_a_gradient_placed_by_other_offsets_is_refused() -> None:
    with pytest.raises(GraphError, match="dq's ragged offsets differ from q's"):
        varlen_ports(refuse, (None, None, False), NAMES, {1: 21, 5: 25}, QKVO, {"dq": ("q", 5)}, set())
