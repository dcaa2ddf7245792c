"""BATCHNORM, BATCHNORM_INFERENCE, DBN, LAYER_NORM(_BPROP) and RMS_NORM(_BPROP) nodes -> sigdnn norms."""

from __future__ import annotations

from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps


def _no_peer_stats(m: NodeMapping) -> None:
    if R.array(m.attr("peer_stats", []), f"{m.where} peer_stats"):
        raise m.refuse("peer_stats (multi-GPU statistics) are not supported")


@maps("BATCHNORM")
def _batchnorm(m: NodeMapping) -> None:
    _no_peer_stats(m)
    running = m.input("PREV_RUNNING_MEAN", False)
    m.add(
        "batchnorm",
        x=m.input("X"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS"),
        y=m.output("Y"),
        mean=m.output("MEAN"),
        inv_variance=m.output("INV_VARIANCE"),
        epsilon=m.scalar("EPSILON"),
        in_running_mean=running,
        in_running_var=m.input("PREV_RUNNING_VAR", False),
        next_running_mean=m.output("NEXT_RUNNING_MEAN", False),
        next_running_var=m.output("NEXT_RUNNING_VAR", False),
        momentum=m.scalar("MOMENTUM", False),
    )


@maps("BATCHNORM_INFERENCE")
def _batchnorm_inference(m: NodeMapping) -> None:
    m.add(
        "batchnorm_inference",
        x=m.input("X"),
        mean=m.input("MEAN"),
        inv_variance=m.input("INV_VARIANCE"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS"),
        y=m.output("Y"),
    )


@maps("DBN")
def _batchnorm_backward(m: NodeMapping) -> None:
    _no_peer_stats(m)
    m.add(
        "batchnorm_backward",
        dy=m.input("DY"),
        x=m.input("X"),
        scale=m.input("SCALE"),
        mean=m.input("MEAN"),
        inv_variance=m.input("INV_VARIANCE"),
        dx=m.output("DX"),
        dscale=m.output("DSCALE"),
        dbias=m.output("DBIAS"),
    )


def _phase(m: NodeMapping, stats: bool) -> str:
    phase = m.attr("forward_phase")
    if phase not in (None, "TRAINING", "INFERENCE"):
        raise m.refuse(f"unknown forward_phase {phase!r}")
    return phase.lower() if phase else ("training" if stats else "inference")


@maps("LAYER_NORM")
def _layernorm(m: NodeMapping) -> None:
    mean = m.output("MEAN", False)
    m.add(
        "layernorm",
        phase=_phase(m, mean is not None),
        x=m.input("X"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS"),
        y=m.output("Y"),
        mean=mean,
        inv_variance=m.output("INV_VARIANCE", False),
        epsilon=m.scalar("EPSILON"),
    )


@maps("LAYER_NORM_BPROP")
def _layernorm_backward(m: NodeMapping) -> None:
    m.input("EPSILON", False)  # the saved inv_variance already holds it
    m.add(
        "layernorm_backward",
        dy=m.input("DY"),
        x=m.input("X"),
        scale=m.input("SCALE"),
        mean=m.input("MEAN"),
        inv_variance=m.input("INV_VARIANCE"),
        dx=m.output("DX"),
        dscale=m.output("DSCALE"),
        dbias=m.output("DBIAS"),
    )


@maps("RMS_NORM")
def _rmsnorm(m: NodeMapping) -> None:
    inv = m.output("INV_VARIANCE", False)
    m.add(
        "rmsnorm",
        phase=_phase(m, inv is not None),
        x=m.input("X"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS", False),
        y=m.output("Y"),
        inv_variance=inv,
        epsilon=m.scalar("EPSILON"),
    )


@maps("RMS_NORM_BPROP")
def _rmsnorm_backward(m: NodeMapping) -> None:
    dbias = m.output("DBIAS", False)
    m.add(
        "rmsnorm_backward",
        dy=m.input("DY"),
        x=m.input("X"),
        scale=m.input("SCALE"),
        inv_variance=m.input("INV_VARIANCE"),
        dx=m.output("DX"),
        dscale=m.output("DSCALE"),
        dbias=dbias,
        has_dbias=dbias is not None,
    )
