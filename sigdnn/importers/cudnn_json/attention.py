"""SDPA and SDPA_BWD nodes -> sigdnn sdpa / sdpa_backward.

The diagonal band (``left_bound``, ``right_bound``, ``diagonal_alignment``)
becomes sdpa's band fields, a right bound 0 alone its causal mask.
Variable lengths: ``padding_mask`` with the SEQ_LEN_Q / SEQ_LEN_KV inputs,
and the tensors' ``ragged_offset_uid`` for Q, K, V, O become sigdnn's
padding and ragged offset ports (the max_total_seq_len hints size cuDNN's
workspace and are read and dropped); a gradient must share its forward
tensor's offsets, as sigdnn places dQ, dK, dV and dO by Q, K, V and O's.
"""

from __future__ import annotations

from typing import Any

from sigdnn.importers.common import band_fields, varlen_ports
from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps


def _attention(m: NodeMapping) -> tuple[float, dict[str, Any]]:
    scale_value = m.real("attn_scale_value")
    scale_tensor = m.scalar("Attn_scale", False)
    if scale_value is not None and scale_tensor is not None:
        raise m.refuse("give the attention scale as a tensor or a value, not both")
    scale = scale_tensor if scale_tensor is not None else (1.0 if scale_value is None else scale_value)
    if R.boolean(m.attr("alibi_mask"), f"{m.where} alibi_mask"):
        raise m.refuse("alibi_mask is not supported")
    if m.real("dropout_probability") not in (None, 0.0):
        raise m.refuse("dropout is not supported")
    left, right = m.attr("left_bound"), m.attr("right_bound")
    align = m.attr("diagonal_alignment", "TOP_LEFT")
    if align not in ("TOP_LEFT", "BOTTOM_RIGHT"):
        raise m.refuse(f"unknown diagonal_alignment {align!r}")
    left = None if left is None else R.int_(left, f"{m.where} left_bound")
    right = None if right is None else R.int_(right, f"{m.where} right_bound")
    if m.attr("max_seq_len_kv") is not None:
        raise m.refuse("max_seq_len_kv (paged attention) is not supported")
    for hint in ("max_total_seq_len_q", "max_total_seq_len_kv"):
        m.attr(hint)
    return float(scale), band_fields(align == "BOTTOM_RIGHT", left, right)


def _varlen(m: NodeMapping, placed: dict[str, int | None], gradients: dict[str, tuple[str, int | None]]) -> dict:
    """sigdnn's padding and ragged offset ports of an attention node (``placed``: q, k, v, o -> uid)."""
    padding = R.boolean(m.attr("padding_mask"), f"{m.where} padding_mask")
    lengths = (m.input("SEQ_LEN_Q", False), m.input("SEQ_LEN_KV", False), padding)
    importer = m.importer
    return varlen_ports(
        m.refuse, lengths, ("SEQ_LEN_Q", "SEQ_LEN_KV"), importer.ragged, placed, gradients, importer.placed
    )


@maps("SDPA")
def _sdpa(m: NodeMapping) -> None:
    q, k = m.input("Q"), m.input("K")
    scale, band = _attention(m)
    stats = m.output("Stats", False)
    generate = m.attr("generate_stats")
    if generate is not None and R.boolean(generate, f"{m.where} generate_stats") != (stats is not None):
        raise m.refuse("generate_stats disagrees with the presence of the Stats output")
    if R.boolean(m.attr("stats_use_log2"), f"{m.where} stats_use_log2"):
        raise m.refuse("stats_use_log2 is not supported (sigdnn's stats are natural-log)")
    if m.attr("mma_core_mode") not in (None,):
        raise m.refuse("mma_core_mode (fp8 attention) is not supported")
    m.attr("implementation")
    v, o = m.input("V"), m.output("O")
    m.add(
        "sdpa",
        **_varlen(m, {"q": q, "k": k, "v": v, "o": o}, {}),
        q=q,
        k=k,
        v=v,
        o=o,
        bias=m.input("Bias", False),
        stats=stats,
        attn_scale=scale,
        **band,
        generate_stats=stats is not None,
    )


@maps("SDPA_BWD")
def _sdpa_backward(m: NodeMapping) -> None:
    q, k = m.input("Q"), m.input("K")
    scale, band = _attention(m)
    m.attr("is_deterministic_algorithm")  # the reference is deterministic whatever is asked
    v, o, d_o = m.input("V"), m.input("O"), m.input("dO")
    dq, dk, dv = m.output("dQ"), m.output("dK"), m.output("dV")
    gradients = {"dQ": ("q", dq), "dK": ("k", dk), "dV": ("v", dv), "dO": ("o", d_o)}
    m.add(
        "sdpa_backward",
        **_varlen(m, {"q": q, "k": k, "v": v, "o": o}, gradients),
        q=q,
        k=k,
        v=v,
        o=o,
        d_o=d_o,
        stats=m.input("Stats"),
        dq=dq,
        dk=dk,
        dv=dv,
        bias=m.input("Bias", False),
        attn_scale=scale,
        **band,
    )
