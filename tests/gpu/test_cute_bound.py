"""CuTe plans on the GPU executor's bound path: bound once, replayed from CUDA graphs, rebound when a buffer moves.

The matmul and conv regions run on torch tensors as a training loop would
call them: the same buffers with new contents (a recorded graph must read
the addresses, not a snapshot), then an output at another address (a new
binding and recording). Each run must equal the same kernel launched
directly, bit for bit, and the first run must pass validation.
"""

from __future__ import annotations

import numpy as np
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
import sigdnn.validation

pytestmark = pytest.mark.gpu
skip_unless_sm90("the CuTe DSL builders")
torch = pytest.importorskip("torch")


def matmul_region() -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    y = g.matmul(g.tensor("a", (200, 136)), g.tensor("b", (136, 264)), name="mm")
    y = g.pointwise("add", y, g.tensor("bias", (1, 264)), name="bias")
    g.pointwise("gelu_fwd", y, name="act").set_output(True).set_name("out")
    return g


def conv_region() -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (2, 16, 9, 11), layout="NHWC"), g.tensor("w", (24, 16, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, name="conv", padding=(1, 1))
    y = g.pointwise("add", y, g.tensor("bias", (1, 24, 1, 1), layout="NHWC"), name="bias")
    g.pointwise("relu_fwd", y, name="act").set_output(True).set_name("out")
    return g


def device_tensor(g: sigdnn.Graph, name: str, host: np.ndarray | None = None):
    t = g.tensor_by_name(name)
    dims, strides = t.dims, t.strides
    dev = torch.empty_strided(dims, strides, dtype=torch.bfloat16, device="cuda")
    if host is not None:
        dev.copy_(torch.from_numpy(host.astype(np.float32)).to(torch.bfloat16))
    return dev


CASES = {"matmul": (matmul_region, "cute.matmul"), "conv": (conv_region, "cute.conv_fprop_implicit")}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_bound_cute_region_matches_direct_launches(case: str, cuda_graphs: bool) -> None:
    build, engine = CASES[case]
    g = build()
    direct = sigdnn.Executor("gpu", engine=engine)
    report = sigdnn.validate(g, seed=1, executor=direct)
    assert report.passed, report.table()
    ex = sigdnn.Executor("gpu", engine=engine, cuda_graphs=cuda_graphs)
    plan = ex.prepare(g)
    assert len(plan.steps) == 1 and plan.steps[0].builder.name == engine
    names = [t.name for t in g.inputs]
    pack = {n: device_tensor(g, n) for n in names}
    out = device_tensor(g, "out")
    for seed in (1, 2, 3, 4):  # the same buffers with new contents; the third and fourth replay
        data = sigdnn.validation.random_inputs(g, seed=seed)
        for n in names:
            pack[n].copy_(torch.from_numpy(data[n].astype(np.float32)).to(torch.bfloat16))
        ex.execute(plan, {**pack, "out": out}, to_host=False)
        want = direct.run(g, data)["out"]
        got = out.view(torch.int16).cpu().numpy()
        assert np.array_equal(got, want.view(np.int16)), seed
    moved = device_tensor(g, "out")
    ex.execute(plan, {**pack, "out": moved}, to_host=False)
    assert torch.equal(moved.view(torch.int16), out.view(torch.int16))
    recordings = ex.memory.bound(plan, cuda_graphs).recordings
    assert recordings == (1 if cuda_graphs else 0)
