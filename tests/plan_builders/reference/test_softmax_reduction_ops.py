"""softmax (with log and stats) and reduction (every mode, float and exact integer) nodes end to end.

Oracles: torch float64 (softmax, log_softmax, logsumexp, sum / prod /
amin / amax / mean / norms) and exact Python integers for integer reductions.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_runs import close, normal, outputs, run, torch64

import sigdnn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(("axes", "log"), [(None, False), ((1, 2), True), ((0,), False), ((-1, 1), True)])
def test_softmax_and_stats(axes: tuple[int, ...] | None, log: bool) -> None:
    rng = np.random.default_rng(3)
    x = normal(rng, (3, 4, 5), channels_last=True) * 4
    g = sigdnn.Graph("sm", io_dtype="float64", intermediate_dtype="float64")
    y, stats = g.softmax(g.tensor("x", x.shape), axes=axes, log=log, generate_stats=True, name="sm")
    stats.set_data_type("float64")
    outputs(g, {"y": y, "stats": stats})
    got = run(g, {"x": x})
    dims = tuple(sorted(a % 3 for a in (axes or (2,))))
    xt = torch64(x)
    lse = torch.logsumexp(xt, dim=dims, keepdim=True)
    close(got["stats"], lse)
    # torch's softmax takes one dim: move the softmax axes last and flatten them
    rest = [a for a in range(3) if a not in dims]
    flat = xt.permute(*rest, *dims).reshape(*(x.shape[a] for a in rest), -1)
    f = torch.log_softmax if log else torch.softmax
    want = f(flat, dim=-1).reshape(*(x.shape[a] for a in rest), *(x.shape[a] for a in dims))
    close(got["y"], want.permute(*np.argsort([*rest, *dims]).tolist()))


def test_softmax_without_stats_has_no_stats_output() -> None:
    g = sigdnn.Graph("sm", io_dtype="float32")
    y, stats = g.softmax(g.tensor("x", (2, 7)), name="sm")
    assert stats is None and [p for p in g.node_by_name("sm").op.outputs()] == ["y"]
    outputs(g, {"y": y})
    x = np.random.default_rng(1).standard_normal((2, 7)).astype(np.float32)
    got = sigdnn.Executor().run(g, {"x": x})
    np.testing.assert_array_equal(got["y"], torch.softmax(torch64(x), -1).numpy().astype(np.float32))


TORCH_MODES = {
    "add": lambda t, d: t.sum(dim=d, keepdim=True),
    "mul": lambda t, d: t.prod(dim=d[0], keepdim=True) if len(d) == 1 else t.flatten(d[0], d[-1]).prod(d[0], True),
    "min": lambda t, d: t.amin(dim=d, keepdim=True),
    "max": lambda t, d: t.amax(dim=d, keepdim=True),
    "amax": lambda t, d: t.abs().amax(dim=d, keepdim=True),
    "avg": lambda t, d: t.mean(dim=d, keepdim=True),
    "norm1": lambda t, d: t.abs().sum(dim=d, keepdim=True),
    "norm2": lambda t, d: torch.linalg.vector_norm(t, 2, dim=d, keepdim=True),
    "mul_no_zeros": lambda t, d: torch.where(t == 0, 1.0, t).prod(dim=d[0], keepdim=True),
}


@pytest.mark.parametrize("mode", list(TORCH_MODES))
def test_reduction_float_modes(mode: str) -> None:
    rng = np.random.default_rng(len(mode))
    x = rng.standard_normal((3, 4, 2))
    x[0, 1, 0] = 0.0  # mul_no_zeros skips it
    reduced = (1,) if mode in ("mul", "mul_no_zeros") else (0, 2)
    y_dims = tuple(1 if i in reduced else d for i, d in enumerate(x.shape))
    g = sigdnn.Graph("red", io_dtype="float64")
    outputs(g, {"y": g.reduction(g.tensor("x", x.shape), mode, y_dims, name="red")})
    got = run(g, {"x": x})
    assert got["y"].shape == y_dims
    close(got["y"], TORCH_MODES[mode](torch64(x), reduced))


def test_reduction_by_axes_equals_by_dims() -> None:
    g = sigdnn.Graph("red", io_dtype="float32")
    x = g.tensor("x", (2, 3, 4))
    assert g.reduction(x, "max", (2, 1, 1)).dims == g.reduction(x, "max", axes=(1, -1)).dims == (2, 1, 1)
    assert g.node_by_name("reduction_0").op.axes == g.node_by_name("reduction_1").op.axes == (1, 2)


@pytest.mark.parametrize("mode", ["add", "mul", "min", "max", "amax", "norm1", "mul_no_zeros"])
def test_integer_reduction_is_exact(mode: str) -> None:
    """int64 x with int64 compute: exact beyond float64's 2**53 (Python integers are the oracle; no result overflows)."""
    big = 2**53 + 1
    x = np.array([[big, -3, 5], [7, 0, -(2**40)]], dtype=np.int64)
    g = sigdnn.Graph("ired", io_dtype="int64", compute_dtype="int64")
    outputs(g, {"y": g.reduction(g.tensor("x", x.shape), mode, (2, 1), name="red")})
    got = sigdnn.Executor().run(g, {"x": x})["y"].ravel().tolist()
    rows = x.tolist()
    if mode == "add":
        want = [sum(r) for r in rows]
    elif mode in ("mul", "mul_no_zeros"):
        want = [int(np.prod([v for v in r if v != 0 or mode == "mul"], dtype=object)) for r in rows]
    elif mode == "min":
        want = [min(r) for r in rows]
    elif mode == "max":
        want = [max(r) for r in rows]
    elif mode == "amax":
        want = [max(abs(v) for v in r) for r in rows]
    else:
        want = [sum(abs(v) for v in r) for r in rows]
    assert got == want
