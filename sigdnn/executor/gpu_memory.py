"""Device memory for the GPU backend: caller buffers in, outputs back out, plans bound once.

Device buffers (torch, CuPy, anything with ``__cuda_array_interface__`` or
``__dlpack__``) are used in place and must have the graph's strides, since
plans are specialised on them at prepare. Host NumPy arrays are copied in
(laid out with the declared strides) and outputs given as NumPy arrays are
copied back when the run ends.

Host cost. ``GpuRun`` serves the executor's generic, step-by-step path
(validation's captures use it). ``BoundPlan`` is the fast path: the first
execute of a plan allocates its arena, workspace and host-staging buffers
from memory the executor keeps (``GpuMemory``), makes every arena view
and asks every step for a bound launch (``plan.bind``: views and launch
arguments made once). A later execute only accepts the caller's buffers;
steps that touch none of them keep their launch, the others are rebound
when a caller buffer's address changed. With ``cuda_graphs=True`` the
launches of a run whose caller addresses were seen before are recorded once
into a CUDA graph and replayed; a recording is valid for exactly the caller
addresses it was made with (new addresses record again, up to
``GRAPHS_PER_PLAN`` recordings per plan, least recently used dropped), and
never used for plans with a step that synchronizes (a reference fallback).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.executor.gpu_buffers import (
    alias_view,
    check_host,
    current_torch_stream,
    lending_buffers,
    new_strided,
    torch_identity,
    upload,
    wrap_device,
)
from sigdnn.executor.memory_plan import tensor_bytes
from sigdnn.executor.variant_pack import resolve_pack
from sigdnn.graph.tensor import Tensor
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.runtime.device_array import DeviceArray

GRAPHS_PER_PLAN = 4
BOUND_PLANS = 64  # bindings (each holding its arena) kept, least recently used dropped


class GpuMemory:
    """Owns the GpuContext (device + stream) of one executor, and the memory of its bound plans."""

    def __init__(self, device_id: int = 0, context: Any = None) -> None:
        if context is None:
            from sigdnn.runtime.cuda import GpuContext

            context = GpuContext(device_id)
        self.context = context
        self.device = Device("gpu", self.context)
        self._bound: OrderedDict[str, BoundPlan] = OrderedDict()
        self._lock = threading.Lock()

    def session(self) -> GpuRun:
        return GpuRun(self.context)

    def bound(self, plan: Any, cuda_graphs: bool) -> BoundPlan:
        """The plan's binding (made on first use; kept with its memory while the plan is recent)."""
        with self._lock:
            found = self._bound.get(plan.digest)
            if found is None or found.plan is not plan or found.cuda_graphs != cuda_graphs:
                found = self._bound[plan.digest] = BoundPlan(plan, self, cuda_graphs)
            self._bound.move_to_end(plan.digest)
            while len(self._bound) > BOUND_PLANS:
                self._bound.popitem(last=False)
            return found


class GpuRun:
    """The buffers of one execute() call on the executor's generic path."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.stream = context.stream_handle  # what step plans enqueue on: a raw CUstream
        self._copy_back: dict[int, np.ndarray] = {}
        self._given: dict[int, Any] = {}  # id(view) -> the caller's device output it views: what the run returns
        self._ordered = False  # whether our stream already waits for torch's

    def arena(self, nbytes: int) -> Any:
        return self.context.allocate(nbytes)

    def workspace(self, nbytes: int) -> Any:
        """The steps' shared scratch as a byte DeviceArray, or None when no step asks for any."""
        if not nbytes:
            return None
        return self.context.view(self.context.allocate(nbytes), 0, (nbytes,), None, np.uint8)

    def view(self, arena: Any, offset: int, tensor: Tensor, dtype: DataType) -> Any:
        return self.context.view(arena, offset, tensor.dims, tensor.strides, dtype.numpy)

    def alias(self, buffer: Any, offset: int, tensor: Tensor, dtype: DataType) -> Any:
        return alias_view(buffer, offset, tensor, dtype)

    def lenders(self, plan: Any, buffers: Mapping[int, Any]) -> dict[int, Any]:
        """The buffers the plan's hosted intermediates live in this run (``lending_buffers``), given the caller's."""
        graph = plan.graph
        hosts = {host for host, _ in plan.memory.hosted.values()}
        spans = [(uid, tensor_bytes(graph, uid)) for uid in buffers]
        return lending_buffers(
            hosts, buffers, spans, lambda uid: self.new_output(graph.tensors[uid], graph.dtype_of(graph.tensors[uid]))
        )

    def accept(self, obj: Any, tensor: Tensor, dtype: DataType, writable: bool) -> Any:
        if isinstance(obj, np.ndarray):
            check_host(obj, tensor, dtype, writable)
            device = new_strided(self.context, tensor, dtype)
            upload(self.context, obj, device, tensor, dtype)
            if writable:
                self._copy_back[id(device)] = obj
            return device
        if not self._ordered:  # a torch tensor: our stream waits (on the device) for what torch enqueued so far
            torch_stream = current_torch_stream((obj,))
            if torch_stream is not None:
                self.context.wait_for(torch_stream)
                self._ordered = True
        device = wrap_device(self.context, obj, tensor, dtype)
        if writable:
            self._given[id(device)] = obj
        return device

    def new_output(self, tensor: Tensor, dtype: DataType) -> Any:
        return new_strided(self.context, tensor, dtype)

    def scalar(self, value: np.ndarray, tensor: Tensor, dtype: DataType) -> Any:
        device = new_strided(self.context, tensor, dtype)
        upload(self.context, np.full(tensor.dims, value, dtype=dtype.numpy), device, tensor, dtype)
        return device

    def deliver(self, array: Any, to_host: bool) -> Any:
        target = self._copy_back.get(id(array))
        if target is not None:
            target[...] = self.context.to_host(array)
            return target
        return self.context.to_host(array) if to_host else self._given.get(id(array), array)

    def snapshot(self, array: Any, to_host: bool = True) -> Any:
        """A copy taken now: on the host (synchronizes the stream), or on the device (a copy enqueued on the
        stream, before anything later can overwrite the array)."""
        return self.context.to_host(array) if to_host else self.context.copy(array)

    def synchronize(self) -> None:
        self.context.synchronize()


class BoundPlan:
    """One plan bound to device memory: arena views, staging and step launches made once."""

    def __init__(self, plan: Any, memory: GpuMemory, cuda_graphs: bool) -> None:
        self.plan = plan
        self.cuda_graphs = cuda_graphs
        self.context = context = memory.context
        graph = plan.graph
        self._lock = threading.Lock()
        self._arena = context.allocate(plan.memory.peak_bytes)
        self.buffers: dict[int, Any] = {}
        for uid, offset in plan.memory.offsets.items():
            t = graph.tensors[uid]
            self.buffers[uid] = context.view(self._arena, offset, t.dims, t.strides, graph.dtype_of(t).numpy)
        nbytes = plan.workspace_bytes
        workspace = context.view(context.allocate(nbytes), 0, (nbytes,), None, np.uint8) if nbytes else None
        self.execution = ExecutionContext(memory.device, context.stream_handle, workspace)
        self._owner = context.stream_handle  # the stream that last enqueued work on this binding's memory
        self._names = plan.tensors.names
        self._inputs = plan.tensors.inputs
        self._outputs = plan.tensors.outputs
        self._output_names = list(zip(plan.tensors.outputs, plan.tensors.output_names, strict=True))
        self._io = [uid for uid, t in graph.tensors.items() if not t.is_virtual]
        self._input_views = [(uid, root, offset, graph.tensors[uid], graph.dtype_of(graph.tensors[uid]))
                             for uid, (root, offset) in plan.memory.input_views.items()]  # fmt: skip
        self._guests = [(uid, host, offset, graph.tensors[uid], graph.dtype_of(graph.tensors[uid]))
                        for uid, (host, offset) in plan.memory.hosted.items()]  # fmt: skip
        self._hosts = {host for host, _ in plan.memory.hosted.values()}
        self._spare: dict[int, Any] = {}  # lending output uid -> this binding's buffer for its guests when needed
        writable = plan.tensors.writable  # the outputs: inputs and graph constants are read only
        self._io_specs = [
            (uid, graph.tensors[uid], graph.dtype_of(graph.tensors[uid]), uid not in writable) for uid in self._io
        ]
        self._wrapped: dict[int, tuple[tuple[Any, ...], Any]] = {}  # uid -> (torch identity, its DeviceArray)
        self._pack_keys: tuple[tuple[Any, ...], tuple[int, ...], tuple[int, ...]] | None = None  # ``_resolve``'s
        self._keyed: tuple[int, ...] | None = None  # the uids ``run_keyed`` may take by address (set by ``run``)
        self._staging: dict[int, Any] = {}  # uid -> device buffer for host arrays and graph scalars (fixed address)
        self._scalar_values: dict[int, bytes] = {}  # uid -> the value the staged scalar holds
        self._graph_scalars = {  # uid -> the graph's own value of each scalar, as staged
            uid: np.asarray(t.scalar(), dtype=dtype.numpy).tobytes()
            for uid, t, dtype, _ in self._io_specs
            if t.value is not None
        }
        self._constants_held: set[int] = set()  # graph constants whose staging holds their data
        self._steps = [s for s in plan.steps if getattr(s.plan, "launches", None) != 0]  # views launch nothing
        self._spans = [(uid, tensor_bytes(graph, uid)) for uid in self._io]
        io = set(self._io) | set(plan.memory.input_views) | set(plan.memory.hosted)  # these move with the caller's
        # per step, its tensors whose address follows the caller's buffers, and their addresses when it was bound
        self._moving = [tuple(u for u in dict.fromkeys(s.bindings.values()) if u in io) for s in self._steps]
        self._bound_at: list[tuple[int, ...] | None] = [None] * len(self._steps)
        self._launches: list[Callable[[], None]] = [None] * len(self._steps)  # type: ignore[list-item]
        self._addresses: tuple[int, ...] | None = None
        self._bindable = all(hasattr(s.plan, "bind") for s in self._steps)
        self._graphs: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._seen: set[tuple[int, ...]] = set()
        for i, step in enumerate(self._steps):
            if not self._moving[i]:
                self._launches[i] = self._bind(step)

    def _bind(self, step: Any) -> Callable[[], None]:
        buffers = {key: self.buffers[uid] for key, uid in step.bindings.items()}
        bind = getattr(step.plan, "bind", None)
        if bind is not None:
            return bind(buffers, self.execution)
        return functools.partial(step.plan.execute, buffers, self.execution)

    def _move(self, stream: int) -> None:
        """Make ``stream`` wait (on the device) for what the binding's memory last had enqueued, elsewhere."""
        owner, ours = self._owner, self.context.stream_handle
        if stream == owner:
            return
        if stream == ours:
            self.context.wait_for(owner)
        elif owner == ours:
            self.context.release_to(stream)
        else:
            self.context.order(owner, stream)
        self._owner = stream

    def _bind_all(self, stream: int) -> None:
        """Every step's launch enqueued on ``stream`` (the caller's buffers as last accepted)."""
        self.execution = attrs.evolve(self.execution, stream=stream)
        self._launches = [self._bind(step) for step in self._steps]
        self._bound_at = [tuple(self.buffers[u].ptr for u in uids) for uids in self._moving]

    def _rebind_moved(self) -> None:
        """Bind again the steps whose caller-following tensors (io, views of inputs, guests) changed address."""
        for i, uids in enumerate(self._moving):
            if uids:
                now = tuple(self.buffers[u].ptr for u in uids)
                if now != self._bound_at[i]:
                    self._launches[i] = self._bind(self._steps[i])
                    self._bound_at[i] = now

    @property
    def spare_bytes(self) -> int:
        """Device memory this binding holds for guests whose output could not lend its own (memory reports)."""
        return sum(buffer.nbytes for buffer in self._spare.values())

    def _kept(self, buffers: dict[int, Any], uid: int) -> Any:
        """The binding's own buffer for tensor ``uid`` in ``buffers`` (staging or spare), made on first use and
        kept at a fixed address."""
        found = buffers.get(uid)
        if found is None:
            t = self.plan.graph.tensors[uid]
            found = buffers[uid] = new_strided(self.context, t, self.plan.graph.dtype_of(t))
        return found

    def _spare_for(self, uid: int) -> Any:
        return self._kept(self._spare, uid)

    def _staged(self, uid: int) -> Any:
        return self._kept(self._staging, uid)

    def run(self, variant_pack: Mapping[Any, Any], to_host: bool) -> dict[str, Any]:
        """Enqueue the plan on the caller's buffers.

        With torch tensors the steps are enqueued on torch's current stream,
        after the work it holds, as one more torch op would be, and when
        every output stays on the device the run returns without waiting.
        Otherwise (and for callers without torch tensors, on the executor's
        stream) it returns after the device finished. Work the binding
        enqueues on another stream (copies in, fresh outputs, copies out)
        is ordered against the stream its memory was last used on.
        """
        pack = self._resolve(variant_pack)
        torch_stream = current_torch_stream(pack.values())
        ours = self.context.stream_handle
        with self._lock:
            copy_back: dict[int, np.ndarray] = {}
            fresh: set[int] = set()
            keyed = True  # whether later runs may give the same uids by address alone (``run_keyed``)
            self._keyed = None  # until this run succeeds
            for uid, t, dtype, is_input in self._io_specs:
                obj = pack.get(uid)
                if t.value is not None:
                    staged = self.buffers[uid] = self._staged(uid)
                    held = self._scalar_values.get(uid)
                    if obj is None and held == self._graph_scalars[uid]:
                        continue  # the graph's value, staged already (checked first: it costs no array)
                    keyed &= obj is None
                    value = np.asarray(t.scalar() if obj is None else obj, dtype=dtype.numpy)
                    if held != value.tobytes():
                        self._move(ours)
                        upload(self.context, np.full(t.dims, value, dtype=dtype.numpy), staged, t, dtype)
                        self._scalar_values[uid] = value.tobytes()
                elif obj is None and t.data is not None:  # a graph constant: uploaded once, kept on the device
                    staged = self.buffers[uid] = self._staged(uid)
                    if uid not in self._constants_held:
                        self._move(ours)
                        upload(self.context, t.constant(), staged, t, dtype)
                        self._constants_held.add(uid)
                elif obj is None:  # an output the caller did not give: a fresh buffer per run
                    self._move(ours)
                    self.buffers[uid] = new_strided(self.context, t, dtype)
                    fresh.add(uid)
                elif isinstance(obj, np.ndarray):
                    writable = not is_input
                    check_host(obj, t, dtype, writable)
                    staged = self.buffers[uid] = self._staged(uid)
                    if writable:
                        copy_back[uid] = obj
                    else:
                        self._move(ours)
                        upload(self.context, obj, staged, t, dtype)
                        self._constants_held.discard(uid)  # a constant overridden: its staging holds the caller's
                else:
                    self.buffers[uid] = self._device_view(uid, obj, t, dtype)
            self._enqueue(ours if torch_stream is None else torch_stream, fresh)
            self._keyed = tuple(pack) if keyed and not fresh else None
            if torch_stream is not None and not (to_host or copy_back or fresh):
                return {name: pack[uid] for uid, name in self._output_names}
            self._move(ours)
            result: dict[str, Any] = {}
            for uid, name in self._output_names:
                device = self.buffers[uid]
                host = copy_back.get(uid)
                if host is not None:
                    host[...] = self.context.to_host(device)
                    result[name] = host
                elif to_host:
                    result[name] = self.context.to_host(device)
                else:
                    result[name] = pack.get(uid, device)  # the caller's own object, else the fresh buffer
            self.context.synchronize()
            return result

    def run_keyed(self, uids: tuple[int, ...], tensors: Sequence[Any]) -> bool:
        """Enqueue the plan on torch CUDA tensors given for ``uids``, reading their devices and addresses alone,
        where the last run succeeded given exactly these uids, each io tensor not among them holding the graph's
        own value (False, nothing enqueued, otherwise: ``run`` checks the call in full, then sets this up).

        The caller vouches that each tensor has the dims, strides and dtype
        the graph declares for its uid: sigdnn.torch's cached graphs key on
        exactly those. Enqueued on torch's current stream; returns without
        waiting.
        """
        stream = current_torch_stream(tensors)
        device = self.context.device_id
        with self._lock:
            if uids != self._keyed or stream is None or len(tensors) != len(uids):
                return False
            if any(obj.get_device() != device for obj in tensors):
                return False
            buffers = self.buffers
            for uid, obj in zip(uids, tensors, strict=True):
                ptr = obj.data_ptr()
                view = buffers[uid]
                if view.ptr != ptr:
                    buffers[uid] = DeviceArray(ptr, view.shape, view.strides, view.dtype, device_id=view.device_id)
            self._enqueue(stream, set())
        return True

    def _enqueue(self, stream: int, fresh: set[int]) -> None:
        """Launch the steps on ``stream`` over ``self.buffers`` as the caller's run set them (``fresh``: outputs
        allocated for this run only): views of inputs and guests placed, moved steps rebound, ordered after the
        memory's last stream."""
        for uid, root, offset, t, dtype in self._input_views:
            self.buffers[uid] = alias_view(self.buffers[root], offset, t, dtype)
        addresses = tuple(self.buffers[u].ptr for u in self._io)
        if self._guests and addresses != self._addresses:  # where guests live depends on the addresses only
            bases = lending_buffers(self._hosts, self.buffers, self._spans, self._spare_for, fresh)
            for uid, host, offset, t, dtype in self._guests:
                self.buffers[uid] = alias_view(bases[host], offset, t, dtype)
        if stream != self.execution.stream:
            self._bind_all(stream)
        elif addresses != self._addresses:
            self._rebind_moved()
        self._addresses = addresses
        self._move(stream)
        self._launch(addresses, replayable=not fresh)

    def _resolve(self, variant_pack: Mapping[Any, Any]) -> dict[int, Any]:
        """``resolve_pack``, whose checks depend on the keys only, skipped for a dict keyed by the same names or
        uids in the same order as a pack resolved before without a scalar override (whose values it converts).

        A uid matches only as a plain int: 2.0, True and NumPy integers
        equal an int key, yet 2.0 is no uid.
        """
        keys = tuple(variant_pack) if type(variant_pack) is dict else None
        known = self._pack_keys
        if known is not None and keys == known[0] and all(type(keys[i]) is int for i in known[2]):
            return dict(zip(known[1], variant_pack.values(), strict=True))
        pack = resolve_pack(self.plan.graph, variant_pack, self._inputs, self._outputs, self._names)
        tensors = self.plan.graph.tensors
        plain = keys is not None and all(type(k) is str or type(k) is int for k in keys)
        if plain and all(tensors[u].value is None for u in pack):
            uid_positions = tuple(i for i, k in enumerate(keys) if type(k) is int)
            self._pack_keys = (keys, tuple(pack), uid_positions)
        return pack

    def _device_view(self, uid: int, obj: Any, tensor: Tensor, dtype: DataType) -> Any:
        """The caller's device buffer as a checked view; a torch tensor whose identity is unchanged reuses the last.

        The view does not own the caller's memory: the binding keeps it (and
        launches, recordings) past the run, and owning would keep the
        caller's tensor alive, so torch's allocator could not hand its
        block to the next call's tensor and every call would find a new
        address. It is only used inside a run given an object over the same
        memory, which the caller keeps alive.
        """
        identity = torch_identity(obj)
        if identity is not None:
            last = self._wrapped.get(uid)
            if last is not None and last[0] == identity:
                return last[1]
        wrapped = wrap_device(self.context, obj, tensor, dtype)
        device = DeviceArray(wrapped.ptr, wrapped.shape, wrapped.strides, wrapped.dtype, device_id=wrapped.device_id)
        if identity is not None:
            self._wrapped[uid] = (identity, device)
        return device

    def _launch(self, addresses: tuple[int, ...], replayable: bool) -> None:
        """Enqueue every step: from a CUDA graph recorded for these addresses, else launch by launch.

        A recording is captured on the executor's stream (torch's may be the
        legacy default stream, which cannot capture) and replayed on the
        stream the run enqueues on; the launches stay bound to the executor's
        stream until a run launches on another one (``run`` rebinds them).
        """
        stream = self.execution.stream
        if self.cuda_graphs and self._bindable and replayable:
            graph = self._graphs.get(addresses)
            if graph is not None:
                self._graphs.move_to_end(addresses)
                graph.replay(stream)
                return
            if addresses in self._seen:  # second run on these buffers: kernels are compiled, record
                from sigdnn.runtime.cuda import CudaGraph

                if stream != self.context.stream_handle:
                    self._bind_all(self.context.stream_handle)
                graph = CudaGraph.record(self.context, self._launches)
                self._graphs[addresses] = graph
                while len(self._graphs) > GRAPHS_PER_PLAN:
                    self._graphs.popitem(last=False)
                graph.replay(stream)
                return
            self._seen.add(addresses)
        for launch in self._launches:
            launch()

    @property
    def recordings(self) -> int:
        """How many CUDA graphs this binding holds (tests check what invalidates one)."""
        return len(self._graphs)
