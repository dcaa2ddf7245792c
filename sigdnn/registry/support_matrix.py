"""The support matrix: which library's builders take each op in each dtype, read off the registry.

For every op and dtype, the op's own ``sample`` node is built in a graph
whose io dtype is that dtype (an op that refuses the dtype gets no cell), and
each registered builder is asked whether it ``serves`` the node's signature
key. A builder may write its outputs in another dtype than it reads (fp8
GEMMs write 16-bit or float32) or compute in another, so the key is also
tried with the outputs that followed the io dtype in float32, float16 or
bfloat16, with float32 compute, and without the optional inputs the sample
gave. ``serves`` is declarative (keys only),
so the matrix needs no GPU and no GPU library: it says what each library is
written for, and a builder's ``check`` may still decline a shape or layout.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from sigdnn.dtypes import as_data_type
from sigdnn.errors import SigdnnError
from sigdnn.graph.graph import Graph
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.registry.contracts import PlanBuilder
from sigdnn.registry.registry import DEFAULT_REGISTRY, Registry
from sigdnn.signature_keys import SignatureKey, key_for

DTYPES = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "fp8_e4m3",
    "fp8_e5m2",
    "int8",
    "uint8",
    "int32",
    "int64",
    "bool",
)
LIBRARY_MARKS = {"reference": "R", "cutile": "T", "cute": "C"}  # other libraries: their name
# Left out: the GPU reference (validation's truth on the GPU) serves every key the CPU reference does, so its
# column would repeat R's; its few declines (the erf-based pointwise modes) are in docs/gpu_reference.md.
NOT_IN_MATRIX = ("gpu_reference",)
WIDER_OUTPUTS = ("float32", "float16", "bfloat16")
REGENERATE = "sigdnn builders --matrix (paste it between the README's support-matrix markers)"

Row = tuple[str, dict[str, tuple[str, ...] | None]]  # (op, dtype -> libraries serving it, or None: no such node)


def _keys(key: SignatureKey, io_dtype: str, optional: frozenset[str]) -> list[SignatureKey]:
    """The node's key and its variants: without the optional inputs the sample gave (a builder may take the op
    only without them), with the io-dtype outputs in a wider dtype, with float32 compute."""
    io = as_data_type(io_dtype)
    found = [key, attrs.evolve(key, inputs=tuple((p, d) for p, d in key.inputs if p not in optional))]
    for base in list(found):
        for wide in map(as_data_type, WIDER_OUTPUTS):
            found.append(attrs.evolve(base, outputs=tuple((p, wide if d == io else d) for p, d in base.outputs)))
    return found + [attrs.evolve(k, compute=as_data_type("float32")) for k in found]


def _sample_key(kind: str, dtype: str) -> SignatureKey | None:
    """The signature key of the op's sample node in ``dtype``, or None when the op takes no such tensors."""
    graph = Graph(f"{kind}_{dtype}", io_dtype=dtype, compute_dtype="float32")
    try:
        node = OP_CLASSES[kind].sample(graph)
    except SigdnnError:
        return None
    return key_for(node, graph)


def _serving_libraries(builders: list[PlanBuilder], keys: list[SignatureKey]) -> tuple[str, ...]:
    libraries = {b.library for b in builders if any(b.serves(k) for k in keys)}
    order = list(LIBRARY_MARKS)
    return tuple(sorted(libraries, key=lambda lib: (order.index(lib) if lib in order else len(order), lib)))


def support_rows(registry: Registry = DEFAULT_REGISTRY, kinds: Iterable[str] | None = None) -> list[Row]:
    """One row per op (``kinds``, default every defined op; sorted): for each of DTYPES the libraries whose
    builders serve it, or None."""
    builders = [b for b in registry.builders() if b.library not in NOT_IN_MATRIX]
    rows = []
    for kind in sorted(OP_CLASSES if kinds is None else kinds):
        serving = [b for b in builders if kind in b.ops]
        cells: dict[str, tuple[str, ...] | None] = {}
        for dtype in DTYPES:
            key = _sample_key(kind, dtype)
            cells[dtype] = (
                None
                if key is None
                else _serving_libraries(serving, _keys(key, dtype, OP_CLASSES[kind].optional_ports()))
            )
        rows.append((kind, cells))
    return rows


def _cell(libraries: tuple[str, ...] | None) -> str:
    if libraries is None:
        return ""
    return " ".join(LIBRARY_MARKS.get(lib, lib) for lib in libraries) or "-"


def markdown_table(registry: Registry = DEFAULT_REGISTRY, kinds: Iterable[str] | None = None) -> str:
    """The matrix as a markdown table: R reference (CPU), T cuTile, C CuTe DSL; blank: the op takes no such dtype."""
    lines = [f"| op | {' | '.join(DTYPES)} |", "|---|" + "---|" * len(DTYPES)]
    for kind, cells in support_rows(registry, kinds):
        lines.append(f"| {kind} | {' | '.join(_cell(cells[d]) for d in DTYPES)} |")
    return "\n".join(lines) + "\n"
