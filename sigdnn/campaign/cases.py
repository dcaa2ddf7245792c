"""Cases: the spec expanded into (graph, seed, engine) triples, each with a content address.

A case's id hashes the graph's bytes, the seed, the backend, the pinned
engine and any tolerance override: resuming skips every id already in the
results, and an edited spec keeps the results of the cases it did not
change. The reference key (graph digest + seed) is what engines share.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator
from typing import Any

import attrs

from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.campaign.recipes import RECIPES, GraphRecipe
from sigdnn.campaign.spec import Generator, Spec, SpecError, check_case_count
from sigdnn.errors import SigdnnError
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits


@attrs.frozen
class Case:
    case_id: str
    graph: bytes
    digest: str  # of the graph bytes: with the seed, the reference's cache key
    name: str
    seed: int
    backend: str
    engine: int | str | None
    tolerance: Tolerance | None
    recipe: GraphRecipe | None  # None for a graph file (nothing to shrink)
    source: str  # the file, or the recipe's label

    @property
    def reference_key(self) -> str:
        return f"{self.digest}:{self.seed}"


@attrs.frozen
class CaseList:
    cases: tuple[Case, ...]
    skipped: tuple[tuple[str, str], ...]  # (what, why): combinations no graph can be made of


def graph_digest(data: bytes) -> str:
    """The executor's digest of graph bytes (``Executor.prepare`` caches by the same)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def case_id(digest: str, seed: int, backend: str, engine: int | str | None, tolerance: Tolerance | None) -> str:
    key = repr((digest, seed, backend, engine, None if tolerance is None else (tolerance.atol, tolerance.rtol)))
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def make_case(
    graph: bytes, name: str, seed: int, spec: Spec, engine: int | str | None, recipe: GraphRecipe | None, source: str
) -> Case:
    digest = graph_digest(graph)
    return Case(
        case_id(digest, seed, spec.backend, engine, spec.tolerance),
        graph,
        digest,
        name,
        seed,
        spec.backend,
        engine,
        spec.tolerance,
        recipe,
        source,
    )


def recipes_of(generator: Generator) -> Iterator[GraphRecipe]:
    """Every combination one [[generate]] table asks for (attributes only where the mode reads them)."""
    recipe = RECIPES.get(generator.op)
    if recipe is None:
        raise SpecError(f"generate: no recipe for op {generator.op!r}; generators exist for {', '.join(RECIPES)}")
    modes: tuple[str | None, ...] = generator.modes or recipe.modes or (None,)
    if recipe.modes:
        unknown = [m for m in modes if m not in recipe.modes]
        if unknown:
            raise SpecError(f"generate: op {generator.op} has no mode(s) {', '.join(map(str, unknown))}")
    elif generator.modes:
        raise SpecError(f"generate: op {generator.op} takes no modes")
    for mode in modes:
        sweeps = [(name, values) for name, values in generator.attributes if recipe.accepts(mode, name)]
        names = [name for name, _ in sweeps]
        for values in itertools.product(*(v for _, v in sweeps)):
            attributes = tuple(zip(names, values))
            for dtype, shape, layout in itertools.product(generator.dtypes, generator.shapes, generator.layouts):
                yield GraphRecipe(generator.op, mode, dtype, shape, layout, attributes, generator.compute_dtype)


def count_cases(spec: Spec) -> int:
    """How many cases the spec asks for at most, from its lists' lengths alone (nothing is built)."""
    combinations = len(spec.files)
    for generator in spec.generators:
        recipe = RECIPES.get(generator.op)
        modes = len(generator.modes) or (len(recipe.modes) if recipe is not None else 0) or 1
        sweeps = math.prod(len(values) for _, values in generator.attributes)
        combinations += modes * sweeps * len(generator.dtypes) * len(generator.shapes) * len(generator.layouts)
    return combinations * len(spec.seeds) * len(spec.engines)


def generate_cases(spec: Spec, limits: Limits = DEFAULT_LIMITS, max_file_bytes: int | None = None) -> CaseList:
    """The spec's cases, each (graph, seed, engine) once, in spec order; counted and capped before any is built."""
    check_case_count(count_cases(spec), "campaign spec")
    from sigdnn.graph.checks import check_graph
    from sigdnn.graph.deserialize import deserialize
    from sigdnn.io import DEFAULT_MAX_GRAPH_FILE_BYTES, read_graph_file

    if spec.files:
        import sigdnn.importers  # noqa: F401  (registers the foreign graph formats read_graph_file detects)

    graphs: list[tuple[bytes, str, GraphRecipe | None, str]] = []
    skipped: list[tuple[str, str]] = []
    for generator in spec.generators:
        for recipe in recipes_of(generator):
            try:
                graph = recipe.build()
                check_graph(graph, limits)
            except SigdnnError as e:  # a combination the op does not take (a layout of another rank, ...)
                skipped.append((recipe.label(), str(e)))
                continue
            graphs.append((graph.serialize(), graph.name, recipe, recipe.label()))
    for path in spec.files:
        data = read_graph_file(path, max_bytes=max_file_bytes or DEFAULT_MAX_GRAPH_FILE_BYTES)
        graphs.append((data, deserialize(data, limits=limits).name, None, str(path)))
    cases: dict[str, Case] = {}
    for (data, name, recipe, source), seed, engine in itertools.product(graphs, spec.seeds, spec.engines):
        case = make_case(data, name, seed, spec, engine, recipe, source)
        cases.setdefault(case.case_id, case)
    return CaseList(tuple(cases.values()), tuple(skipped))


def describe(case: Case) -> dict[str, Any]:
    """What a results row says about the case itself (the verdict comes from the judge)."""
    return {
        "case": case.case_id,
        "graph": case.name,
        "source": case.source,
        "digest": case.digest,
        "seed": case.seed,
        "backend": case.backend,
        "engine": case.engine,
    }
