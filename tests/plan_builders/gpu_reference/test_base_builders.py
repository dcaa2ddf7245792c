"""The GPU reference's builder base (gpu_reference/base.py): a floating-point-only op computes in float64 even
under an integer compute type, and declines integer tensors by itself. Oracles: hand-worked values and the CPU
reference."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_reference_emulation import make_available, run_both

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.registry import DEFAULT_REGISTRY
from sigdnn.runtime.device import Device


def test_a_float_only_op_under_integer_compute_sums_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float32 convolution with an int32 compute type: 0.5 * 1.5 + 1.25 * 0.25 = 1.0625 and
    1.25 * 1.5 - 2.5 * 0.25 = 1.25 (int64 reads would truncate every operand first)."""
    make_available(monkeypatch)
    g = sigdnn.Graph("conv", io_dtype="float32", compute_dtype="int32")
    g.conv_fprop(g.tensor("x", (1, 1, 1, 3)), g.tensor("w", (1, 1, 1, 2)), name="conv").set_output(True)
    inputs = {"x": np.array([[[[0.5, 1.25, -2.5]]]], np.float32), "w": np.array([[[[1.5, 0.25]]]], np.float32)}
    got, cpu = run_both(g, inputs)
    np.testing.assert_array_equal(got["conv::y"], np.array([[[[1.0625, 1.25]]]], np.float32))
    np.testing.assert_array_equal(cpu["conv::y"], got["conv::y"])


def test_a_float_only_builder_declines_an_integer_tensor_itself() -> None:
    """The graph refuses such a node when it is checked; the builder's own check says the same without it."""
    g = sigdnn.Graph("sm", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (2, 3))
    g.softmax(x, (1,), name="sm")[0].set_output(True)
    x.set_data_type("int32")
    builder = DEFAULT_REGISTRY.find("gpu_reference.softmax")
    with pytest.raises(NotSupported, match=r"port 'x' \(tensor 'x'\) is .*; softmax is floating point only"):
        builder.check(g.nodes[0], g, Device("gpu"))
