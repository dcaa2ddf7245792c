"""cuDNN-frontend's tensor: an attribute bag the pygraph turns into a sigdnn tensor when it is planned.

Setters return the tensor so calls chain (``y.set_output(True).set_data_type(...)``).
Before planning every attribute may change (a change drops what validate()
worked out); once the graph is planned the tensor is frozen
(GraphFrozenError). After validate() its getters read the sigdnn graph: the
dims and strides sigdnn inferred, the uid it assigned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sigdnn.cudnn.enums import data_type, tensor_reordering, to_cudnn
from sigdnn.errors import GraphFrozenError, UsageError

if TYPE_CHECKING:
    from sigdnn.graph.tensor import Tensor as SigdnnTensor


def _ints(values: Sequence[int], what: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise UsageError(f"{what}: expected a list of integers, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise UsageError(f"{what}: {v!r} is not an integer")
        out.append(int(v))
    return tuple(out)


class tensor:
    """One tensor of a pygraph: dims, strides, data type, name, uid, virtual or not, pass by value or not."""

    def __init__(
        self,
        dim: Sequence[int] = (),
        stride: Sequence[int] = (),
        data_type: data_type = data_type.NOT_SET,
        is_virtual: bool = False,
        is_pass_by_value: bool = False,
        name: str = "",
        uid: int = -1,
        value: Any = None,
    ) -> None:
        object.__setattr__(self, "_planned", None)  # the sigdnn tensor, set by validate()
        object.__setattr__(self, "_planned_in", None)  # the sigdnn graph it belongs to
        object.__setattr__(self, "_frozen", False)  # set when the graph is planned
        object.__setattr__(self, "_owner", None)  # the pygraph, told of every change
        self._dim = _ints(dim, "tensor dim")
        self._stride = _ints(stride, "tensor stride")
        self._data_type = data_type
        self._is_virtual = bool(is_virtual)
        self._is_pass_by_value = bool(is_pass_by_value)
        self._name = str(name)
        self._uid = int(uid)
        self._value = value  # a pass-by-value tensor's value when known at build time (tensor_like of a CPU scalar)
        self._producer: Any = None  # the op record that writes it (None: a graph input)
        self._ragged_offset: tensor | None = None  # cuDNN's ragged offsets: where each sequence starts (sdpa)

    # -- freezing ------------------------------------------------------------
    def __setattr__(self, attribute: str, value: Any) -> None:
        if self.__dict__.get("_frozen"):
            raise GraphFrozenError(
                f"tensor '{self.get_name()}' belongs to a planned graph: it cannot change (set {attribute.lstrip('_')})"
            )
        owner = self.__dict__.get("_owner")
        if owner is not None:
            owner._changed()
        object.__setattr__(self, attribute, value)

    def _bind(self, planned: SigdnnTensor | None, graph: Any = None) -> None:
        """Tie this tensor to the sigdnn tensor it became in ``graph`` (whose dtypes resolve an unset one)."""
        object.__setattr__(self, "_planned", planned)
        object.__setattr__(self, "_planned_in", graph)

    def _freeze(self) -> None:
        object.__setattr__(self, "_frozen", True)

    # -- getters ---------------------------------------------------------------
    def get_name(self) -> str:
        return self._planned.name if self._planned is not None else self._name

    def get_dim(self) -> list[int]:
        return list(self._planned.dims if self._planned is not None else self._dim)

    def get_stride(self) -> list[int]:
        return list(self._planned.strides if self._planned is not None else self._stride)

    def get_data_type(self) -> data_type:
        """The tensor's data type; once built, an unset one reads as what the graph gives it (its io or
        intermediate data type), as cuDNN-frontend's validate infers it."""
        if self._planned is not None and self._planned.dtype is not None:
            return to_cudnn(self._planned.dtype)
        if self._planned is not None and self._planned_in is not None:
            return to_cudnn(self._planned_in.dtype_of(self._planned))
        return self._data_type

    def get_is_virtual(self) -> bool:
        return self._planned.is_virtual if self._planned is not None else self._is_virtual

    def get_is_pass_by_value(self) -> bool:
        return self._is_pass_by_value

    def get_uid(self) -> int:
        return self._planned.uid if self._planned is not None else self._uid

    def get_reordering_type(self) -> tensor_reordering:
        return tensor_reordering.NONE

    # -- setters ---------------------------------------------------------------
    def set_name(self, name: str) -> tensor:
        self._name = str(name)
        return self

    def set_dim(self, dim: Sequence[int]) -> tensor:
        self._dim = _ints(dim, f"tensor '{self._name}' set_dim")
        return self

    def set_stride(self, stride: Sequence[int]) -> tensor:
        self._stride = _ints(stride, f"tensor '{self._name}' set_stride")
        return self

    def set_data_type(self, data_type: data_type) -> tensor:
        self._data_type = data_type
        return self

    def set_is_virtual(self, is_virtual: bool) -> tensor:
        self._is_virtual = bool(is_virtual)
        return self

    def set_output(self, is_output: bool) -> tensor:
        """Another name for set_is_virtual(not is_output), as in cuDNN."""
        return self.set_is_virtual(not is_output)

    def set_is_pass_by_value(self, is_pass_by_value: bool) -> tensor:
        self._is_pass_by_value = bool(is_pass_by_value)
        return self

    def set_uid(self, uid: int) -> tensor:
        self._uid = int(uid)
        return self

    def set_reordering_type(self, reordering: tensor_reordering) -> tensor:
        if reordering is not tensor_reordering.NONE:
            raise NotImplementedError(f"tensor.set_reordering_type({reordering}): sigdnn has no reordered layouts")
        return self

    def set_ragged_offset(self, ragged_offset: tensor) -> tensor:
        """Token-packed sequences: element (b, ...) starts at ragged_offset[b] (B + 1 elements; sdpa's q, k, v, o)."""
        if not isinstance(ragged_offset, tensor):
            raise UsageError(f"tensor '{self._name}' set_ragged_offset: expected a cudnn tensor, got {ragged_offset!r}")
        self._ragged_offset = ragged_offset
        return self

    def get_ragged_offset(self) -> tensor | None:
        return self._ragged_offset

    def set_alignment(self, alignment: int) -> tensor:
        raise NotImplementedError("tensor.set_alignment(): sigdnn takes no alignment hints")

    def __repr__(self) -> str:
        dt = self.get_data_type().name
        return (
            f"cudnn.tensor({self.get_name()!r}, uid={self.get_uid()}, {dt}{self.get_dim()}, stride={self.get_stride()})"
        )
