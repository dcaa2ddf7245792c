"""hipDNN batchnorm, layernorm and RMSnorm tables (forward, inference and backward) -> sigdnn norms."""

from __future__ import annotations

from sigdnn.importers.hipdnn.mapping import NodeMapping, maps

NORM_PHASES = {0: None, 1: "inference", 2: "training"}


@maps("BatchnormInferenceAttributes")
def _batchnorm_inference(m: NodeMapping) -> None:
    m.add(
        "batchnorm_inference",
        **dict(
            zip(
                ("x", "mean", "inv_variance", "scale", "bias", "y"),
                m.get("x", "mean", "inv_variance", "scale", "bias", "y"),
            )
        ),
    )


@maps("BatchnormInferenceAttributesVarianceExt")
def _batchnorm_inference_variance(m: NodeMapping) -> None:
    """inv_variance = rsqrt(variance + epsilon) as two pointwise nodes, then batchnorm_inference."""
    x, mean, var, scale, bias, y = m.get("x", "mean", "variance", "scale", "bias", "y")
    eps_uid = m.get("epsilon")
    m.refuse_unused()
    t = {u: m.graph.tensors.get(u) for u in (var, eps_uid)}
    if None in t.values():
        raise m.refuse("variance / epsilon name no tensor of the graph")
    shifted = m.graph.pointwise("add", t[var], t[eps_uid], name=f"{m.name}/variance_plus_epsilon")
    inv = m.graph.pointwise("rsqrt", shifted, name=f"{m.name}/inv_variance")
    m.add("batchnorm_inference", x=x, mean=mean, inv_variance=inv.uid, scale=scale, bias=bias, y=y)


@maps("BatchnormBackwardAttributes")
def _batchnorm_backward(m: NodeMapping) -> None:
    if m.get("peer_stats"):
        raise m.refuse("peer_stats (multi-GPU statistics) are not supported")
    names = ("dy", "x", "scale", "mean", "inv_variance", "dx", "dscale", "dbias")
    ports = dict(zip(names, m.get(*names)))
    if ports["mean"] is None or ports["inv_variance"] is None:
        raise m.refuse("sigdnn's batchnorm_backward needs the saved mean and inv_variance")
    m.add("batchnorm_backward", **ports)


@maps("BatchnormAttributes")
def _batchnorm(m: NodeMapping) -> None:
    if m.get("peer_stats"):
        raise m.refuse("peer_stats (multi-GPU statistics) are not supported")
    x, scale, bias, y, mean, inv = m.get("x", "scale", "bias", "y", "mean", "inv_variance")
    run_mean, run_var, next_mean, next_var = m.get(
        "prev_running_mean", "prev_running_variance", "next_running_mean", "next_running_variance"
    )
    if mean is None or inv is None:
        raise m.refuse("sigdnn's training batchnorm writes mean and inv_variance: both must be present")
    momentum = m.scalar("momentum") if m.fields["momentum"] is not None else None
    m.used.add("momentum")
    m.add(
        "batchnorm",
        x=x,
        scale=scale,
        bias=bias,
        y=y,
        mean=mean,
        inv_variance=inv,
        epsilon=m.scalar("epsilon"),
        in_running_mean=run_mean,
        in_running_var=run_var,
        next_running_mean=next_mean,
        next_running_var=next_var,
        momentum=momentum,
    )


def _phase(m: NodeMapping, stats_present: bool) -> str:
    phase = NORM_PHASES.get(m.get("forward_phase"), "?")
    if phase == "?":
        raise m.refuse(f"unknown forward_phase {m.fields['forward_phase']}")
    return phase or ("training" if stats_present else "inference")


@maps("RMSNormAttributes")
def _rmsnorm(m: NodeMapping) -> None:
    x, scale, y, bias, inv = m.get("x", "scale", "y", "bias", "inv_rms")
    m.add(
        "rmsnorm",
        phase=_phase(m, inv is not None),
        x=x,
        scale=scale,
        y=y,
        bias=bias,
        inv_variance=inv,
        epsilon=m.scalar("epsilon"),
    )


def _check_normalized(m: NodeMapping, x: int, scale: int) -> None:
    """hipDNN counts the normalized (trailing) dims; sigdnn reads them off the scale: they must agree."""
    count = m.get("normalized_dim_count")
    xd, sd = m.dims(x), m.dims(scale)
    if len(xd) != len(sd):
        raise m.refuse(f"scale {list(sd)} must have x's rank {len(xd)}")
    from_scale = {i for i, (a, b) in enumerate(zip(xd, sd)) if a == b and a > 1}
    from_count = {i for i in range(len(xd) - count, len(xd)) if xd[i] > 1}
    if count < 0 or count > len(xd) or from_scale != from_count:
        raise m.refuse(f"normalized_dim_count {count} disagrees with scale {list(sd)} over x {list(xd)}")


@maps("LayernormAttributes")
def _layernorm(m: NodeMapping) -> None:
    x, scale, bias, y, mean, inv = m.get("x", "scale", "bias", "y", "mean", "inv_variance")
    _check_normalized(m, x, scale)
    m.add(
        "layernorm",
        phase=_phase(m, mean is not None),
        x=x,
        scale=scale,
        bias=bias,
        y=y,
        mean=mean,
        inv_variance=inv,
        epsilon=m.scalar("epsilon"),
    )


@maps("LayernormBackwardAttributes")
def _layernorm_backward(m: NodeMapping) -> None:
    names = ("dy", "x", "scale", "mean", "inv_variance", "dx", "dscale", "dbias")
    ports = dict(zip(names, m.get(*names)))
    m.used.add("epsilon")  # the saved inv_variance already holds it
    if ports["mean"] is None or ports["inv_variance"] is None:
        raise m.refuse("sigdnn's layernorm_backward needs the saved mean and inv_variance")
    _check_normalized(m, ports["x"], ports["scale"])
    m.add("layernorm_backward", **ports)


@maps("RMSNormBackwardAttributes")
def _rmsnorm_backward(m: NodeMapping) -> None:
    dy, x, scale, inv, dx, dscale, dbias = m.get("dy", "x", "scale", "inv_rms", "dx", "dscale", "dbias")
    m.add(
        "rmsnorm_backward",
        dy=dy,
        x=x,
        scale=scale,
        inv_variance=inv,
        dx=dx,
        dscale=dscale,
        dbias=dbias,
        has_dbias=dbias is not None,
    )
