"""What the three mapping layers share: the one "unsupported ops" error, attribute refusal, fresh names."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, UsageError
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops import OP_CLASSES


class UnsupportedOps:
    """Every op a model uses that sigdnn does not map, counted, so one error can list them all."""

    def __init__(self, source: str, supported: Iterable[str]) -> None:
        self.source = source
        self.supported = sorted(supported)
        self.found: dict[str, list] = {}  # op -> [count, first node]

    def add(self, op: str, node: str) -> None:
        entry = self.found.setdefault(op, [0, node])
        entry[0] += 1

    def __bool__(self) -> bool:
        return bool(self.found)

    def error(self) -> GraphError:
        listed = "; ".join(
            f"{op} ({count} node{'s' if count > 1 else ''}, first '{first}')"
            for op, (count, first) in sorted(self.found.items())
        )
        return GraphError(
            f"{self.source}: {len(self.found)} unsupported op type(s): {listed}. Supported: {', '.join(self.supported)}"
        )


def refuse_unknown(where: str, given: Iterable[str], handled: Iterable[str], what: str = "attribute") -> None:
    """GraphError naming ``where`` when ``given`` holds names the mapping does not handle: never ignored silently."""
    unknown = sorted(set(given) - set(handled))
    if unknown:
        raise GraphError(f"{where}: unsupported {what}(s) {unknown}; sigdnn refuses them rather than ignore them")


class FreshNames:
    """Unique names derived from the source's (which may be empty or repeated)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, wanted: str, fallback: str) -> str:
        base = wanted or fallback
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name


def add_op(graph: Graph, kind: str, name: str, compute_dtype: DataType | None, where: str, **fields: Any) -> Node:
    """Append a node of op ``kind`` whose ports name existing tensors by uid (the formats that list tensors).

    The shape rules run when the finished graph is checked; a field the op
    cannot take is a GraphError naming the node.
    """
    try:
        op = OP_CLASSES[kind](**fields)
    except (TypeError, ValueError) as e:
        raise GraphError(f"{where}: bad attributes for sigdnn {kind}: {e}") from None
    node = Node(name, op, compute_dtype)
    graph.nodes.append(node)
    return node


def input_shape_overrides(given: Any) -> dict[str, tuple[int, ...]]:
    """``input_shapes`` checked: a mapping of input names to sequences of integer dims (2.5, "ab", None refused).

    A dim is taken as an integer only if it is one (``operator.index``): a
    float is never truncated and a bool is not a dim.
    """
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise UsageError(
            f"input_shapes: a mapping of input name to dims, e.g. {{'x': (1, 3, 224, 224)}}, got {given!r}"
        )
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in given.items():
        where = f"input_shapes[{name!r}]"
        if not isinstance(name, str):
            raise UsageError(f"{where}: input names are strings")
        if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence | np.ndarray):
            raise UsageError(f"{where}: a sequence of integer dims, e.g. (1, 3, 224, 224), got {dims!r}")
        shape = []
        for axis, d in enumerate(dims):
            try:
                if isinstance(d, (bool, np.bool_)):
                    raise TypeError
                shape.append(operator.index(d))
            except TypeError:
                raise UsageError(f"{where}: dim {axis} is {d!r}, not an integer") from None
        shapes[name] = tuple(shape)
    return shapes


def varlen_ports(
    refuse: Callable[[str], GraphError],
    lengths: tuple[int | None, int | None, Any],
    names: tuple[str, str],
    ragged: Mapping[int, int],
    placed: Mapping[str, int | None],
    gradients: Mapping[str, tuple[str, int | None]],
    consumed: set[int],
) -> dict[str, int | None]:
    """sigdnn's padding and ragged offset ports of an attention node, as hipDNN and cuDNN JSON both spell them.

    ``lengths``: the uids of the two length tensors and the padding flag (``names``: the format's spelling of the
    two); ``ragged``: tensor uid -> its offsets' uid; ``placed``: q, k, v, o -> uid; ``gradients``: a gradient ->
    (the tensor it is placed by, its uid). Every uid met joins ``consumed`` (an offset no attention node reads is
    refused by the reader).
    """
    lq, lkv, padding = lengths
    if padding and (lq is None or lkv is None):
        raise refuse(f"padding_mask needs both {names[0]} and {names[1]}")
    if not padding and (lq is not None or lkv is not None):
        raise refuse(f"{names[0]} / {names[1]} are given without padding_mask")
    ports: dict[str, int | None] = {"seq_len_q": lq, "seq_len_kv": lkv}
    for port, uid in placed.items():
        ports[f"{port}_ragged_offset"] = ragged.get(uid) if uid is not None else None
    for grad, (port, uid) in gradients.items():
        if uid is not None and ragged.get(uid) != ports[f"{port}_ragged_offset"]:
            raise refuse(f"{grad}'s ragged offsets differ from {port}'s (sigdnn places {grad} by {port}'s)")
    consumed.update(u for u in (*placed.values(), *(u for _, u in gradients.values())) if u is not None)
    return ports


def refuse_unread_ragged(
    graph: Graph, ragged: Mapping[int, int], consumed: set[int], format_words: tuple[str, str, str]
) -> None:
    """GraphError for the first tensor with ragged offsets that no attention node took (``varlen_ports``' ``consumed``).

    ``format_words``: the format's name for a tensor, how it says a tensor has offsets, the nodes that take them.
    """
    noun, what, ops = format_words
    unread = sorted(set(ragged) - consumed)
    if unread:
        t = graph.tensors[unread[0]]
        raise GraphError(
            f"{noun} {t.name!r} (uid {t.uid}) {what}, but no node reading it takes ragged offsets ({ops} do)"
        )


def band_fields(bottom_right: bool, left_bound: int | None, right_bound: int | None) -> dict[str, Any]:
    """An attention node's diagonal band (graph/ops/sdpa.py's ``Band``) as sdpa's fields, the causal band (a
    right bound 0 and no other) written as ``use_causal_mask``, the spelling the rest of sigdnn reads first."""
    causal = right_bound == 0
    return {
        "use_causal_mask": causal,
        "diagonal_bottom_right": bool(bottom_right),
        "left_bound": left_bound,
        "right_bound": None if causal else right_bound,
    }
