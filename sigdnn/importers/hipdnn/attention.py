"""hipDNN SdpaAttributes and SdpaBackwardAttributes -> sigdnn sdpa / sdpa_backward.

The diagonal band (``causal_mask``, ``causal_mask_bottom_right``,
``left_bound``, ``right_bound``, ``diagonal_alignment``) becomes sdpa's band
fields. Variable lengths: ``padding_mask`` with ``seq_len_q`` / ``seq_len_kv``, and
the ragged offsets hipDNN keeps on the tensors (``ragged_offset_tensor_uid``)
become sigdnn's padding ports and q / k / v / o ragged offset ports; a
gradient must share its forward tensor's offsets (sigdnn places dq, dk, dv
and d_o by q, k, v and o's).
"""

from __future__ import annotations

from typing import Any

from sigdnn.importers.common import band_fields, varlen_ports
from sigdnn.importers.hipdnn.mapping import NodeMapping, maps


def _attention_options(m: NodeMapping) -> tuple[float, dict[str, Any]]:
    """attn_scale (a value, or a pass-by-value tensor) and the diagonal band: the causal flags are a right bound 0
    aligned top-left / bottom-right, else the bounds with their alignment (0 top-left, 1 bottom-right)."""
    scale_uid, scale_value = m.get("scale", "attn_scale_value")
    if scale_uid is not None and scale_value is not None:
        raise m.refuse("give the attention scale as a tensor or a value, not both")
    scale = m.scalar("scale") if scale_uid is not None else (1.0 if scale_value is None else float(scale_value))
    causal, bottom_right, left, right, align = m.get(
        "causal_mask", "causal_mask_bottom_right", "left_bound", "right_bound", "diagonal_alignment"
    )
    if align not in (0, 1):
        raise m.refuse(f"unknown diagonal_alignment {align}")
    if causal and (bottom_right or align == 1):
        raise m.refuse("causal_mask is top-left aligned, but the band is set bottom-right")
    if (causal or bottom_right) and right is not None and right != 0:
        raise m.refuse(f"a causal mask and right_bound {right} both given")
    if causal or bottom_right:
        right = 0
    return scale, band_fields(bool(bottom_right) or align == 1, left, right)


def _varlen(
    m: NodeMapping, placed: dict[str, int | None], gradients: dict[str, tuple[str, int | None]]
) -> dict[str, int | None]:
    """The padding and ragged ports of an attention node (``placed``: q, k, v, o -> uid)."""
    lengths = m.get("seq_len_q", "seq_len_kv", "padding_mask")
    return varlen_ports(
        m.refuse, lengths, ("seq_len_q", "seq_len_kv"), m.reader.ragged, placed, gradients, m.reader.placed
    )


@maps("SdpaAttributes")
def _sdpa(m: NodeMapping) -> None:
    q, k, v, o, bias, stats, generate = m.get("q", "k", "v", "o", "attn_mask", "stats", "generate_stats")
    if m.get("mma_core_mode") != 0:
        raise m.refuse("mma_core_mode (fp8 attention) is not supported")
    if generate is not None and bool(generate) != (stats is not None):
        raise m.refuse("generate_stats disagrees with the presence of the stats tensor")
    scale, band = _attention_options(m)
    varlen = _varlen(m, {"q": q, "k": k, "v": v, "o": o}, {})
    m.add(
        "sdpa",
        **varlen,
        q=q,
        k=k,
        v=v,
        o=o,
        bias=bias,
        stats=stats,
        attn_scale=scale,
        **band,
        generate_stats=stats is not None,
    )


@maps("SdpaBackwardAttributes")
def _sdpa_backward(m: NodeMapping) -> None:
    names = ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv", "attn_mask")
    q, k, v, o, d_o, stats, dq, dk, dv, bias = m.get(*names)
    scale, band = _attention_options(m)
    gradients = {"dq": ("q", dq), "dk": ("k", dk), "dv": ("v", dv), "do": ("o", d_o)}
    varlen = _varlen(m, {"q": q, "k": k, "v": v, "o": o}, gradients)
    m.add(
        "sdpa_backward",
        **varlen,
        q=q,
        k=k,
        v=v,
        o=o,
        d_o=d_o,
        stats=stats,
        dq=dq,
        dk=dk,
        dv=dv,
        bias=bias,
        attn_scale=scale,
        **band,
    )
