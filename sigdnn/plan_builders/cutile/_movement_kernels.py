"""The copy kernel of reshape, transpose, slice and concatenate, written against the cuTile API.

Never imported as a module: ``movement.py`` hands the text below the marker
line to the backend (cuda.tile, or in CPU tests ``emulator``'s NumPy
stand-in, binds ``ct``). Both sides arrive as 6-D strided views (leading
size-1 axes pad a lower rank): ``dst`` is walked in its memory order (``q*``:
the elements of the axes inside each axis), each element's logical
row-major index (``m*``: the elements of the axes after each) is split over
``src``'s own dims (``r*``, ``s*``), and the element there is copied. A
transpose or a slice hands a ``src`` view of x already in y's shape (axes
permuted, or offset and strided), a concatenate one launch per piece into
its slice of y; a reshape's two shapes differ, which the logical index
bridges. Lanes past the last element get an axis-0 coordinate of d0: out of
bounds, so their scatter is dropped. Sizes are scalar arguments; only the
tile is a compile-time constant.
"""

from typing import Any

ct: Any = None  # bound by the module the backend makes (cuda.tile or the CPU emulator)

# ---- kernel module: everything below this line is the kernels' text ----


@ct.kernel
def strided_copy(
    src, dst, count,
    q0, q1, q2, q3, q4, q5,
    d0, d1, d2, d3, d4, d5,
    m0, m1, m2, m3, m4, m5,
    r0, r1, r2, r3, r4, r5,
    s0, s1, s2, s3, s4, s5,
    TILE: ct.Constant[int],
):  # fmt: skip
    flat = ct.bid(0) * TILE + ct.arange(TILE, dtype=ct.int32)
    a0 = ct.where(flat < count, (flat // q0) % d0, d0)
    a1 = (flat // q1) % d1
    a2 = (flat // q2) % d2
    a3 = (flat // q3) % d3
    a4 = (flat // q4) % d4
    a5 = (flat // q5) % d5
    logical = a0 * m0 + a1 * m1 + a2 * m2 + a3 * m3 + a4 * m4 + a5 * m5
    b0 = (logical // r0) % s0
    b1 = (logical // r1) % s1
    b2 = (logical // r2) % s2
    b3 = (logical // r3) % s3
    b4 = (logical // r4) % s4
    b5 = (logical // r5) % s5
    v = ct.gather(src, (b0, b1, b2, b3, b4, b5))
    ct.scatter(dst, (a0, a1, a2, a3, a4, a5), ct.astype(v, dst.dtype))
