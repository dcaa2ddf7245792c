"""plan_iteration: how a kernel walks outputs and reads each input, checked by brute force.

Every case is also checked against an independent oracle: for each output
element (in the outputs' memory order) the input offset the Access implies
must be the offset NumPy's strides give for the broadcast element.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sigdnn.graph.layout import packed_strides
from sigdnn.plan_builders.cutile.layout import INT32_MAX, Access, plan_iteration


def implied_offsets(access: Access, dims: tuple[int, ...], size: int) -> np.ndarray:
    """The input offset of each flat output index, as the generated kernel computes it."""
    i = np.arange(size)
    if access.kind == "flat":
        return i
    if access.kind == "scalar":
        return np.zeros(size, dtype=np.int64)
    coords = np.unravel_index(i, dims)
    return sum(c * s for c, s in zip(coords, access.strides))


def true_offsets(out_dims, out_strides, in_dims, in_strides) -> np.ndarray:
    """Offsets of the broadcast input element for each output element, in output memory order."""
    rank = len(out_dims)
    if rank == 0:
        return np.zeros(1, dtype=np.int64)
    pad = rank - len(in_dims)
    dims = (1,) * pad + tuple(in_dims)
    strides = (0,) * pad + tuple(in_strides)
    logical = np.indices(out_dims).reshape(rank, -1)
    memory = sum(c * s for c, s in zip(logical, out_strides))
    order = np.argsort(memory, kind="stable")
    offs = sum(np.where(d == 1, 0, c) * s for c, d, s in zip(logical, dims, strides))
    return offs[order]


CASES = [
    # (out dims, out strides, [(in dims, in strides)], expected kinds)
    ((4, 5, 6), packed_strides((4, 5, 6)), [((4, 5, 6), packed_strides((4, 5, 6)))], ["flat"]),
    ((2, 3, 4, 5), (60, 1, 15, 3), [((2, 3, 4, 5), (60, 1, 15, 3))], ["flat"]),  # NHWC both: one flat walk
    ((8, 16, 7, 5), packed_strides((8, 16, 7, 5)), [((1, 16, 1, 1), (16, 1, 1, 1))], ["gather"]),  # bias
    ((2, 3, 4, 5), (60, 1, 15, 3), [((1, 3, 1, 1), (3, 1, 1, 1))], ["gather"]),  # bias over NHWC
    ((1000,), (1,), [((1,), (1,))], ["scalar"]),
    ((6, 5), (5, 1), [((5,), (1,)), ((6, 1), (1, 1))], ["gather", "gather"]),  # rank-padded, column
    ((65, 33), (33, 1), [((65, 33), (1, 65))], ["gather"]),  # transposed input
    ((3, 4, 5), packed_strides((3, 4, 5)), [((3, 4, 5), (40, 10, 1))], ["gather"]),  # padded rows
    ((2, 3, 4, 5), (60, 1, 15, 3), [((2, 3, 4, 5), packed_strides((2, 3, 4, 5)))], ["gather"]),  # NCHW into NHWC
    ((3, 1, 5), (5, 5, 1), [((1, 1, 5), (5, 5, 1)), ((3, 1, 1), (1, 1, 1))], ["gather", "gather"]),
    ((), (), [((), ())], ["scalar"]),
]


@pytest.mark.parametrize(("out_dims", "out_strides", "inputs", "kinds"), CASES)
def test_walk_matches_numpy_offsets(out_dims, out_strides, inputs, kinds):
    space = plan_iteration(out_dims, out_strides, inputs)
    assert [a.kind for a in space.inputs] == kinds
    size = math.prod(out_dims)
    assert space.size == size
    for access, (dims, strides) in zip(space.inputs, inputs):
        want = true_offsets(out_dims, out_strides, dims, strides)
        got = implied_offsets(access, space.dims, size)
        assert np.array_equal(got, want), (access, dims, strides)
        assert access.span > int(want.max(initial=0))  # the 1-D view covers every element read


def test_merges_dims_every_operand_walks_as_one():
    space = plan_iteration((8, 16, 7, 5), packed_strides((8, 16, 7, 5)), [((1, 16, 1, 1), (16, 1, 1, 1))])
    assert space.dims == (8, 16, 35)  # H and W merge; N stays apart from C (the bias steps over C only)
    assert space.inputs[0].strides == (0, 1, 0)


def test_declines_what_kernels_cannot_index():
    with pytest.raises(ValueError, match="not packed"):
        plan_iteration((4, 4), (8, 1), [((4, 4), (4, 1))])
    with pytest.raises(ValueError, match="32-bit"):
        plan_iteration((2**31,), (1,), [((2**31,), (1,))])
    with pytest.raises(ValueError, match="do not broadcast"):
        plan_iteration((4, 5), (5, 1), [((3, 5), (5, 1))])
    with pytest.raises(ValueError, match="negative"):
        plan_iteration((4,), (1,), [((4,), (-1,))])
    assert INT32_MAX == 2**31 - 1


def test_empty_outputs():
    space = plan_iteration((0, 3), (3, 1), [((0, 3), (3, 1))])
    assert space.size == 0
