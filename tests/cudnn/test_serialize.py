"""serialize() writes cuDNN-frontend JSON that deserialize() (sigdnn's importer) reads back to the same results."""

from __future__ import annotations

import json

import pytest
import torch

import sigdnn.cudnn as cudnn
from sigdnn.cudnn.serialize import real
from tests.cudnn.conftest import F64

gen = torch.Generator().manual_seed(3)


def rand(*dims: int) -> torch.Tensor:
    return torch.randn(*dims, dtype=torch.float64, generator=gen)


def every_op(g):
    """One graph touching every op serialize writes; returns (inputs by tensor, outputs)."""
    x4, w, b = rand(2, 3, 6, 6), rand(4, 3, 3, 3), rand(1, 4, 1, 1)
    X4, W, B = g.tensor_like(x4), g.tensor_like(w), g.tensor_like(b)
    y = g.conv_fprop(X4, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y = g.relu(g.bias(y, B), lower_clip=0.1, upper_clip=2.5, negative_slope=0.3)
    dy = rand(2, 4, 6, 6)
    DY = g.tensor_like(dy)
    dx = g.conv_dgrad(DY, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    dw = g.conv_wgrad(X4, DY, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    s, bias, rm, rv = rand(1, 4, 1, 1), rand(1, 4, 1, 1), rand(1, 4, 1, 1), rand(1, 4, 1, 1).abs()
    S, BI, RM, RV = (g.tensor_like(t) for t in (s, bias, rm, rv))
    bn, mean, inv, nrm, nrv = g.batchnorm(y, S, BI, RM, RV, 1e-3, 0.2)
    bni = g.batchnorm_inference(y, RM, RV, S, BI)
    dbx, dbs, dbb = g.batchnorm_backward(DY, y, S, mean, inv)
    m, k = rand(3, 5), rand(5, 7)
    M, K = g.tensor_like(m), g.tensor_like(k)
    mm = g.swish(g.matmul(M, K), swish_beta=1.7)
    red = g.reduction(mm, cudnn.reduction_mode.NORM2)
    red.set_dim([3, 1])
    ls, lb = rand(1, 7), rand(1, 7)
    LS, LB = g.tensor_like(ls), g.tensor_like(lb)
    ln, lmean, linv = g.layernorm(cudnn.norm_forward_phase.TRAINING, mm, LS, LB, 1.0e-5)
    lg = rand(3, 7)
    LG = g.tensor_like(lg)
    ldx, lds, ldb = g.layernorm_backward(LG, mm, LS, lmean, linv)
    rn, rinv = g.rmsnorm(cudnn.norm_forward_phase.TRAINING, mm, LS, LB, 1e-6)
    rdx, rds, rdb = g.rmsnorm_backward(LG, mm, LS, rinv, True)
    q = rand(1, 2, 4, 8)
    Q, KK, V, DO = (g.tensor_like(q + i) for i in range(4))
    o, stats = g.sdpa(Q, KK, V, attn_scale=0.3, use_causal_mask=True, generate_stats=True)
    dq, dk, dv = g.sdpa_backward(Q, KK, V, o, DO, stats, attn_scale=0.3, use_causal_mask=True)
    moved = g.transpose(mm, [1, 0])
    shaped = g.reshape(moved)
    shaped.set_dim([1, 21])
    sliced = g.slice(mm, [slice(0, 2), slice(1, 7, 2)])
    joined = g.concatenate([mm, mm], axis=0)
    chosen = g.binary_select(mm, mm, g.cmp_gt(mm, mm))
    inputs = {X4: x4, W: w, B: b, DY: dy, S: s, BI: bias, RM: rm, RV: rv, M: m, K: k, LS: ls, LB: lb, LG: lg}
    inputs.update({Q: q, KK: q + 1, V: q + 2, DO: q + 3})
    outputs = [y, dx, dw, bn, nrm, nrv, bni, dbx, dbs, dbb, red, ln, ldx, lds, ldb, rn, rdx, rds, rdb, o, dq, dk, dv,
               shaped, sliced, joined, chosen]  # fmt: skip
    return inputs, outputs


def test_every_op_round_trips_through_cudnn_json(graph):
    inputs, outputs = every_op(graph)
    for t in outputs:
        t.set_output(True)
    graph.build()
    data = graph.serialize()
    doc = json.loads(data)
    assert doc["json_version"] == "2.0" and {n["tag"] for n in doc["nodes"]} >= {
        "CONV_FPROP", "CONV_DGRAD", "CONV_WGRAD", "POINTWISE", "BATCHNORM", "BATCHNORM_INFERENCE", "DBN", "MATMUL",
        "REDUCTION", "LAYER_NORM", "LAYER_NORM_BPROP", "RMS_NORM", "RMS_NORM_BPROP", "SDPA", "SDPA_BWD",
        "TRANSPOSE", "RESHAPE", "SLICE", "CONCATENATE",
    }  # fmt: skip
    first = [torch.empty_strided(t.get_dim(), t.get_stride(), dtype=torch.float64) for t in outputs]
    graph.execute({**inputs, **dict(zip(outputs, first))}, None)
    again = cudnn.pygraph(handle=cudnn.create_handle(device="cpu"))
    again.deserialize(data)
    second = [torch.empty_strided(t.get_dim(), t.get_stride(), dtype=torch.float64) for t in outputs]
    pack = {t.get_uid(): v for t, v in inputs.items()} | {t.get_uid(): v for t, v in zip(outputs, second)}
    again.execute(pack, None)
    for a, b, t in zip(first, second, outputs):
        assert torch.equal(a, b), t.get_name()


def test_floats_are_written_as_cudnn_writes_them_unless_float32_would_round_them():
    assert real(1.0) == "3F800000" and real(-2.5) == "C0200000"
    assert real(0.1) == 0.1 and real(1e300) == 1e300


def test_an_op_without_a_cudnn_tag_is_named(graph):
    x = graph.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=F64)
    y, _ = graph.softmax(x)
    y.set_output(True)
    with pytest.raises(NotImplementedError, match="softmax"):
        graph.serialize()
