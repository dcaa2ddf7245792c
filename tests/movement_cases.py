"""Random reshape / transpose / slice / concatenate graphs for the cuTile copy tests (emulated and GPU).

Random shapes (size-1 and odd dims), layouts (a random axis order, some
axes followed by a gap), slices, and concatenates whose pieces are laid out
unlike the output; the output's layout is random too.
"""

from __future__ import annotations

from hypothesis import strategies as st

import sigdnn


def laid_out(draw: st.DrawFn, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a random axis order, some axes followed by a gap."""
    order = draw(st.permutations(range(len(dims))))
    strides, step = [0] * len(dims), 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis] + draw(st.sampled_from([0, 0, 2]))
    return tuple(strides)


@st.composite
def movement_graphs(draw: st.DrawFn) -> sigdnn.Graph:
    dtype = draw(st.sampled_from(["float32", "bfloat16", "int32"]))
    g = sigdnn.Graph("move", io_dtype=dtype)
    dims = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=5)))
    x = g.tensor("x", dims, laid_out(draw, dims))
    kind = draw(st.sampled_from(["reshape", "transpose", "slice", "concatenate"]))
    if kind == "reshape":
        rank = draw(st.integers(1, 4))
        shape = [1] * rank
        for d in dims:  # each old dim multiplied into one of the new axes
            shape[draw(st.integers(0, rank - 1))] *= d
        y = g.reshape(x, shape)
    elif kind == "transpose":
        y = g.transpose(x, draw(st.permutations(range(len(dims)))))
    elif kind == "slice":
        bounds = []
        for d in dims:
            a = draw(st.integers(0, d - 1))
            bounds.append(slice(a, draw(st.integers(a + 1, d)), draw(st.integers(1, 3))))
        y = g.slice(x, bounds)
    else:
        axis = draw(st.integers(0, len(dims) - 1))
        pieces = [x]
        for i in range(draw(st.integers(1, 2))):
            other = (*dims[:axis], draw(st.integers(1, 4)), *dims[axis + 1 :])
            pieces.insert(draw(st.integers(0, len(pieces))), g.tensor(f"p{i}", other, laid_out(draw, other)))
        y = g.concatenate(pieces, axis)
    y.set_stride(laid_out(draw, y.dims)).set_output(True)
    return g
