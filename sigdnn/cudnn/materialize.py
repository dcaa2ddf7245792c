"""Turn a pygraph's recorded calls into a sigdnn Graph, and bind each cuDNN tensor to its sigdnn tensor.

Each recorded op is added in call order; a graph input becomes a sigdnn
tensor when an op first reads it through a port (a pass-by-value tensor
given only as a parameter, like epsilon, is baked into the op and never
becomes one; one whose value comes with execute is baked into a copy of the
graph made for that value, see ``runtime_values``). The uids users set are given last, moving any sigdnn had
assigned out of their way. What users set on an
op's output (name, data type, strides, uid, set_output) is applied to the
tensor sigdnn inferred; set_dim is passed to the ops that take dims
(reduction, reshape, strided conv_dgrad / conv_wgrad) and checked against
the inferred dims everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from sigdnn.cudnn.enums import to_sigdnn
from sigdnn.cudnn.tensor import tensor
from sigdnn.errors import GraphError
from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.cudnn.ops import Build


@attrs.define(eq=False)
class OpRecord:
    """One op call: its method, name, the tensors it reads and writes, and how to add it to a sigdnn graph."""

    method: str
    name: str
    inputs: tuple[Any, ...]
    outputs: tuple[tensor, ...]
    build: Build
    compute: Any


PLACEHOLDER = 0.5  # a parameter given at execute time, until then: valid for epsilon, momentum and attn_scale


@attrs.define
class Parameters:
    """The pass-by-value parameters of one materialized graph.

    ``baked``: id of a tensor whose value was known when it was made -> that value, built into the op;
    ``runtime``: id -> the tensor whose value each execute gives (built in from ``values``, else PLACEHOLDER).
    """

    values: Mapping[int, float] = attrs.field(factory=dict)
    baked: dict[int, float] = attrs.field(factory=dict)
    runtime: dict[int, tensor] = attrs.field(factory=dict)


class Resolver:
    """What a recorded op's build sees: sigdnn tensors for cuDNN tensors, values of pass-by-value parameters."""

    def __init__(
        self, owner: Any, graph: Graph, bound: dict[int, Tensor], parameters: Parameters, record: OpRecord
    ) -> None:
        self._owner = owner
        self._graph = graph
        self._bound = bound
        self._parameters = parameters
        self.name = record.name or None
        self.compute = to_sigdnn(record.compute, f"{record.method} compute_data_type")

    def t(self, t: tensor | None) -> Tensor | None:
        if t is None:
            return None
        if not isinstance(t, tensor):
            raise GraphError(f"op '{self.name}': expected a cudnn tensor, got {type(t).__name__}")
        found = self._bound.get(id(t))
        if found is None:
            if t._producer is not None or t._owner is not self._owner:
                raise GraphError(f"op '{self.name}': tensor '{t.get_name()}' is not a tensor of this graph")
            found = self._bound[id(t)] = _input(self._graph, t, len(self._bound))
        return found

    def value(self, x: Any, what: str) -> float:
        """A float parameter: a number, or a pass-by-value tensor (its value if known when it was made, else the
        one execute gives: the graph is then planned with PLACEHOLDER and run with a copy holding that value)."""
        if not isinstance(x, tensor):
            return x
        if x._value is not None:
            value = float(x._value)
            self._parameters.baked[id(x)] = value
            return value
        if not x._is_pass_by_value:
            raise NotImplementedError(f"op '{self.name}': {what} '{x.get_name()}' is a device tensor; sigdnn takes "
                                      "a number or a pass-by-value tensor (is_pass_by_value=True)")  # fmt: skip
        if to_sigdnn(x._data_type, f"{what} '{x.get_name()}' data_type") is None:
            raise GraphError(f"op '{self.name}': pass-by-value {what} '{x.get_name()}' needs a data_type")
        self._parameters.runtime[id(x)] = x
        return self._parameters.values.get(id(x), PLACEHOLDER)

    @staticmethod
    def dims(out: tensor) -> tuple[int, ...] | None:
        """Dims the user set on an output (None: let sigdnn infer them)."""
        return out._dim or None


def materialize(
    owner: Any,
    name: str,
    dtypes: dict[str, Any],
    inputs: Sequence[tensor],
    records: Sequence[OpRecord],
    values: Mapping[int, float] | None = None,
) -> tuple[Graph, Parameters]:
    """The sigdnn Graph of the recorded ops and its pass-by-value parameters.

    Without ``values`` every cuDNN tensor is bound to its sigdnn tensor (the graph the pygraph plans); with them
    (id of a parameter given at execute time -> its value) nothing is bound: a copy holding those values.
    """
    g = Graph(name, **dtypes)
    bound: dict[int, Tensor] = {}
    parameters = Parameters(values or {})
    for record in records:
        results = record.build(g, Resolver(owner, g, bound, parameters, record))
        for out, made in zip(record.outputs, results):
            if made is not None:
                _apply(out, made, record)
                bound[id(out)] = made
    _renumber(g, [(t, bound[id(t)]) for t in (*inputs, *(o for r in records for o in r.outputs)) if id(t) in bound])
    names = [t.name for t in g.tensors.values()]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise GraphError(f"graph '{name}': tensor names {twice} are given to several tensors")
    if values is None:
        for t in (*inputs, *(o for r in records for o in r.outputs)):
            t._bind(bound.get(id(t)), g)
    return g, parameters


def _input(g: Graph, t: tensor, k: int) -> Tensor:
    name = t._name or f"tensor_{k}"
    dtype = to_sigdnn(t._data_type, f"tensor '{name}' data_type")
    if not t._dim:
        raise GraphError(f"tensor '{name}': no dims (give dim= or tensor_like an array)")
    strides = t._stride or None
    if t._is_pass_by_value:
        value = 0 if t._value is None else t._value  # 0: given by each execute, which must
        made = g.scalar(name, value, dtype or g.compute_dtype or g.io_dtype)
        made.set_dim(t._dim).set_stride(strides or (1,) * len(t._dim))
        return made
    return g.tensor(name, t._dim, strides, dtype=dtype)


def _apply(out: tensor, made: Tensor, record: OpRecord) -> None:
    where = f"{record.method} '{record.name or made.name}' output"
    if out._dim and tuple(out._dim) != made.dims:
        raise GraphError(f"{where}: set_dim {list(out._dim)} but the op gives {list(made.dims)}")
    if out._name:
        made.set_name(out._name)
    dtype = to_sigdnn(out._data_type, f"{where} data_type")
    if dtype is not None:
        made.set_data_type(dtype)
    if out._stride:
        if len(out._stride) != len(made.dims):
            raise GraphError(f"{where}: {len(out._stride)} strides for {len(made.dims)} dims")
        made.set_stride(out._stride)
    made.set_output(not out._is_virtual)


def _renumber(g: Graph, pairs: Iterable[tuple[tensor, Tensor]]) -> None:
    """Give the tensors users set a uid on (set_uid, uid=) that uid; others keep theirs unless it is taken."""
    wanted = {made.uid: t._uid for t, made in pairs if t._uid >= 0 and t._uid != made.uid}
    if not wanted:
        return
    taken = set(wanted.values())
    if len(taken) != len(wanted):
        raise GraphError(f"graph '{g.name}': one uid is set on several tensors")
    top = max((*g.tensors, *taken))
    mapping = dict(wanted)
    for uid in g.tensors:
        if uid in taken and uid not in wanted:
            top += 1
            mapping[uid] = top
    tensors = list(g.tensors.values())
    g.tensors.clear()
    for t in tensors:
        uid = mapping.get(t.uid, t.uid)  # read before set_uid changes t.uid
        g.tensors[uid] = t.set_uid(uid)

    def moved(value: Any) -> Any:
        return tuple(mapping.get(v, v) for v in value) if isinstance(value, tuple) else mapping.get(value, value)

    for node in g.nodes:
        op = node.op
        ports = {f: moved(getattr(op, f)) for f in (*op.input_ports, *op.output_ports) if getattr(op, f) is not None}
        node.op = attrs.evolve(op, **ports)
