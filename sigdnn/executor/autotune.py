"""Measured builder choice: time each candidate once per step shape, keep the fastest that validates, remember it.

When several builders (or one builder's several configurations) could run a
step — a node whose key they serve, or the same set of nodes claimed as a
region by several fusion builders — ``Tuner`` decides which runs:

1. **Cached**: the on-disk record for the step's identity — its pattern key
   (node keys and internal edges), the dims, strides and dtypes of every
   tensor it touches, the device's name and the versions of sigdnn and of
   every candidate's library — names the winner. A version change or another
   device is another identity, so a stale record is never used.
2. **Measured** (``Executor(..., autotune=True)``, on a miss): every
   candidate that accepts the step is built, run once on random inputs and
   checked against the reference (the same tolerances as ``validate``); the
   ones that pass are timed (``timer``: median of repeated runs, device
   synchronized around them); the fastest wins and the record is written,
   with every candidate's time, so the next process starts with the choice.
3. **Heuristic** otherwise (no record, no autotune): the registry's ranking —
   higher ``priority`` first (a builder's claim to the stronger kernel: the
   CuTe GEMM 2, the cuTile matmul 1, the rest 0), then the lower engine id —
   and each builder's default configuration.

Records live in one JSON file, ``$SIGDNN_CACHE_DIR/autotune.json`` (else
``~/.cache/sigdnn/autotune.json``), rewritten atomically and merged with what
other processes wrote meanwhile. The check and the random inputs come from
``sigdnn.accuracy``, below the executor (validation, above it, uses the same).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sigdnn.errors import NotSupported
from sigdnn.executor.router import Router
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.io.files import FileError, read_regular_file, write_file
from sigdnn.registry.contracts import BuildContext, PlanBuilder, RegionContext, StepPlan
from sigdnn.registry.regions import Region
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

# A library's distribution on the package index (its version joins the cache identity).
DISTRIBUTIONS = {"reference": "numpy", "cutile": "cuda-tile", "cute": "nvidia-cutlass-dsl"}
MAX_CACHE_BYTES = 64 << 20  # records are a few hundred bytes each: a bigger file is not ours
Timer = Callable[[str, Callable[[], None], Callable[[], None]], float]  # (label, run, synchronize) -> seconds
# (graph, nodes, written uids, inputs by name) -> a judge of outputs by name: None when they pass, else why not
Check = Callable[
    [Graph, Sequence[Node], Sequence[int], Mapping[str, np.ndarray]], Callable[[Mapping[str, np.ndarray]], str | None]
]


def cache_path() -> Path:
    base = os.environ.get("SIGDNN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "sigdnn")
    return Path(base) / "autotune.json"


def library_versions(builders: Sequence[PlanBuilder]) -> dict[str, str]:
    """sigdnn's version and each candidate library's (its distribution's, or "unknown")."""
    found = {"sigdnn": _version("sigdnn")}
    for b in builders:
        found[b.library] = _version(DISTRIBUTIONS.get(b.library, b.library))
    return dict(sorted(found.items()))


@functools.cache
def _version(distribution: str) -> str:
    from importlib import metadata  # here: importing it costs a cold `sigdnn run` 10 ms it rarely needs

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def device_name(device: Device) -> str:
    """The GPU's name from the driver (or from a context that names itself: the emulator), or the host's machine
    type for CPU builders."""
    if device.kind != "gpu":
        return f"cpu:{platform.machine()}"
    named = getattr(device.context, "name", None)
    if isinstance(named, str):
        return named
    from cuda.bindings import driver

    ordinal = int(getattr(device.context, "device_id", 0) or 0)
    _, dev = driver.cuDeviceGet(ordinal)
    _, name = driver.cuDeviceGetName(64, dev)
    return name.split(b"\0", 1)[0].decode()


@attrs.frozen
class Candidate:
    builder: PlanBuilder
    config: str | None = None  # a label from the builder's ``configs``; None: its default

    @property
    def label(self) -> str:
        return f"{self.builder.name}[{self.config}]" if self.config else self.builder.name


@attrs.frozen
class Trial:
    label: str
    seconds: float | None  # None: not timed (declined, failed validation)
    note: str = ""


@attrs.frozen
class Choice:
    """What a step runs and why: measured now, read from the cache, or the heuristic's first."""

    label: str
    source: str  # "measured", "cached" or "heuristic"
    trials: tuple[Trial, ...] = ()

    def summary(self) -> str:
        """e.g. ``measured: cute.matmul 212.0 us, 1.08x faster than cutile.matmul[128x128x64g8] (229.1 us)``."""
        timed = sorted((t for t in self.trials if t.seconds is not None), key=lambda t: t.seconds or 0.0)
        text = f"{self.source}: {self.label}"
        if timed and timed[0].label == self.label:
            text += f" {timed[0].seconds * 1e6:.1f} us"  # type: ignore[operator]
            if len(timed) > 1:
                runner = timed[1]
                ratio = runner.seconds / timed[0].seconds if timed[0].seconds else float("inf")  # type: ignore[operator]
                text += f", {ratio:.2f}x faster than {runner.label} ({runner.seconds * 1e6:.1f} us)"  # type: ignore[operator]
        failed = [f"{t.label}: {t.note}" for t in self.trials if t.seconds is None]
        return text + (f"; not chosen: {'; '.join(failed)}" if failed else "")


class TuningCache:
    """Records by step identity, in one JSON file shared by processes."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self._records: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(bytes(read_regular_file(self.path, what="tuning cache", max_bytes=MAX_CACHE_BYTES)))
        except (FileError, ValueError):  # missing, not a file, oversized or damaged: measure again
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, identity: str) -> dict[str, Any] | None:
        with self._lock:
            if self._records is None:
                self._records = self._read()
            found = self._records.get(identity)
            return found if isinstance(found, dict) else None

    def put(self, identity: str, record: dict[str, Any]) -> None:
        """Merge with the file as it is now, then replace it atomically (a failed write costs only a re-measure)."""
        with self._lock:
            records = {**self._read(), identity: record}
            self._records = records
            text = json.dumps(records, indent=1, sort_keys=True).encode()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_file(self.path, lambda f: f.write(text), what="tuning cache")
            except (OSError, FileError):
                pass


def wall_timer(label: str, run: Callable[[], None], synchronize: Callable[[], None]) -> float:
    """Median seconds per run: warm up, then batches of back-to-back runs between synchronizations."""
    run()
    synchronize()
    start = time.perf_counter()
    run()
    synchronize()
    once = max(time.perf_counter() - start, 1e-7)
    per_batch = max(1, min(50, int(0.01 / once)))
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(per_batch):
            run()
        synchronize()
        samples.append((time.perf_counter() - start) / per_batch)
    import statistics  # here: it imports decimal and fractions, 15 ms of a cold `sigdnn run`

    return statistics.median(samples)


def reference_check(
    graph: Graph, nodes: Sequence[Node], writes: Sequence[int], inputs: Mapping[str, np.ndarray]
) -> Callable[[Mapping[str, np.ndarray]], str | None]:
    """The reference's judge of a step's outputs on ``inputs`` (computed once, shared by every candidate)."""
    from sigdnn.accuracy.step_reference import step_judge
    from sigdnn.executor.executor import Executor
    from sigdnn.registry.registry import REFERENCE_ONLY

    reference = Executor("reference", fusion=False, registry=REFERENCE_ONLY).prepare(graph)
    return step_judge(graph, nodes, writes, inputs, {s.node.name: s for s in reference.steps})


@attrs.frozen
class StepShape:
    """What a candidate is measured on: the step's nodes, the tensors it reads and writes, its pattern."""

    nodes: tuple[Node, ...]
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    pattern: Any
    by_port: bool  # a node plan takes its buffers by port; a region plan by uid


class Tuner(Router):
    """A router that orders a step's candidates: the cached or measured winner first, else the heuristic order."""

    def __init__(
        self,
        *,
        measure: bool = True,
        timer: Timer = wall_timer,
        check: Check = reference_check,
        cache: TuningCache | None = None,
        device_name: Callable[[Device], str] = device_name,
        versions: Callable[[Sequence[PlanBuilder]], dict[str, str]] = library_versions,
        seed: int = 0,
    ) -> None:
        self.measure = measure
        self.timer = timer
        self.check = check
        self.cache = cache if cache is not None else TuningCache()
        self.device_name = device_name
        self.versions = versions
        self.seed = seed
        self.measured = 0  # steps timed by this tuner (tests check a cached choice times nothing)

    def identity(self, graph: Graph, shape: StepShape, device: Device, builders: Sequence[PlanBuilder]) -> str:
        tensors = []
        for uid in (*shape.reads, *shape.writes):
            t = graph.tensors[uid]
            tensors.append([list(t.dims), list(t.strides), str(graph.dtype_of(t))])
        what = {
            "pattern": repr(shape.pattern),
            "tensors": tensors,
            "device": self.device_name(device),
            "versions": self.versions(builders),
        }
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    def choose(
        self,
        candidates: Sequence[Candidate],
        graph: Graph,
        shape: StepShape,
        device: Device,
        memory: Any,
        build: Callable[[Candidate], StepPlan],
    ) -> tuple[list[Candidate], Choice | None]:
        """``candidates`` with the chosen one first (None when there was nothing to choose among)."""
        if len(candidates) < 2:
            return list(candidates), None
        identity = self.identity(graph, shape, device, [c.builder for c in candidates])
        labels = [c.label for c in candidates]
        record = self.cache.get(identity)
        if record is not None and record.get("label") in labels:
            trials = tuple(Trial(t[0], t[1], t[2]) for t in record.get("trials", ()))
            return _first(candidates, labels.index(record["label"])), Choice(record["label"], "cached", trials)
        if not self.measure:
            return list(candidates), Choice(labels[0], "heuristic")
        trials = self._measure(candidates, graph, shape, device, memory, build)
        self.measured += 1
        timed = [t for t in trials if t.seconds is not None]
        if not timed:
            return list(candidates), Choice(labels[0], "heuristic", tuple(trials))
        best = min(timed, key=lambda t: t.seconds or 0.0)
        self.cache.put(identity, {"label": best.label, "trials": [[t.label, t.seconds, t.note] for t in trials],
                                  "graph": graph.name, "nodes": [n.name for n in shape.nodes]})  # fmt: skip
        return _first(candidates, labels.index(best.label)), Choice(best.label, "measured", tuple(trials))

    def _measure(
        self,
        candidates: Sequence[Candidate],
        graph: Graph,
        shape: StepShape,
        device: Device,
        memory: Any,
        build: Callable[[Candidate], StepPlan],
    ) -> list[Trial]:
        from sigdnn.accuracy.inputs import random_array

        session = memory.session()
        rng = np.random.default_rng(self.seed)
        host: dict[str, np.ndarray] = {}
        buffers: dict[int, Any] = {}
        for uid in shape.reads:
            t = graph.tensors[uid]
            dtype = graph.dtype_of(t)
            value = t.constant() if t.data is not None else None
            if t.value is not None:
                value = np.full(t.dims, t.scalar(), dtype=dtype.numpy)
            host[t.name] = random_array(rng, t.dims, dtype) if value is None else value
            buffers[uid] = session.accept(host[t.name], t, dtype, writable=False)
        for uid in shape.writes:
            t = graph.tensors[uid]
            buffers[uid] = session.new_output(t, graph.dtype_of(t))
        judge = None
        trials = []
        for candidate in candidates:
            try:
                plan = build(candidate)
            except NotSupported as e:
                trials.append(Trial(candidate.label, None, f"declined: {e}"))
                continue
            context = ExecutionContext(device, session.stream, session.workspace(plan.workspace_bytes))
            keyed = {p: buffers[u] for p, u in shape.nodes[0].op.ports().items()} if shape.by_port else buffers
            run = _runner(plan, keyed, context)
            run()
            session.synchronize()
            if judge is None:
                judge = self.check(graph, shape.nodes, shape.writes, host)
            problem = judge({graph.tensors[u].name: session.snapshot(buffers[u]) for u in shape.writes})
            if problem is not None:
                trials.append(Trial(candidate.label, None, f"failed validation: {problem}"))
                continue
            trials.append(Trial(candidate.label, self.timer(candidate.label, run, session.synchronize)))
        return trials


def _first(candidates: Sequence[Candidate], index: int) -> list[Candidate]:
    return [candidates[index], *candidates[:index], *candidates[index + 1 :]]


def _runner(plan: StepPlan, buffers: Mapping[Any, Any], context: ExecutionContext) -> Callable[[], None]:
    """The cheapest way to run the plan again: its bound launch where it has one."""
    bind = getattr(plan, "bind", None)
    if bind is not None:
        return bind(buffers, context)
    return lambda: plan.execute(buffers, context)


def candidates_of(
    builders: Sequence[PlanBuilder], nodes: Sequence[Node], graph: Graph, device: Device
) -> list[Candidate]:
    """One candidate per configuration a builder offers for the step (its default alone when it offers none)."""
    found = []
    for b in builders:
        configs = getattr(b, "configs", None)
        labels = configs(nodes, graph, device) if configs is not None else []
        found.extend([Candidate(b, c) for c in labels] or [Candidate(b)])
    return found


def node_shape(node: Node, key: SignatureKey) -> StepShape:
    ins = tuple(dict.fromkeys(node.op.inputs().values()))
    return StepShape((node,), ins, tuple(node.op.outputs().values()), (key,), by_port=True)


def region_shape(region: Region, graph: Graph) -> StepShape:
    return StepShape(tuple(region.node_list(graph)), region.entries, region.exits, region.pattern, by_port=False)


def build_node(node: Node, graph: Graph, key: SignatureKey, device: Device) -> Callable[[Candidate], StepPlan]:
    return lambda c: c.builder.build(node, graph, BuildContext(key, device, graph, c.config))


def build_region(region: Region, graph: Graph, device: Device) -> Callable[[Candidate], StepPlan]:
    return lambda c: c.builder.build_region(region, graph, RegionContext(region.pattern[0], device, graph, c.config))  # type: ignore[attr-defined]


def order_claims(
    tuner: Router, claims: Sequence[tuple[Any, Region]], graph: Graph, device: Device, memory: Any
) -> list[tuple[Any, Region, str | None, Choice | None]]:
    """Fusion claims with, for every node set several builders (or configurations) claim, the chosen one first.

    The chosen claim takes the place of its group's first claim; the group's
    others follow it (the executor then skips them as overlapping).
    """
    groups: dict[frozenset[int], list[tuple[Any, Region]]] = {}
    for builder, region in claims:
        groups.setdefault(frozenset(region.nodes), []).append((builder, region))
    ordered: list[tuple[Any, Region, str | None, Choice | None]] = []
    for group in groups.values():
        region = group[0][1]
        by_builder = {b.name: r for b, r in group}
        candidates = candidates_of([b for b, _ in group], region.node_list(graph), graph, device)
        ranked, choice = tuner.choose(candidates, graph, region_shape(region, graph), device, memory,
                                      build_region(region, graph, device))  # fmt: skip
        ordered.extend((c.builder, by_builder[c.builder.name], c.config, choice if k == 0 else None)
                       for k, c in enumerate(ranked))  # fmt: skip
    return ordered
