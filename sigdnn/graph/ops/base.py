"""Op: the small base class every op derives from, and the declaration it reads.

An op module declares, in one class: its wire fields (ports and attributes,
in schema order), which ports are inputs and outputs (some optional), its
shape rule, the structural traits its signature key carries, what
validation needs to judge each output, and a bound on the work one node
may cost. Everything generic — the op list, signature keys, wire reads and
writes, tolerances — is derived from that declaration, once per op class.
Adding an op is: its table in schemas/, its module here, a builder module
per library, tests.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError
from sigdnn.graph.limits import Limits
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.wire_reader import Table, slots_of

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node

# Wire field kinds. Ports name tensors by uid: "uid" (required port),
# "uid?" (optional port), "uid[]" (a variable number of input ports: field
# ``x`` holding n uids is the ports ``x_0`` .. ``x_{n-1}``). Attributes: "i64", "f64", "bool" (with the
# schema's default), "i64?" / "f64?" (absent reads as None), "i64[]",
# "f64[]" (vectors), "enum" (a name from the op's ``enums`` table, stored as
# the schema enum's short value).
WireFields = tuple[tuple[str, str], ...]
_SCALAR_KINDS = {"uid": "i64", "uid?": "i64", "i64": "i64", "i64?": "i64", "f64": "f64", "f64?": "f64", "bool": "bool"}
_DEFAULTS = {"uid": 0, "i64": 0, "f64": 0.0, "bool": False}
_PREPEND = {"i64": "PrependInt64Slot", "f64": "PrependFloat64Slot", "bool": "PrependBoolSlot"}

OP_CLASSES: dict[str, type[Op]] = {}  # kind -> class, filled as op modules are imported


def camel(name: str) -> str:
    """flatc's accessor name for a snake_case field (``in_0`` -> ``In0``)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


@attrs.frozen
class Codec:
    """An op class's wire layout, computed once: slot and enum values per field."""

    slots: tuple[int, ...]  # per wire field
    slot_count: int
    enum_values: dict[str, dict[str, int]]  # field -> name -> wire value
    enum_names: dict[str, dict[int, str]]  # field -> wire value -> name
    member: int  # the NodeAttributes union member


@attrs.frozen
class Op:
    """Attributes of one node: port uids plus op parameters.

    Subclasses declare the ClassVars below and the attrs fields they name.
    ``table`` is the generated schema table's name; an op without one
    (``table = None``, e.g. one defined in a test) numbers its wire slots
    in declaration order and must give its union member in ``wire_member``.
    """

    kind: ClassVar[str]
    table: ClassVar[str | None]
    wire_member: ClassVar[int | None] = None
    input_ports: ClassVar[tuple[str, ...]]
    output_ports: ClassVar[tuple[str, ...]]
    wire_fields: ClassVar[WireFields]
    enums: ClassVar[dict[str, tuple[str, ...]]] = {}
    key_attributes: ClassVar[tuple[str, ...]] = ()  # attributes that choose code paths (go into the key)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            OP_CLASSES[cls.kind] = cls  # attrs re-creates the class: the last one (the real one) wins

    # -- ports ---------------------------------------------------------------
    @classmethod
    def optional_ports(cls) -> frozenset[str]:
        return frozenset(f for f, kind in cls.wire_fields if kind == "uid?")

    @classmethod
    def vector_ports(cls) -> frozenset[str]:
        """Input fields of kind "uid[]": each holds several ports (``x`` -> ``x_0``, ``x_1``, ...)."""
        return _vector_ports(cls)

    def inputs(self) -> dict[str, int]:
        """Input port -> uid, present ports only, in port order (a vector field's ports in its order)."""
        vectors = _vector_ports(type(self))
        if not vectors:
            return {p: uid for p in self.input_ports if (uid := getattr(self, p)) is not None}
        found: dict[str, int] = {}
        for p in self.input_ports:
            value = getattr(self, p)
            if p in vectors:
                found.update({f"{p}_{i}": uid for i, uid in enumerate(value)})
            elif value is not None:
                found[p] = value
        return found

    def outputs(self) -> dict[str, int]:
        """Output port -> uid, present ports only, in port order."""
        return {p: uid for p in self.output_ports if (uid := getattr(self, p)) is not None}

    def ports(self) -> dict[str, int]:
        return {**self.inputs(), **self.outputs()}

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        """Add a small valid node of this op to ``graph`` (io dtype set) and return it.

        Part of the op's definition: the conformance suite checks every op
        through it, so a new op is tested by existing.
        """
        raise NotImplementedError(f"op {cls.__name__} gives no sample")

    # -- rules ---------------------------------------------------------------
    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        """Output port -> dims for every output this node produces; GraphError if the inputs don't fit.

        The ports returned are exactly the outputs the node must have: an
        optional output is produced when the attributes or the present
        inputs ask for it (a stats flag, running statistics, ...).
        """
        raise NotImplementedError

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        """Extra rules beyond dims (dtypes, attribute ranges); GraphError on failure."""

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        """The dtype a new output gets when the caller sets none; None: the graph default."""
        return None

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """Memory a node needs beyond its tensors, where attributes (not dims) can make it huge.

        Checked against the limits before anything is allocated; GraphError
        when the op's own cost limit is exceeded.
        """
        return 0

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Element operations one run of this node costs (ports -> tensors, outputs included).

        Checked against ``Limits.max_work`` at prepare, so a small buffer
        cannot buy unbounded time. The default fits ops that touch each
        element a bounded number of times.
        """
        return sum(t.size for t in tensors.values())

    def elementwise(self) -> bool:
        """Whether each output element reads only the same-index (broadcast) input elements."""
        return False

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """Strides for a new output; None means packed row-major."""
        return None

    def unspecified(self, values: Mapping[str, np.ndarray], tensors: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
        """Output port -> bool mask (logical dims): elements the op leaves unspecified for these input values.

        Validation does not compare them (attention's padding rows, a ragged buffer past its sequences).
        ``values`` holds the node's input values by port, ``tensors`` every port's tensor.
        """
        return {}

    def random_inputs(
        self, tensors: Mapping[str, Tensor], rng: np.random.Generator, given: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Input port -> values for ports whose meaning constrains them (lengths, offsets, gates).

        Validation's random inputs take these; every other input is drawn generically. ``given``: port ->
        what earlier nodes drew for that tensor; the last node's draw is kept, so a draw that depends on
        another (offsets packed for lengths) keeps what it is handed and makes room for what came before.
        """
        return {}

    # -- keys and validation -------------------------------------------------
    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        """Structural traits the signature key carries: the declared key attributes, plus what subclasses add."""
        return tuple((a, getattr(self, a)) for a in self.key_attributes)

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """How many input terms one element of output ``port`` accumulates (1: none).

        Validation grows its tolerance with it, as hipDNN's dynamic
        tolerances do.
        """
        return 1

    sums_absolute_terms: ClassVar[bool] = False
    """True when running the op on |inputs| gives sum|terms| per output (linear ops: matmul, conv)."""

    dot_products: ClassVar[bool] = False
    """True when each output element sums products of two inputs' elements (matmul, conv): the ops tensor cores
    run, whose fp8 forms accumulate with fewer bits than float32 (validation's fp8 rule)."""

    probability_weighted: ClassVar[Mapping[str, str]] = {}
    """Output port -> the input port it averages with probability weights (attention: o = softmax(q k^T) v).
    An element's sum|terms| is then at most max|input|, and a device may round the weights to the input's dtype
    before the product, as flash attention and cuDNN do (the tensor cores take 16-bit operands): validation
    allows half an ulp of that dtype per weight, i.e. eps / 2 * max|input|."""

    rounded_operands: ClassVar[Mapping[str, str]] = {}
    """Output port -> the input port to whose dtype a device may round the intermediate operands of the output's
    products (attention's backward: p before dv = p^T d_o, ds before dq = ds k and dk = ds^T q, as flash attention
    and cuDNN do for the tensor cores). Each term may then be off by half an ulp of that dtype; taken normwise like
    the output's accumulation bound, validation allows eps / 2 * max|output|."""

    float32_sums: ClassVar[bool] = False
    """True when the compute dtype sets only the precision of the products' operands, and every sum and state
    is float32 at least (the gated delta rules: bf16 or TF32 products on the tensor cores, as flash-linear-attention's
    kernels). A sum's rounding then grows with its length at float32's epsilon, not the compute dtype's, and the
    rounded operands add a few ulps of the compute dtype whatever the length (``PRODUCT_OPERAND_ULPS``)."""

    score_operands: ClassVar[tuple[str, ...]] = ()
    """The input ports whose dot products are scores every output is made from through a softmax (attention:
    s = scale q k^T; o and stats from its softmax, the gradients from the weights they recompute). A device's
    scores are off by their dot product's accumulation error, and the softmax makes that a relative error of
    every weight: at logits in the hundreds an exact float32 kernel's outputs move far more than their own
    rounding. Validation measures how far (``accuracy.step_reference``)."""

    def score_terms(self, tensors: Mapping[str, Tensor]) -> int:
        """How many products each score sums (the head dim), for ops with ``score_operands``."""
        raise NotImplementedError(f"{self.kind} has no scores")

    moves_data: ClassVar[bool] = False
    """True when each output element is a copy of one input element (reshape, transpose, slice, concatenate):
    validation moves a per-element error bound with the values by running the op on the bounds."""

    # -- wire ----------------------------------------------------------------
    @classmethod
    def codec(cls) -> Codec:
        return _codec(cls)

    def wire_value(self, field: str) -> Any:
        """The value to write for ``field`` (enum names become their wire values)."""
        value = getattr(self, field)
        if field in self.enums and value is not None:
            return self.codec().enum_values[field][value]
        return value

    def to_fb(self, builder: Any) -> int:
        """Write this table with the generic FlatBuffers builder; returns its offset."""
        codec = self.codec()
        vectors = {}
        for field, kind in self.wire_fields:
            if kind in ("i64[]", "f64[]", "uid[]"):
                dtype = "<f8" if kind == "f64[]" else "<i8"
                vectors[field] = builder.CreateNumpyVector(np.asarray(getattr(self, field), dtype=dtype))
        builder.StartObject(codec.slot_count)
        for (field, kind), slot in zip(self.wire_fields, codec.slots):
            if field in vectors:
                builder.PrependUOffsetTRelativeSlot(slot, vectors[field], 0)
                continue
            value = self.wire_value(field)
            if value is None:
                continue
            if kind == "enum":
                builder.PrependInt16Slot(slot, value, 0)
            else:
                base = _SCALAR_KINDS[kind]
                getattr(builder, _PREPEND[base])(slot, value, _DEFAULTS.get(kind))
        return builder.EndObject()

    @classmethod
    def from_fb(cls, table: Table, where: str, limits: Limits) -> Op:
        """Read the attribute table; SchemaError names ``where``.

        Attribute vectors are per axis (at most ``max_rank`` entries); a uid
        vector names tensors (at most ``max_tensors``).
        """
        codec = cls.codec()
        values: dict[str, Any] = {}
        for (field, kind), slot in zip(cls.wire_fields, codec.slots):
            if kind == "i64[]":
                values[field] = table.int64s(slot, limits.max_rank)
            elif kind == "uid[]":
                values[field] = table.int64s(slot, limits.max_tensors)
            elif kind == "f64[]":
                values[field] = table.float64s(slot, limits.max_rank)
            elif kind == "enum":
                raw = table.scalar(slot, "i16", 0)
                name = codec.enum_names[field].get(raw)
                if name is None:
                    raise SchemaError(f"{where}: unknown {cls.kind} {field} {raw}")
                values[field] = name
            else:
                values[field] = table.scalar(slot, _SCALAR_KINDS[kind], _DEFAULTS.get(kind))
        return cls(**values)


@functools.cache
def _codec(cls: type[Op]) -> Codec:
    """Slots from the generated table (the schema is the source) or, schema-free, from declaration order."""
    fields = [f for f, _ in cls.wire_fields]
    enum_values: dict[str, dict[str, int]] = {}
    if cls.table is None:
        slots = tuple(range(len(fields)))
        count = len(fields)
        for field, names in cls.enums.items():
            enum_values[field] = {n: i for i, n in enumerate(names)}
    else:
        module = importlib.import_module(f"sigdnn.schemas.{cls.table}")
        by_name = slots_of(module)
        missing = [f for f in fields if camel(f) not in by_name]
        if missing:
            raise TypeError(f"op {cls.__name__}: fields {missing} are not in schema table {cls.table}")
        slots = tuple(by_name[camel(f)] for f in fields)
        count = max(by_name.values(), default=-1) + 1
        for field, names in cls.enums.items():
            enum_class = _schema_enum(cls, field)
            enum_values[field] = {n: getattr(enum_class, n.upper()) for n in names}
    names = {field: {v: n for n, v in table.items()} for field, table in enum_values.items()}
    return Codec(slots, count, enum_values, names, wire_member(cls))


def wire_member(cls: type[Op]) -> int:
    """The op's NodeAttributes union member: its schema table's, or the one a schema-free op declares.

    Reading a graph needs only this of each op, not its whole codec (which imports the op's schema modules).
    """
    if cls.table is None:
        if cls.wire_member is None:
            raise TypeError(f"op {cls.__name__} has no schema table, so it must declare wire_member")
        return cls.wire_member
    from sigdnn.schemas.NodeAttributes import NodeAttributes

    return getattr(NodeAttributes, cls.table)


@functools.cache
def _vector_ports(cls: type[Op]) -> frozenset[str]:
    return frozenset(f for f, kind in cls.wire_fields if kind == "uid[]")


def _schema_enum(cls: type[Op], field: str) -> Any:
    """The generated enum class behind an enum field: named in ``enum_types`` or ``<Op><Field>``."""
    name = getattr(cls, "enum_types", {}).get(field) or f"{cls.__name__}{camel(field)}"
    module = importlib.import_module(f"sigdnn.schemas.{name}")
    return getattr(module, name)


def broadcast_dims(shapes: Sequence[Sequence[int]], where: str) -> tuple[int, ...]:
    """NumPy broadcasting of dims (right-aligned; a dim of 1 stretches)."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise GraphError(f"{where}: dims {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def require_float(where: str, tensors: Mapping[str, Tensor]) -> None:
    for port, t in tensors.items():
        if t.dtype is not None and not t.dtype.is_float:
            raise GraphError(f"{where}: port '{port}' (tensor '{t.name}') must be floating point, is {t.dtype}")


__all__ = [
    "OP_CLASSES",
    "Codec",
    "DataType",
    "Op",
    "WireFields",
    "broadcast_dims",
    "camel",
    "require_float",
]
