"""One hipDNN node while it is mapped (:class:`NodeMapping`), and the registry of one mapper per attribute table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError
from sigdnn.importers.common import add_op
from sigdnn.importers.hipdnn.schema import FIELDS, METADATA

if TYPE_CHECKING:
    from sigdnn.importers.hipdnn.reader import HipdnnReader


class NodeMapping:
    """One hipDNN node being mapped: its fields, which of them were used, helpers to read pass-by-value tensors."""

    def __init__(
        self, reader: HipdnnReader, name: str, where: str, compute: DataType | None, table: str, fields: dict[str, Any]
    ) -> None:
        self.reader, self.name, self.where, self.compute, self.table = reader, name, where, compute, table
        self.fields, self.used = fields, set(METADATA)
        self.graph = reader.graph

    def get(self, *names: str) -> Any:
        self.used.update(names)
        return self.fields[names[0]] if len(names) == 1 else tuple(self.fields[n] for n in names)

    def scalar(self, field: str) -> float:
        """The value of the pass-by-value tensor a field names (cuDNN / hipDNN pass epsilon, momentum, ... so)."""
        uid = self.get(field)
        t = self.graph.tensors.get(uid)
        if t is None:
            raise GraphError(f"{self.where}: {field} names uid {uid}, which is not a tensor of the graph")
        if t.value is None:
            raise GraphError(f"{self.where}: {field} tensor '{t.name}' must be pass-by-value (sigdnn takes its value)")
        return float(t.scalar())

    def dims(self, uid: int) -> tuple[int, ...]:
        """The dims of the tensor ``uid`` names; a uid that is no tensor of the graph is refused."""
        t = self.graph.tensors.get(uid)
        if t is None:
            raise self.refuse(f"uid {uid} is not a tensor of the graph")
        return t.dims

    def refuse(self, why: str) -> GraphError:
        return GraphError(f"{self.where} ({self.table}): {why}")

    def add(self, kind: str, **fields: Any) -> None:
        self.refuse_unused()
        add_op(self.graph, kind, self.name, self.compute, self.where, **fields)

    def refuse_unused(self) -> None:
        defaults = {"bool": False, "u8": 0, "i64[]": (), "str": None}
        kinds = dict(FIELDS[self.table])
        set_but_unused = [
            f for f, v in self.fields.items() if f not in self.used and v is not None and v != defaults.get(kinds[f])
        ]
        if set_but_unused:
            raise self.refuse(f"field(s) {sorted(set_but_unused)} are set; sigdnn does not support them")


Mapper = Callable[[NodeMapping], None]
MAPPERS: dict[str, Mapper] = {}


def maps(table: str) -> Callable[[Mapper], Mapper]:
    def register(fn: Mapper) -> Mapper:
        MAPPERS[table] = fn
        return fn

    return register
