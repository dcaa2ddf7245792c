"""hipDNN SdpaAttributes and SdpaBackwardAttributes -> sigdnn sdpa / sdpa_backward.

Variable lengths: ``padding_mask`` with ``seq_len_q`` / ``seq_len_kv``, and
the ragged offsets hipDNN keeps on the tensors (``ragged_offset_tensor_uid``)
become sigdnn's padding ports and q / k / v / o ragged offset ports; a
gradient must share its forward tensor's offsets (sigdnn places dq, dk, dv
and d_o by q, k, v and o's).
"""

from __future__ import annotations

from sigdnn.importers.common import varlen_ports
from sigdnn.importers.hipdnn.mapping import NodeMapping, maps


def _attention_options(m: NodeMapping, q: int, k: int) -> tuple[float, bool]:
    """attn_scale (a value, or a pass-by-value tensor) and whether the causal mask is on."""
    scale_uid, scale_value = m.get("scale", "attn_scale_value")
    if scale_uid is not None and scale_value is not None:
        raise m.refuse("give the attention scale as a tensor or a value, not both")
    scale = m.scalar("scale") if scale_uid is not None else (1.0 if scale_value is None else float(scale_value))
    causal, bottom_right, left, right, align = m.get(
        "causal_mask", "causal_mask_bottom_right", "left_bound", "right_bound", "diagonal_alignment"
    )
    if left is not None:
        raise m.refuse("a sliding window (left_bound) is not supported")
    if right is not None and right != 0:
        raise m.refuse(f"right_bound {right}: only the causal band (0) is supported")
    bottom_right = bottom_right or (right == 0 and align == 1)
    if align not in (0, 1):
        raise m.refuse(f"unknown diagonal_alignment {align}")
    if bottom_right and m.dims(q)[2] != m.dims(k)[2]:
        raise m.refuse("a bottom-right causal mask with Sq != Skv is not supported (sigdnn's is top-left)")
    return scale, bool(causal or bottom_right or right == 0)


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
    scale, causal = _attention_options(m, q, k)
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
        use_causal_mask=causal,
        generate_stats=stats is not None,
    )


@maps("SdpaBackwardAttributes")
def _sdpa_backward(m: NodeMapping) -> None:
    names = ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv", "attn_mask")
    q, k, v, o, d_o, stats, dq, dk, dv, bias = m.get(*names)
    scale, causal = _attention_options(m, q, k)
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
        use_causal_mask=causal,
    )
