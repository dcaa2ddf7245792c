"""pygraph: cuDNN-frontend's Python graph, run by sigdnn's executors.

The lifecycle is cuDNN's: build with op methods, ``validate()`` (sigdnn's
graph is made and checked; output dims are inferred), ``build_operation_graph()``
(the graph is planned, hence frozen), ``create_execution_plans(...)`` (one
ranked plan list), ``check_support()``, ``build_plans()``, then ``execute``
as often as needed. ``build(heur_modes)`` runs the whole chain. The handle
picks the backend: a GPU handle the GPU builders, ``create_handle(device="cpu")``
the reference. ``router=`` (a sigdnn extension) gives this graph its own
ranking policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from sigdnn.cudnn import pointwise as pw
from sigdnn.cudnn.enums import build_plan_policy, data_type, to_cudnn, to_sigdnn
from sigdnn.cudnn.execute import sigdnn_pack
from sigdnn.cudnn.handle import Handle, create_handle
from sigdnn.cudnn.materialize import OpRecord, materialize
from sigdnn.cudnn.ops import Ops
from sigdnn.cudnn.plans import Plans, cudnnGraphNotSupportedError
from sigdnn.cudnn.runtime_values import take_values
from sigdnn.cudnn.tensor import tensor
from sigdnn.errors import GraphError, GraphFrozenError, UsageError
from sigdnn.executor.executor import Executor
from sigdnn.executor.router import Router
from sigdnn.graph.checks import check_graph
from sigdnn.graph.graph import Graph

_EXECUTORS: dict[str, Executor] = {}
VALUED_PLANS = 8  # plans kept per pygraph for the values its pass-by-value parameters were given at execute


def executor_for(handle: Handle) -> Executor:
    """The handle's own executor, else one per backend shared by every pygraph (plan cache and memory with it)."""
    if handle.executor is not None:
        return handle.executor
    found = _EXECUTORS.get(handle.backend)
    if found is None:
        found = _EXECUTORS[handle.backend] = Executor(handle.backend)
    return found


class pygraph(Ops):
    """A cuDNN-frontend graph: tensors, op methods, planning, execution."""

    def __init__(
        self,
        name: str = "test_graph",
        io_data_type: data_type = data_type.NOT_SET,
        intermediate_data_type: data_type = data_type.NOT_SET,
        compute_data_type: data_type = data_type.NOT_SET,
        handle: Handle | None = None,
        sm_count: int | None = None,
        sm_version: int | None = None,
        kernel_cache: Any = None,
        device_property: Any = None,
        is_dynamic_shape_enabled: bool = False,
        is_override_shape_enabled: bool = False,
        *,
        router: Router | None = None,
    ) -> None:
        for keyword, value in (("sm_count", sm_count), ("sm_version", sm_version), ("kernel_cache", kernel_cache),
                               ("device_property", device_property),
                               ("is_dynamic_shape_enabled", is_dynamic_shape_enabled),
                               ("is_override_shape_enabled", is_override_shape_enabled)):  # fmt: skip
            if value is not None and value is not False:
                raise NotImplementedError(f"pygraph({keyword}=...): sigdnn does not support {keyword}")
        if handle is not None and not isinstance(handle, Handle):
            raise UsageError(f"pygraph(handle=...): expected a handle from cudnn.create_handle(), got {handle!r}")
        self.handle = handle
        self.router = router
        self._name = str(name)
        self._dtypes = {
            "io_dtype": to_sigdnn(io_data_type, "pygraph io_data_type"),
            "intermediate_dtype": to_sigdnn(intermediate_data_type, "pygraph intermediate_data_type"),
            "compute_dtype": to_sigdnn(compute_data_type, "pygraph compute_data_type"),
        }
        self._tensors: list[tensor] = []
        self._records: list[OpRecord] = []
        self._graph: Graph | None = None
        self._baked: dict[int, float] = {}
        self._runtime: dict[int, tensor] = {}  # id -> pass-by-value parameter whose value comes with execute
        self._valued: dict[tuple[Any, ...], Any] = {}  # (plan index, values) -> the plan run with those values
        self._planned = False
        self._plans: Plans | None = None

    # -- building ----------------------------------------------------------------
    def _check_open(self, call: str) -> None:
        if self._planned:
            raise GraphFrozenError(f"pygraph '{self._name}': {call}: the graph is planned, so it cannot change")

    def _changed(self) -> None:
        """A tensor of this graph changed: what validate() worked out no longer holds."""
        self._check_open("changing a tensor")
        self._graph = None

    def _own(self, t: tensor) -> tensor:
        object.__setattr__(t, "_owner", self)
        self._tensors.append(t)
        self._graph = None
        return t

    def tensor(
        self,
        dim: Sequence[int],
        stride: Sequence[int],
        data_type: data_type = data_type.NOT_SET,
        is_virtual: bool = False,
        is_pass_by_value: bool = False,
        ragged_offset: Any = None,
        reordering_type: Any = None,
        name: str = "",
        uid: int = -1,
    ) -> tensor:
        """A graph input (or a pass-by-value scalar whose value comes with execute's variant pack)."""
        self._check_open("tensor()")
        t = tensor(dim, stride, data_type, is_virtual, is_pass_by_value, name, uid)
        if ragged_offset is not None:
            t.set_ragged_offset(ragged_offset)
        if reordering_type is not None:
            t.set_reordering_type(reordering_type)
        return self._own(t)

    def tensor_like(self, input: Any, name: str = "") -> tensor:
        """A tensor with the dims, strides and data type of a torch tensor (any DLPack array) or a cudnn tensor.

        As in cuDNN, a host tensor on a GPU handle is pass-by-value; on a CPU
        handle, where every tensor is a host tensor, a one-element one is.
        Its value is taken now, so it can serve as epsilon or attn_scale.
        """
        self._check_open("tensor_like()")
        if isinstance(input, tensor):
            t = tensor(input.get_dim(), input.get_stride(), input.get_data_type(), False,
                       input.get_is_pass_by_value(), name, -1, input._value)  # fmt: skip
            return self._own(t)
        from sigdnn.cudnn.arrays import describe

        dims, strides, dtype, on_host, values = describe(input, f"tensor_like({name or type(input).__name__})")
        gpu = self.handle is not None and self.handle.device == "gpu"
        by_value = on_host and (gpu or len(values) == 1)
        if by_value and not values:
            raise UsageError(f"tensor_like({name or type(input).__name__}): a host tensor on a GPU handle is "
                             f"pass-by-value (cuDNN's rule), so it holds one element, not dims {list(dims)}")  # fmt: skip
        t = tensor(dims, strides, data_type.NOT_SET, False, by_value, name, -1, values[0] if by_value else None)
        object.__setattr__(t, "_data_type", to_cudnn(dtype))
        return self._own(t)

    def _record(
        self, method: str, name: str, inputs: Sequence[Any], count: int, build: Any, compute: Any = None
    ) -> list[tensor]:
        self._check_open(f"{method}()")
        for t in inputs:
            if isinstance(t, tensor) and t._owner is not self:
                raise GraphError(f"pygraph.{method}: tensor '{t.get_name()}' belongs to another graph")
        outputs = [self._own(tensor(is_virtual=True)) for _ in range(count)]
        record = OpRecord(method, str(name), tuple(inputs), tuple(outputs), build, compute)
        for t in outputs:
            object.__setattr__(t, "_producer", record)
        self._records.append(record)
        return outputs

    def _pointwise(self, method: str, mode: str, tensors: list[Any], params: dict[str, Any], compute: Any,
                   name: str) -> tensor:  # fmt: skip
        def build(g: Graph, r: Any) -> list[Any]:
            return [g.pointwise(mode, *(r.t(t) for t in tensors), name=r.name, compute_dtype=r.compute, **params)]

        return self._record(method, name, tensors, 1, build, compute)[0]

    # -- planning ---------------------------------------------------------------
    def validate(self) -> None:
        """Make and check sigdnn's graph; the outputs' dims, strides and uids are then readable."""
        if self._graph is None:
            graph, parameters = materialize(self, self._name, self._dtypes, self._tensors, self._records)
            check_graph(graph)
            if graph.nodes and not graph.outputs:
                raise GraphError(f"pygraph '{self._name}': no tensor is marked set_output(True)")
            self._graph, self._baked, self._runtime = graph, parameters.baked, parameters.runtime

    @property
    def graph(self) -> Graph:
        """sigdnn's graph (after validate())."""
        if self._graph is None:
            raise UsageError(f"pygraph '{self._name}': call validate() first")
        return self._graph

    def build_operation_graph(self) -> None:
        """Plan the graph: from here on it is frozen; a second call raises GraphFrozenError."""
        if self._planned:
            raise GraphFrozenError(f"pygraph '{self._name}': build_operation_graph(): the graph is already planned")
        self.validate()
        self.graph.freeze()
        for t in self._tensors:
            t._freeze()
        self._planned = True

    def create_execution_plans(self, heur_modes: Sequence[Any] = ()) -> None:
        """Rank every builder and configuration that can run the graph's steps into one plan list."""
        if not self._planned:
            self.build_operation_graph()
        if self._plans is not None:
            raise GraphFrozenError(f"pygraph '{self._name}': create_execution_plans(): plans exist already")
        self._plans = Plans(executor_for(self._handle()), self.graph, self.router)

    def _handle(self) -> Handle:
        if self.handle is None:
            self.handle = create_handle()
        return self.handle

    def _list(self, call: str) -> Plans:
        if self._plans is None:
            raise UsageError(f"pygraph '{self._name}': {call}: call create_execution_plans() first")
        return self._plans

    def check_support(self) -> None:
        if not self._list("check_support()").entries:
            raise cudnnGraphNotSupportedError(f"pygraph '{self._name}': no plan supports the graph")

    def build_plans(self, policy: build_plan_policy = build_plan_policy.HEURISTICS_CHOICE) -> None:
        self._list("build_plans()").build(policy)

    def build(self, heur_modes: Sequence[Any] = ()) -> None:
        """validate, build_operation_graph, create_execution_plans, check_support, build_plans."""
        self.validate()
        self.build_operation_graph()
        self.create_execution_plans(heur_modes)
        self.check_support()
        self.build_plans()

    def select_plan(self, index: int) -> None:
        """Pin plan ``index`` (a sigdnn extension): build_plans builds it or raises, never another."""
        self._list("select_plan()").pin(index)

    def deselect_engines(self, names: Sequence[str]) -> None:
        self._list("deselect_engines()").deselect(list(names))

    def get_execution_plan_count(self) -> int:
        return len(self._list("get_execution_plan_count()").entries)

    def get_engine_count(self) -> int:
        return self.get_execution_plan_count()

    def get_plan_name_at_index(self, index: int) -> str:
        plans = self._list("get_plan_name_at_index()")
        return plans.entries[plans.index(index, "get_plan_name_at_index")].name

    def build_plan_at_index(self, index: int) -> None:
        plans = self._list("build_plan_at_index()")
        plans.build_at(index)
        if plans.selected is None:
            plans.selected = index

    def get_workspace_size(self) -> int:
        return self._list("get_workspace_size()").running("get_workspace_size()").workspace_bytes

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return self._list("get_workspace_size_plan_at_index()").build_at(index).workspace_bytes

    def query_tensor_attributes_of_uid(self, uid: int) -> tensor:
        for t in self._tensors:
            if t._planned is not None and t.get_uid() == uid:
                return t
        raise UsageError(f"pygraph '{self._name}': no tensor has uid {uid}")

    def key(self) -> int:
        """A 63-bit key of the validated graph, the same in every process (from its serialized bytes)."""
        digest = hashlib.blake2b(self.graph.serialize(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1

    # -- execution -----------------------------------------------------------------
    def execute(self, variant_pack: Mapping[Any, Any], workspace: Any = None, handle: Handle | None = None) -> None:
        """Run the built plan; outputs are written into the pack's buffers. ``workspace`` is not needed."""
        plans = self._list("execute()")
        plan = plans.running("execute()")
        self._run(plans, plans.selected, plan, variant_pack, handle)

    def execute_plan_at_index(
        self, variant_pack: Mapping[Any, Any], workspace: Any, index: int, handle: Handle | None = None
    ) -> None:
        plans = self._list("execute_plan_at_index()")
        self._run(plans, index, plans.build_at(index), variant_pack, handle)

    def _run(self, plans: Plans, index: Any, plan: Any, variant_pack: Mapping[Any, Any], handle: Handle | None) -> None:
        if handle is not None and handle.backend != self._handle().backend:
            raise UsageError(f"execute(handle=...): the graph was planned on the {self._handle().device} handle")
        if self._runtime:  # parameters given now: run a copy of the graph that holds their values
            values, variant_pack = take_values(self._runtime, variant_pack)
            plan = self._valued_plan(plans, index, values)
        runtime = {t.get_uid() for t in self._tensors if t._is_pass_by_value and t._value is None and t._planned}
        baked = {id(t): v for t in self._tensors if (v := self._baked.get(id(t))) is not None}
        pack = sigdnn_pack(self.graph, variant_pack, runtime, baked)
        executor_for(self._handle()).execute(plan, pack)

    def _valued_plan(self, plans: Plans, index: int, values: dict[int, float]) -> Any:
        """Plan ``index`` of a copy of the graph holding ``values`` (the last VALUED_PLANS kept)."""
        key = (index, *sorted(values.items()))
        found = self._valued.pop(key, None)
        if found is None:
            graph, _ = materialize(self, self._name, self._dtypes, self._tensors, self._records, values)
            found = plans.realized(graph, index)
        self._valued[key] = found
        while len(self._valued) > VALUED_PLANS:
            self._valued.pop(next(iter(self._valued)))
        return found

    # -- wire -------------------------------------------------------------------
    def serialize(self) -> bytes:
        """The validated graph as cuDNN-frontend JSON bytes (what ``deserialize`` and ``sigdnn.load`` read)."""
        from sigdnn.cudnn.serialize import to_json

        self.validate()
        given = [t for t in self._tensors if t._is_pass_by_value and t._value is None and t._planned is not None]
        given += self._runtime.values()
        if given:
            names = ", ".join(repr(t.get_name()) for t in given)
            raise NotImplementedError(f"pygraph.serialize(): pass-by-value {names} get their value at execute; "
                                      "cuDNN JSON holds the value")  # fmt: skip
        return to_json(self.graph)

    def deserialize(self, *args: Any) -> None:
        """Read cuDNN-frontend JSON into this (empty) graph: deserialize(data) or deserialize(handle, data)."""
        from sigdnn.cudnn.wire import adopt

        if len(args) not in (1, 2):
            raise TypeError("deserialize() takes (data) or (handle, data)")
        if len(args) == 2:
            self.handle = args[0]
        adopt(self, args[-1])

    def __repr__(self) -> str:
        return f"pygraph({self._name!r}, {len(self._records)} ops, {'planned' if self._planned else 'open'})"


for _method in pw.METHODS:
    setattr(pygraph, _method, pw.pointwise_method(_method))

for _method in ("genstats", "adalayernorm", "adalayernorm_backward", "instancenorm", "instancenorm_backward",
                "block_scale_quantize", "block_scale_dequantize", "tensor_scalar", "moe_grouped_matmul",
                "moe_grouped_matmul_bwd", "sdpa_fp8", "sdpa_fp8_backward", "sdpa_mxfp8", "sdpa_mxfp8_backward",
                "create_execution_plan", "get_knobs_for_engine", "get_behavior_notes",
                "get_behavior_notes_for_plan_at_index", "deselect_numeric_notes", "deselect_behavior_notes",
                "select_numeric_notes", "select_behavior_notes", "deselect_workspace_greater_than",
                "populate_cuda_graph", "update_cuda_graph"):  # fmt: skip

    def _missing(self: pygraph, *args: Any, _name: str = _method, **kwargs: Any) -> Any:
        raise NotImplementedError(f"pygraph.{_name}(): not implemented by sigdnn (docs/cudnn.md lists what is)")

    _missing.__name__ = _method
    setattr(pygraph, _method, _missing)
