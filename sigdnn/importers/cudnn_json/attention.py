"""SDPA and SDPA_BWD nodes -> sigdnn sdpa / sdpa_backward."""

from __future__ import annotations

from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps


def _attention(m: NodeMapping, q: int, k: int) -> tuple[float, bool]:
    scale_value = m.real("attn_scale_value")
    scale_tensor = m.scalar("Attn_scale", False)
    if scale_value is not None and scale_tensor is not None:
        raise m.refuse("give the attention scale as a tensor or a value, not both")
    scale = scale_tensor if scale_tensor is not None else (1.0 if scale_value is None else scale_value)
    for flag in ("alibi_mask", "padding_mask"):
        if R.boolean(m.attr(flag), f"{m.where} {flag}"):
            raise m.refuse(f"{flag} is not supported")
    if m.real("dropout_probability") not in (None, 0.0):
        raise m.refuse("dropout is not supported")
    left, right = m.attr("left_bound"), m.attr("right_bound")
    align = m.attr("diagonal_alignment", "TOP_LEFT")
    if left is not None:
        raise m.refuse("a sliding window (left_bound) is not supported")
    if right is not None and R.int_(right, f"{m.where} right_bound") != 0:
        raise m.refuse(f"right_bound {right}: only the causal band (0) is supported")
    if align not in ("TOP_LEFT", "BOTTOM_RIGHT"):
        raise m.refuse(f"unknown diagonal_alignment {align!r}")
    if right is not None and align == "BOTTOM_RIGHT" and m.tensor(q).dims[2] != m.tensor(k).dims[2]:
        raise m.refuse("a bottom-right causal mask with Sq != Skv is not supported (sigdnn's is top-left)")
    for hint in ("max_total_seq_len_q", "max_total_seq_len_kv", "max_seq_len_kv"):
        if m.attr(hint) is not None:
            raise m.refuse(f"{hint} (ragged / paged attention) is not supported")
    return float(scale), right is not None


@maps("SDPA")
def _sdpa(m: NodeMapping) -> None:
    q, k = m.input("Q"), m.input("K")
    scale, causal = _attention(m, q, k)  # type: ignore[arg-type]
    stats = m.output("Stats", False)
    generate = m.attr("generate_stats")
    if generate is not None and R.boolean(generate, f"{m.where} generate_stats") != (stats is not None):
        raise m.refuse("generate_stats disagrees with the presence of the Stats output")
    if R.boolean(m.attr("stats_use_log2"), f"{m.where} stats_use_log2"):
        raise m.refuse("stats_use_log2 is not supported (sigdnn's stats are natural-log)")
    if m.attr("mma_core_mode") not in (None,):
        raise m.refuse("mma_core_mode (fp8 attention) is not supported")
    m.attr("implementation")
    m.add(
        "sdpa",
        q=q,
        k=k,
        v=m.input("V"),
        o=m.output("O"),
        bias=m.input("Bias", False),
        stats=stats,
        attn_scale=scale,
        use_causal_mask=causal,
        generate_stats=stats is not None,
    )


@maps("SDPA_BWD")
def _sdpa_backward(m: NodeMapping) -> None:
    q, k = m.input("Q"), m.input("K")
    scale, causal = _attention(m, q, k)  # type: ignore[arg-type]
    m.attr("is_deterministic_algorithm")  # the reference is deterministic whatever is asked
    m.add(
        "sdpa_backward",
        q=q,
        k=k,
        v=m.input("V"),
        o=m.input("O"),
        d_o=m.input("dO"),
        stats=m.input("Stats"),
        dq=m.output("dQ"),
        dk=m.output("dK"),
        dv=m.output("dV"),
        bias=m.input("Bias", False),
        attn_scale=scale,
        use_causal_mask=causal,
    )
