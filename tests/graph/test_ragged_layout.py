"""The ragged (THD) layout helpers, element by element against hand-placed buffers."""

from __future__ import annotations

import numpy as np
import pytest

from sigdnn.dtypes import DataType
from sigdnn.errors import ExecutionError
from sigdnn.graph.ops import ragged
from sigdnn.graph.tensor import Tensor


def tensor(dims, strides, dtype=DataType.FLOAT64) -> Tensor:
    return Tensor(1, "x", tuple(dims), tuple(strides), dtype)


BSHD = tensor((2, 2, 3, 2), (12, 2, 4, 1))  # B 2, H 2, S 3, E 2: a token is H * E = 4 elements


def test_positions_place_each_sequence_at_its_offset() -> None:
    pos, inside = ragged.positions("w", "off", BSHD, np.array([0, 8, 12]), np.array([2, 1]), True)
    assert inside[:, 0, :, 0].tolist() == [[True, True, False], [True, False, False]]
    # batch 1, head 1, token 0, element 1: 8 + 1 * 2 + 0 * 4 + 1
    assert pos[1, 1, 0, 1] == 11
    assert pos[0, 0, 1, 0] == 4


def test_unpack_and_pack_are_inverse_on_the_sequences() -> None:
    flat = np.arange(24, dtype=float)
    logical = np.lib.stride_tricks.as_strided(flat, BSHD.dims, tuple(8 * s for s in BSHD.strides)).copy()
    pos, inside = ragged.positions("w", "off", BSHD, np.array([0, 8, 12]), np.array([2, 1]), False)
    padded = ragged.unpack(logical, BSHD, pos, inside)
    assert padded[1, 1, 0].tolist() == [10.0, 11.0] and padded[1, :, 1:].sum() == 0 and padded[0, 0, 2].sum() == 0
    packed = ragged.pack(padded, BSHD, pos, inside)
    stored = ragged.storage(packed, BSHD)
    assert stored[:12].tolist() == list(range(12)) and stored[12:].sum() == 0
    free = ragged.unaddressed(BSHD, pos, inside)
    assert ragged.storage(free, BSHD).tolist() == [False] * 12 + [True] * 12


@pytest.mark.parametrize(
    ("offsets", "lengths", "message"),
    [
        ([0, 22, 24], [2, 1], "places sequence 1 .* outside tensor 'x''s 24 elements"),
        ([0, 21, 24], [2, 1], "places sequence 1 \\(offset 21, length 1\\) outside"),  # its last element at 24
        ([-1, 8, 12], [1, 1], "places sequence 0 \\(offset -1, length 1\\)"),
        ([0, 4, 12], [2, 1], "makes sequences of output 'x' overlap"),
    ],
)
def test_positions_refuse_with_the_offsets_name(offsets, lengths, message) -> None:
    with pytest.raises(ExecutionError, match=f"node 'n': tensor 'off' {message}"):
        ragged.positions("node 'n'", "off", BSHD, np.array(offsets), np.array(lengths), True)


def test_an_empty_sequence_addresses_nothing_and_inputs_may_overlap() -> None:
    _, inside = ragged.positions("w", "off", BSHD, np.array([0, 0, 0]), np.array([0, 3]), False)
    assert not inside[0].any() and inside[1].all()
    ragged.positions("w", "off", BSHD, np.array([0, 0, 12]), np.array([3, 3]), False)  # an input: shared is fine


def test_a_one_element_tensor_whose_only_sequence_is_empty_unpacks_to_zero() -> None:
    """Nothing is addressed, and nothing outside the buffer's one element is read."""
    one = tensor((1, 1, 1, 1), (1, 1, 1, 1))
    pos, inside = ragged.positions("w", "off", one, np.array([0, 0]), np.array([0]), False)
    assert not inside.any()
    assert ragged.unpack(np.array([[[[7.0]]]]), one, pos, inside).tolist() == [[[[0.0]]]]


def test_lengths_outside_their_bound_name_the_batch() -> None:
    assert ragged.lengths_of("w", "lq", np.array([[0], [3]], np.int32), 3).tolist() == [0, 3]
    with pytest.raises(ExecutionError, match=r"tensor 'lq' holds length 4 at batch 1; lengths lie in \[0, 3\]"):
        ragged.lengths_of("w", "lq", np.array([1, 4]), 3)


def test_random_offsets_follow_the_layout() -> None:
    rng = np.random.default_rng(0)
    b = 64
    q = tensor((b, 2, 3, 2), (12, 2, 4, 1), DataType.FLOAT32)
    single_head = tensor((b, 1, 3, 2), (6, 2, 2, 1), DataType.FLOAT32)  # token stride = head stride
    bhsd = tensor((b, 2, 3, 2), (12, 6, 2, 1), DataType.FLOAT32)
    index = {
        p: Tensor(9 + i, p, (b + 1,), (1,), DataType.INT32)  # three tensors (one tensor would place all three)
        for i, p in enumerate(("q_ragged_offset", "k_ragged_offset", "v_ragged_offset"))
    }
    lengths = {
        "seq_len_q": Tensor(8, "l", (b,), (1,), DataType.INT64),
        "seq_len_kv": Tensor(7, "m", (b,), (1,), DataType.INT32),
    }
    tensors = {"q": q, "k": bhsd, "v": single_head, **lengths, **index}
    drawn = ragged.random_varlen(tensors, rng, {"o": "seq_len_q", "q": "seq_len_q", "k": "seq_len_q", "v": "seq_len_q"})
    lq = drawn["seq_len_q"]
    assert drawn["seq_len_q"].dtype == np.int64 and set(lq.tolist()) == {1, 2, 3}  # every length in [1, S]
    assert drawn["seq_len_kv"].dtype == np.int32 and set(drawn["seq_len_kv"].tolist()) == {1, 2, 3}  # k's S
    packed = np.concatenate([[0], np.cumsum(lq)])
    assert drawn["q_ragged_offset"].tolist() == (packed * 4).tolist()  # token-major: packed end to end
    assert drawn["v_ragged_offset"].tolist() == (packed * 2).tolist()
    assert drawn["k_ragged_offset"].tolist() == (np.arange(b + 1) * 12).tolist()  # head-major: at the batch stride
    assert drawn["q_ragged_offset"].dtype == np.int32 and "o_ragged_offset" not in drawn


def test_unspecified_outputs_of_padded_and_ragged_tensors() -> None:
    o = tensor((2, 2, 3, 2), (12, 2, 4, 1))
    stats = tensor((2, 2, 3, 1), (6, 3, 1, 1))
    values = {"seq_len_q": np.array([1, 3]), "o_ragged_offset": np.array([0, 4, 16])}
    masks = ragged.unspecified_outputs(
        values, {"o": o, "stats": stats}, {"o": ("o", "seq_len_q"), "stats": (None, "seq_len_q")}
    )
    assert masks["stats"][0, :, 1:].all() and not masks["stats"][0, :, 0].any() and not masks["stats"][1].any()
    assert ragged.storage(masks["o"], o).tolist() == [False] * 16 + [True] * 8
    assert ragged.unspecified_outputs({}, {"o": o}, {"o": ("o", "seq_len_q")}) == {}
    later = ragged.unspecified_outputs(
        values, {"stats": stats}, {"o": ("o", "seq_len_q"), "stats": (None, "seq_len_q")}
    )
    assert list(later) == ["stats"]  # an output the node lacks does not end the walk


def test_one_lengths_tensor_for_both_ports_is_one_draw_within_both_bounds() -> None:
    rng = np.random.default_rng(0)
    b = 64
    q = tensor((b, 2, 3, 2), (12, 2, 4, 1), DataType.FLOAT32)  # 3 queries
    k = tensor((b, 2, 5, 2), (20, 2, 4, 1), DataType.FLOAT32)  # 5 keys
    both = Tensor(8, "l", (b,), (1,), DataType.INT32)
    tensors = {"q": q, "k": k, "v": k, "seq_len_q": both, "seq_len_kv": both}
    drawn = ragged.random_varlen(tensors, rng, {"q": "seq_len_q", "k": "seq_len_kv"})
    assert drawn["seq_len_q"].tolist() == drawn["seq_len_kv"].tolist()
    assert set(drawn["seq_len_q"].tolist()) == {1, 2, 3}  # within the queries' bound, the smaller
