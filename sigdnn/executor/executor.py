"""Executor: prepare a graph once (order, keys, plans, memory), execute it many times."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sigdnn.errors import ExecutionError, GraphError, NoPlanError, NotSupported, RegistryError, UsageError
from sigdnn.executor import autotune
from sigdnn.executor.autotune import Candidate, Tuner, build_node, candidates_of, node_shape, order_claims
from sigdnn.executor.fallback import FALLBACKS, FallbackBuilder, fallback_builder
from sigdnn.executor.host import HostMemory
from sigdnn.executor.host_arrays import to_torch
from sigdnn.executor.memory_plan import can_host, plan_memory, tensor_bytes
from sigdnn.executor.plan import ExecutionPlan, Step
from sigdnn.executor.router import Router, default_router
from sigdnn.executor.schedule import candidate_orders
from sigdnn.executor.stepwise import run_steps
from sigdnn.executor.views import NO_VIEWS, VIEW, plan_views
from sigdnn.graph.checks import check_graph, check_reference_cost
from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.graph import Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, GPU_LIMITS, Limits
from sigdnn.graph.node import Node
from sigdnn.io.graph_files import read_graph_file
from sigdnn.registry.contracts import BuildContext, PlanBuilder, RegionContext
from sigdnn.registry.regions import Dataflow, make_region
from sigdnn.registry.registry import DEFAULT_REGISTRY, Registry
from sigdnn.runtime.device import Device
from sigdnn.signature_keys import SignatureKey, key_for

BACKENDS = ("reference", "gpu", "gpu-reference")
GPU_REFERENCE_LIBRARY = "gpu_reference"  # the builders only the "gpu-reference" backend runs
OUTPUT_KINDS = ("numpy", "torch")


def default_limits(backend: str) -> Limits:
    """A backend's graph limits: the GPU's work bound (``GPU_LIMITS``) for the GPU builders and for the float64 GPU
    reference (its GEMMs run at tens of TFLOP/s: a Llama layer's backward, past the CPU reference's bound, takes
    seconds there); the CPU reference's own (``DEFAULT_LIMITS``)."""
    return GPU_LIMITS if backend in ("gpu", "gpu-reference") else DEFAULT_LIMITS


Engine = int | str
GraphSource = bytes | bytearray | memoryview | str | os.PathLike | Graph


class Executor:
    """Runs graphs on one backend: "reference" (NumPy on the CPU), "gpu" (the GPU builders) or
    "gpu-reference" (the GPU reference's float64 builders alone: sigdnn.plan_builders.gpu_reference).

    ``engine`` pins every node its builder serves; ``pins`` pins nodes by name.
    Pinning is strict: a pinned builder that declines is an error, never a
    silent fallback. ``fusion=False`` plans every node as its own step with
    its own memory: no regions, and no views (``sigdnn.executor.views``: a
    reshape, transpose, slice or concatenate whose declared strides let its
    output alias its input runs no step).
    ``fallback="reference"`` (GPU only) runs a node no GPU builder takes on
    the reference, with copies around it (``sigdnn.executor.fallback``); by
    default such a node is a NoPlanError. ``cuda_graphs=True`` (GPU only)
    records a plan's launches into a CUDA graph and replays it when the
    caller's buffers are at addresses seen before (``gpu_memory.BoundPlan``).
    ``autotune=True`` (or a configured ``autotune.Tuner``) times the candidate
    builders and configurations of a step the first time its shape is seen
    and keeps the fastest that validates, remembered on disk; without it a
    remembered choice is still used (``sigdnn.executor.autotune``).
    ``router`` replaces that policy (``sigdnn.executor.router``: a Tuner is
    one router); without one the process default, if set, applies.
    ``limits`` bound what a graph may declare (``sigdnn.graph.limits``); by
    default a GPU executor takes ``GPU_LIMITS`` (``default_limits``), leaves the reference's
    float64 scratch out of the byte bound, and holds only the steps that
    fall back to the reference to its cost (``DEFAULT_LIMITS``).
    """

    def __init__(
        self,
        backend: str = "reference",
        *,
        engine: Engine | None = None,
        pins: Mapping[str, Engine] | None = None,
        registry: Registry | None = None,
        limits: Limits | None = None,
        fusion: bool = True,
        fallback: str | None = None,
        cuda_graphs: bool = False,
        autotune: bool | Tuner = False,
        router: Router | None = None,
        cache_size: int = 64,
    ) -> None:
        if backend not in BACKENDS:
            raise UsageError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        if fallback is not None and (backend != "gpu" or fallback not in FALLBACKS):
            raise UsageError(f"fallback={fallback!r}: the gpu backend can fall back to one of {FALLBACKS}")
        if cuda_graphs and backend != "gpu":
            raise UsageError("cuda_graphs=True needs the gpu backend")
        self.backend = backend
        self.fallback = fallback
        self.cuda_graphs = cuda_graphs
        self.fusion = fusion
        self.engine = engine
        self.pins = dict(pins or {})
        self.registry = registry or DEFAULT_REGISTRY
        if router is not None and autotune is not False:
            raise UsageError("give autotune= or router=, not both: a Tuner is a router")
        self.tuner = autotune if isinstance(autotune, Tuner) else Tuner(measure=bool(autotune))
        self._router = router if router is not None else (self.tuner if autotune is not False else None)
        self.limits = limits if limits is not None else default_limits(backend)
        self._fallback_limits = limits if limits is not None else DEFAULT_LIMITS  # what fallback steps may cost
        self._cache: OrderedDict[str, ExecutionPlan] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._memory: Any = None

    # -- memory --------------------------------------------------------------
    @property
    def memory(self) -> Any:
        """Host memory for the reference backend, a GPU context for "gpu" (made on first use)."""
        if self._memory is None:
            if self.backend == "reference":
                self._memory = HostMemory()
            else:
                from sigdnn.executor.gpu_memory import GpuMemory
                from sigdnn.runtime.cuda import gpu_unavailable_reason

                reason = gpu_unavailable_reason()
                if reason is not None:
                    raise ExecutionError(f"the {self.backend} backend cannot run here: {reason}")
                self._memory = GpuMemory()
        return self._memory

    @property
    def device(self) -> Device:
        return self.memory.device

    @property
    def router(self) -> Router:
        """The ranking policy this executor plans with: its own, else the process default, else its tuner."""
        return self._router or default_router() or self.tuner

    # -- prepare -------------------------------------------------------------
    def prepare(self, source: GraphSource, *, router: Router | None = None) -> ExecutionPlan:
        """Parse, check, claim regions, pick a builder per remaining node, order the steps, plan memory.

        Cached by the graph's digest (and this executor's settings); a plan
        made with a ``router`` of its own (this graph's policy) is not cached.
        A Graph given here is frozen (``Graph.freeze``): preparing it again
        finds the same plan, but changing it raises GraphFrozenError.
        """
        graph, data = self._load(source)
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        with self._lock:
            cached = self._cache.get(digest) if router is None else None
            if cached is not None:
                self._cache.move_to_end(digest)
                return cached
        policy = router or self.router
        if graph is None:
            graph = deserialize(data, limits=self.limits, check=False)
        order = check_graph(graph, self.limits, reference_scratch=self.backend != "gpu")
        if graph.nodes and not graph.outputs:
            raise GraphError(
                f"graph '{graph.name}' has no outputs, so running it computes nothing: "
                "mark the tensors you want with set_output(True)"
            )
        device = self.device
        keys = {i: key_for(graph.nodes[i], graph) for i in order}
        flow = Dataflow(graph, order)
        views = NO_VIEWS
        if self.fusion:  # a pinned node runs its builder
            views = plan_views(
                graph, order, lambda i: self._pin(graph.nodes[i], keys[i]) is None, into_inputs=device.kind == "gpu"
            )
        steps = [*self._region_steps(graph, order, flow, keys, device, views.nodes, policy)]
        claimed = {i for step in steps for i in step.region.nodes}
        for i in order:
            if i in views.nodes:
                steps.append(self._view_step(graph, graph.nodes[i], keys[i], device))
            elif i not in claimed:
                steps.append(self._node_step(graph, graph.nodes[i], keys[i], device, policy))
        self._check_engine_used(graph, steps)
        fallen = [s.nodes[0] for s in steps if isinstance(s.builder, FallbackBuilder)]
        check_reference_cost(graph, fallen, self._fallback_limits)
        position = {graph.nodes[i]: p for p, i in enumerate(order)}
        rank = [min(position[n] for n in s.nodes) for s in steps]
        sizes = {uid: tensor_bytes(graph, uid) for uid, t in graph.tensors.items()
                 if t.is_virtual and uid not in views.parents}  # fmt: skip
        lenders = [t.uid for t in graph.outputs if can_host(graph, t.uid)] if device.kind == "gpu" else []
        planned = []
        for run_order in candidate_orders([s.reads for s in steps], [s.writes for s in steps], rank, sizes):
            ordered = tuple(steps[u] for u in run_order)
            accesses = [(s.reads, s.writes) for s in ordered]
            planned.append((plan_memory(graph, accesses, views.parents, lenders), ordered))
        memory, ordered = min(planned, key=lambda p: p[0].peak_bytes)  # the first of the lowest peaks
        arena = tuple((uid, offset, graph.tensors[uid], graph.dtype_of(graph.tensors[uid]))
                      for uid, offset in memory.offsets.items())  # fmt: skip
        plan = ExecutionPlan(graph, self.backend, digest, ordered, memory, arena)
        if router is not None:
            return plan
        with self._lock:
            self._cache[digest] = plan
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return plan

    def _region_steps(
        self,
        graph: Graph,
        order: list[int],
        flow: Dataflow,
        keys: dict[int, SignatureKey],
        device: Device,
        views: frozenset[int],
        router: Router,
    ) -> list[Step]:
        """Offer the graph to the fusion builders, best first; commit the claims that fit (and hold no view).

        A claim whose build declines (NotSupported) gives way to the next
        claim of the same nodes, then to the nodes' own builders.
        """
        if not self.fusion:
            return []
        steps: list[Step] = []
        taken: set[int] = set(views)
        claims = [(builder, region) for builder in self.registry.fusion_builders(device.kind)
                  if self._admits(builder)
                  and (self.engine is None or self._find(self.engine).engine_id == builder.engine_id)
                  for region in builder.claim(graph, order, device)]  # fmt: skip
        ordered = order_claims(router, claims, graph, device, self.memory)
        alternatives: dict[frozenset[int], list[Candidate]] = {}
        for builder, region, config, _ in ordered:
            alternatives.setdefault(frozenset(region.nodes), []).append(Candidate(builder, config))
        for builder, region, config, choice in ordered:
            nodes = set(region.nodes)
            if nodes & taken or any(self._pinned_elsewhere(graph.nodes[i], builder) for i in nodes):
                continue
            checked = make_region(flow, region.nodes, [keys[i] for i in region.nodes])
            if checked != region:
                raise RegistryError(
                    f"fusion builder {builder.name} claimed a region that is not what make_region gives"
                )
            context = RegionContext(checked.pattern[0], device, graph, config)
            try:
                plan = builder.build_region(checked, graph, context)
            except NotSupported:
                continue
            taken |= nodes
            group = tuple(alternatives[frozenset(nodes)])
            first, last = graph.nodes[checked.nodes[0]].name, graph.nodes[checked.nodes[-1]].name
            steps.append(
                Step(
                    f"region({first}..{last})",
                    tuple(graph.nodes[i] for i in checked.nodes),
                    checked.pattern[0],
                    builder,
                    plan,
                    {uid: uid for uid in (*checked.entries, *checked.exits)},
                    checked.entries,
                    checked.exits,
                    checked,
                    choice=choice.summary() if choice else None,
                    candidates=group,
                    chosen=group.index(Candidate(builder, config)),
                )
            )
        return steps

    def _pin(self, node: Node, key: SignatureKey) -> Engine | None:
        """The engine a node is pinned to: by name, else the executor's engine where it serves the key."""
        pinned = self.pins.get(node.name)
        if pinned is None and self.engine is not None and self._find(self.engine, node).serves(key):
            pinned = self.engine
        return pinned

    def _check_engine_used(self, graph: Graph, steps: list[Step]) -> None:
        """An engine that runs no step served no node: a typo or the wrong graph, said rather than ignored."""
        if self.engine is None or not steps:
            return
        builder = self._find(self.engine)
        if all(step.builder.engine_id != builder.engine_id for step in steps):
            ops = sorted({node.op.kind for node in graph.nodes})
            raise UsageError(
                f"engine {builder.name} (#{builder.engine_id}) serves no node of graph '{graph.name}' "
                f"(its ops: {', '.join(ops)}); `sigdnn builders` lists each builder's ops"
            )

    def _pinned_elsewhere(self, node: Node, builder: PlanBuilder) -> bool:
        pinned = self.pins.get(node.name)
        return pinned is not None and self._find(pinned, node).engine_id != builder.engine_id

    def _node_step(self, graph: Graph, node: Node, key: SignatureKey, device: Device, router: Router) -> Step:
        """The node's step: the first of its ranked candidates whose build does not decline."""
        choice = None
        try:
            ranked, why, choice = self._choose(node, graph, key, device, router)
        except NoPlanError as e:
            if self.fallback is None or self._pin(node, key) is not None:  # pins never fall back
                raise
            ranked, why = [Candidate(fallback_builder(self.registry, node, graph, key, e))], [str(e)]
        for index, candidate in enumerate(ranked):
            try:
                plan = candidate.builder.build(node, graph, BuildContext(key, device, graph, candidate.config))
            except NotSupported as e:
                why.append(f"{candidate.label} (#{candidate.builder.engine_id}) declined to build: {e}")
                continue
            ins = tuple(dict.fromkeys(node.op.inputs().values()))
            return Step(node.name, (node,), (key,), candidate.builder, plan, node.op.ports(), ins,
                        tuple(node.op.outputs().values()), declines=tuple(why),
                        choice=choice.summary() if choice else None, candidates=tuple(ranked),
                        chosen=index)  # fmt: skip
        pinned = " (pinned)" if self._pin(node, key) is not None else ""
        raise NoPlanError(f"node '{node.name}' {key}: every candidate{pinned} declined: {'; '.join(why)}")

    @staticmethod
    def _view_step(graph: Graph, node: Node, key: SignatureKey, device: Device) -> Step:
        plan = VIEW.build(node, graph, BuildContext(key, device, graph))
        ins = tuple(dict.fromkeys(node.op.inputs().values()))
        return Step(node.name, (node,), (key,), VIEW, plan, node.op.ports(), ins, tuple(node.op.outputs().values()))

    def _load(self, source: GraphSource) -> tuple[Graph | None, bytes]:
        """(the Graph, or None when it is still to be read from the bytes; the bytes the plan cache keys on)."""
        if isinstance(source, Graph):
            from sigdnn.graph.serialize import fingerprint  # its weights hashed, not copied (a cache key)

            return source.freeze(), fingerprint(source)  # a planned graph is read-only: its plan stays its own
        if isinstance(source, (bytes, bytearray, memoryview)):
            try:
                return None, bytes(source)
            except ValueError as e:  # a released memoryview
                raise UsageError(f"prepare() could not read the buffer: {e}") from None
        if isinstance(source, (str, os.PathLike)):
            import sigdnn.importers  # noqa: F401  (registers the foreign graph formats read_graph_file detects)

            return None, read_graph_file(source)
        raise UsageError(f"prepare() takes bytes, a path or a Graph, not {type(source).__name__}")

    def _choose(
        self, node: Node, graph: Graph, key: SignatureKey, device: Device, router: Router
    ) -> tuple[list[Candidate], list[str], autotune.Choice | None]:
        """The candidates (builders and configurations) whose check accepts the node, the router's pick first."""
        pinned = self._pin(node, key)
        if pinned is not None:
            builder = self._find(pinned, node)
            problem = self._unfit(builder, key, device)
            if problem:
                raise NoPlanError(
                    f"node '{node.name}' {key}: pinned builder {builder.name} (#{builder.engine_id}) {problem}"
                )
            try:
                builder.check(node, graph, device)
            except NotSupported as e:
                raise NoPlanError(
                    f"node '{node.name}' {key}: pinned builder {builder.name} (#{builder.engine_id}) declined: {e}"
                ) from None
            ranked, choice = self._tuned([builder], node, graph, key, device, router)
            return ranked, [], choice
        candidates = [
            b for b in self.registry.candidates(key, device.kind, node, graph, router.rank) if self._admits(b)
        ]
        preferred = graph.preferred_engine_id
        candidates.sort(key=lambda b: b.engine_id != preferred)
        why: list[str] = []
        accepted: list[PlanBuilder] = []
        for builder in candidates:
            try:
                builder.check(node, graph, device)
            except NotSupported as e:
                if not accepted:  # a decline after the heuristic's first pick changes nothing
                    why.append(f"{builder.name} (#{builder.engine_id}): {e}")
                continue
            accepted.append(builder)
        if accepted:
            ranked, choice = self._tuned(accepted, node, graph, key, device, router)
            return ranked, why, choice
        for b in self.registry.builders():
            if b.device == device.kind and self._admits(b) and b.serves(key) and b.available() is not None:
                why.append(f"{b.name} (#{b.engine_id}): unavailable: {b.available()}")
        detail = "; ".join(why) if why else f"no {self.backend} builder serves this key"
        raise NoPlanError(f"node '{node.name}' {key}: no plan: {detail}")

    def _tuned(
        self, builders: list[PlanBuilder], node: Node, graph: Graph, key: SignatureKey, device: Device, router: Router
    ) -> tuple[list[Candidate], autotune.Choice | None]:
        """The builders' candidates (one per configuration), ordered by the router: its pick first."""
        candidates = candidates_of(builders, [node], graph, device)
        return router.choose(
            candidates, graph, node_shape(node, key), device, self.memory, build_node(node, graph, key, device)
        )

    def _find(self, engine: Engine, node: Node | None = None) -> PlanBuilder:
        try:
            return self.registry.find(engine)
        except RegistryError as e:
            raise NoPlanError(f"node '{node.name}': {e}" if node is not None else str(e)) from None

    def _admits(self, builder: PlanBuilder) -> bool:
        """The gpu-reference backend runs only the GPU reference's builders; no other backend runs them
        (they are validation's truth, never a fast builder's stand-in)."""
        return (builder.library == GPU_REFERENCE_LIBRARY) == (self.backend == "gpu-reference")

    def _unfit(self, builder: PlanBuilder, key: SignatureKey, device: Device) -> str | None:
        if builder.device != device.kind:
            return f"runs on {builder.device}, this executor on {device.kind}"
        if not self._admits(builder):
            return f"is not one the {self.backend} backend runs"
        if not builder.serves(key):
            return "does not serve this key"
        reason = builder.available()
        return f"is unavailable: {reason}" if reason else None

    # -- execute -------------------------------------------------------------
    def execute(
        self,
        plan: ExecutionPlan,
        variant_pack: Mapping[Any, Any],
        *,
        to_host: bool = True,
        capture: dict[str, Any] | None = None,
        out: str = "numpy",
        on_step: Callable[[int, Step, float], None] | None = None,
    ) -> dict[str, Any]:
        """Run ``plan``; return every output by name (written in place when given: a NumPy array given comes
        back itself, a torch tensor as a NumPy view of it on the reference backend and itself on the GPU's).

        Outputs missing from the pack are allocated; on the GPU backend they
        come back as host arrays when ``to_host`` is true. A ``capture`` dict
        receives a copy of every tensor a step writes, taken right after
        that step (before its buffer is reused; on the host when ``to_host``,
        else where the tensor is): validation compares step by step with it. Tensors inside a region are never captured (they never
        exist in memory). Capturing synchronizes after each step.
        ``out="torch"`` returns host outputs as torch tensors sharing their
        memory (every dtype, bfloat16 and fp8 included); ``"numpy"`` (the
        default) as NumPy arrays. Host arrays also export ``__dlpack__``.
        ``on_step(index, step, seconds)`` is called after each step with the
        time it took (the device is synchronized after each step then, so
        the times are real): profiles and progress displays hang on it.
        """
        if out not in OUTPUT_KINDS:
            raise UsageError(f"execute(out={out!r}): expected one of {', '.join(OUTPUT_KINDS)}")
        if not isinstance(plan, ExecutionPlan):
            raise UsageError(f"execute() takes an ExecutionPlan from prepare(), not {type(plan).__name__}")
        bound = getattr(self.memory, "bound", None)  # the GPU's fast path: memory and launches bound once per plan
        if bound is not None and capture is None and on_step is None:
            result = bound(plan, self.cuda_graphs).run(variant_pack, to_host)
            return self._deliver_as(result, out)
        result = run_steps(plan, self.memory.session(), self.device, variant_pack, to_host, capture, on_step)
        return self._deliver_as(result, out)

    def execute_keyed(self, plan: ExecutionPlan, uids: tuple[int, ...], tensors: Sequence[Any]) -> None:
        """Run ``plan`` on torch ``tensors`` given for ``uids`` (outputs written in place), for a caller that has
        matched their dims, strides and dtypes to the graph's itself, as sigdnn.torch's cached graphs do by their
        key: after one call checked in full, the GPU backend reads only their devices and addresses
        (``BoundPlan.run_keyed``)."""
        if not isinstance(plan, ExecutionPlan) or len(uids) != len(tensors):
            raise UsageError("execute_keyed() takes an ExecutionPlan from prepare() and one tensor per uid")
        bound = getattr(self.memory, "bound", None)
        if bound is None or not bound(plan, self.cuda_graphs).run_keyed(uids, tensors):
            self.execute(plan, dict(zip(uids, tensors, strict=True)), to_host=False)

    @staticmethod
    def _deliver_as(result: dict[str, Any], out: str) -> dict[str, Any]:
        if out == "torch":
            return {name: to_torch(a) if isinstance(a, np.ndarray) else a for name, a in result.items()}
        return result

    def run(self, source: GraphSource, variant_pack: Mapping[Any, Any], **kw: Any) -> dict[str, Any]:
        """prepare + execute in one call."""
        return self.execute(self.prepare(source), variant_pack, **kw)
