"""The GPU reference delta rule's builders (gpu_reference/delta_rule.py) take an integer cu_seqlens and decline
any other integer tensor by their own check; sequence bounds they cannot use are refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_reference_emulation import gpu_reference_executor, make_available

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.registry import DEFAULT_REGISTRY
from sigdnn.runtime.device import Device


@pytest.mark.parametrize("op", ["gdn", "kda", "gdn_bwd", "kda_bwd"])
def test_only_cu_seqlens_may_be_an_integer(op: str) -> None:
    g = sigdnn.Graph(op, io_dtype="float32", compute_dtype="float32")
    t, h, k, v = 4, 1, 2, 3
    ins = {
        "q": g.tensor("q", (t, h, k)),
        "k": g.tensor("k", (t, h, k)),
        "v": g.tensor("v", (t, h, v)),
        "g": g.tensor("g", (t, h, k) if op.startswith("kda") else (t, h)),
        "beta": g.tensor("beta", (t, h)),
        "cu_seqlens": g.tensor("cu_seqlens", (3,), dtype="int32"),
    }
    if op.endswith("_bwd"):
        ins["d_o"] = g.tensor("d_o", (t, h, v))
    for out in getattr(g, op)(**ins, name="dr"):
        if out is not None:
            out.set_output(True)
    builder = DEFAULT_REGISTRY.find(f"gpu_reference.{op}")
    builder.check(g.nodes[0], g, Device("gpu"))  # an int32 cu_seqlens is taken
    ins["beta"].set_data_type("int32")
    with pytest.raises(NotSupported, match=rf"port 'beta' \(tensor 'beta'\) is .*; {op} is floating point only"):
        builder.check(g.nodes[0], g, Device("gpu"))


@pytest.mark.parametrize(
    ("cu", "message"),
    [
        ([1, 2, 4], r"starts at 1; it must start at 0"),
        ([0, 3, 2], r"decreases at entry 2 \(3 -> 2\)"),
        ([0, 1, 3], r"ends at 3; it must end at T = 4"),
    ],
)
def test_sequence_bounds_it_cannot_use_are_refused_by_name(monkeypatch: pytest.MonkeyPatch, cu, message: str) -> None:
    """cu_seqlens read back on the device path must start at 0, never decrease and end at T."""
    make_available(monkeypatch)
    g = sigdnn.Graph("gdn", io_dtype="float32", compute_dtype="float32")
    t, h, k, v = 4, 1, 2, 3
    ins = {"q": g.tensor("q", (t, h, k)), "k": g.tensor("k", (t, h, k)), "v": g.tensor("v", (t, h, v)),
           "g": g.tensor("g", (t, h)), "beta": g.tensor("beta", (t, h)),
           "cu_seqlens": g.tensor("cu_seqlens", (3,), dtype="int32")}  # fmt: skip
    for out in g.gdn(**ins, name="gdn"):
        if out is not None:
            out.set_output(True)
    inputs = random_inputs(g, 0)
    inputs["cu_seqlens"] = np.array(cu, np.int32)
    ex = gpu_reference_executor()
    with pytest.raises(
        sigdnn.errors.ExecutionError, match=rf"^gated delta rule: tensor 'cu_seqlens' \(cu_seqlens\) {message}"
    ):
        ex.execute(ex.prepare(g), inputs)
