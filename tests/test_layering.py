"""The import graph points one way: graph -> keys -> registry -> builders -> executor -> validation -> campaign -> CLI.

Two views of it. Statically, every ``import`` and ``from ... import`` in every
module of ``sigdnn`` (at module level, inside functions, under
``TYPE_CHECKING``) and every ``importlib.import_module`` of a literal
``sigdnn.`` name is mapped to its layer: none may run to a layer that is not
below its own, and no layers import each other in a circle. At run time,
each layer imported in a fresh interpreter pulls in only itself and what
lies below it (the runtime layer sits under the builders; nothing imports
the CLI).
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sigdnn

# Each layer and the layers directly below it; a layer may import what lies below it, transitively.
# A builder library under plan_builders is a layer of its own: libraries share code only through the
# modules of plan_builders itself.
BELOW: dict[str, tuple[str, ...]] = {
    "sigdnn.errors": (),
    "sigdnn.schemas": (),
    "sigdnn.dtypes": ("sigdnn.errors", "sigdnn.schemas"),
    "sigdnn.io": ("sigdnn.dtypes",),
    "sigdnn.graph": ("sigdnn.io",),
    "sigdnn.signature_keys": ("sigdnn.graph",),
    "sigdnn.runtime": ("sigdnn.graph",),
    "sigdnn.registry": ("sigdnn.signature_keys", "sigdnn.runtime"),
    "sigdnn.accuracy": ("sigdnn.registry",),
    "sigdnn.plan_builders": ("sigdnn.registry",),
    "sigdnn.plan_builders.reference": ("sigdnn.plan_builders",),
    # the cuTile float32 library's offline fit reads the reference's special functions
    "sigdnn.plan_builders.cutile": ("sigdnn.plan_builders", "sigdnn.plan_builders.reference"),
    "sigdnn.plan_builders.cute": ("sigdnn.plan_builders",),
    # the GPU reference runs its kernels on cuTile's emulator for the CPU tests, and shares the CPU
    # reference's resample tables
    "sigdnn.plan_builders.gpu_reference": (
        "sigdnn.plan_builders",
        "sigdnn.plan_builders.reference",
        "sigdnn.plan_builders.cutile",
    ),
    "sigdnn.executor": ("sigdnn.registry", "sigdnn.accuracy", "sigdnn.importers"),  # prepare(path) reads any format
    "sigdnn.validation": ("sigdnn.executor", "sigdnn.plan_builders.gpu_reference"),  # whether the GPU truth can run
    "sigdnn.campaign": ("sigdnn.validation",),
    "sigdnn.importers": ("sigdnn.graph",),
    "sigdnn.models": ("sigdnn.graph",),  # whole-model graphs built with the graph API
    "sigdnn": ("sigdnn.validation",),  # the package's public names, loaded on first use
    "sigdnn.cli": ("sigdnn", "sigdnn.campaign", "sigdnn.importers"),
    "sigdnn.cudnn": ("sigdnn", "sigdnn.importers"),  # cuDNN-frontend's Python API over the public one
    "sigdnn.torch": ("sigdnn.executor",),  # torch ops running sigdnn graphs
    "sigdnn.__main__": ("sigdnn.cli",),
}
PACKAGE = Path(sigdnn.__file__).parent


@functools.cache
def allowed(layer: str) -> frozenset[str]:
    """``layer`` and every layer below it."""
    return frozenset({layer}).union(*(allowed(lower) for lower in BELOW[layer]))


def layer_of(module: str) -> str:
    """The layer a sigdnn module belongs to: its longest prefix named in BELOW (a module directly
    under ``sigdnn`` and a builder library under ``plan_builders`` must be named themselves)."""
    parts = module.split(".")
    for n in range(len(parts), 1 if len(parts) == 2 else 0, -1):
        prefix = ".".join(parts[:n])
        unnamed_library = (
            prefix == "sigdnn.plan_builders" and len(parts) > 2 and (PACKAGE / parts[1] / parts[2]).is_dir()
        )
        if prefix in BELOW and not unnamed_library:
            return prefix
    raise AssertionError(f"{module} is in no layer of tests/test_layering.py")


def modules() -> dict[str, Path]:
    """Every module of the sigdnn package by its dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported sigdnn module or package, line) for every import anywhere in a module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            yield source, node.lineno
            yield from ((f"{source}.{alias.name}", node.lineno) for alias in node.names)
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            name = _literal_prefix(node.args[0])
            if name:
                yield name, node.lineno


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )


def _literal_prefix(arg: ast.expr) -> str | None:
    """The module a literal (or an f-string's literal head, up to its last dot) names."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rpartition(".")[0] or None
    return None


@functools.cache
def arrows() -> dict[tuple[str, str], list[str]]:
    """(importing layer, imported layer) -> where ('module:line'), over every import between two layers."""
    known = modules()
    found: dict[tuple[str, str], list[str]] = {}
    for module, path in known.items():
        for target, line in imports(module, path):
            if target != "sigdnn" and not target.startswith("sigdnn."):
                continue
            while target not in known:  # `from package import name`: the name is no module
                target = target.rpartition(".")[0]
            source_layer, target_layer = layer_of(module), layer_of(target)
            where = f"{module}:{line}"
            if source_layer != target_layer and where not in found.get((source_layer, target_layer), ()):
                found.setdefault((source_layer, target_layer), []).append(where)
    return found


def test_every_import_runs_from_a_layer_to_one_below_it() -> None:
    upward = {
        f"{source} -> {target}": where for (source, target), where in arrows().items() if target not in allowed(source)
    }
    assert not upward, f"imports that run up or across the layers: {upward}"


def test_no_layers_import_each_other_in_a_circle() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in arrows():
        graph.setdefault(source, set()).add(target)

    def circle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            layer, path = stack.pop()
            for nxt in sorted(graph.get(layer, ())):
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    circles = {" -> ".join(c) for layer in sorted(graph) if (c := circle_from(layer)) and layer == min(c)}
    assert not circles, f"import circles: {sorted(circles)}"


def test_the_layer_map_names_every_module_and_what_it_allows_is_itself_acyclic() -> None:
    for module in modules():
        layer_of(module)  # raises for a module in no layer
    for layer in BELOW:
        assert all(layer not in allowed(lower) for lower in BELOW[layer]), layer


def test_the_static_reader_sees_imports_inside_functions_and_dynamic_ones(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "import importlib\n"
        "def f():\n"
        "    from sigdnn.validation.checks import validate\n"
        "    import sigdnn.executor\n"
        "    return importlib.import_module(f'sigdnn.importers.{f}')\n"
        "from . import sibling\n"
    )
    found = sorted(imports("sigdnn.graph.probe", module))
    assert ("sigdnn.validation.checks", 3) in found and ("sigdnn.validation.checks.validate", 3) in found
    assert ("sigdnn.executor", 4) in found and ("sigdnn.importers", 5) in found
    assert ("sigdnn.graph.sibling", 6) in found


# -- at run time ---------------------------------------------------------------------------------------------
RUNTIME_BASE = {"sigdnn", "sigdnn.dtypes", "sigdnn.errors", "sigdnn.schemas", "sigdnn.io"}
LAYERS: dict[str, set[str]] = {
    "sigdnn.graph": {"sigdnn.graph"},
    "sigdnn.signature_keys": {"sigdnn.graph", "sigdnn.signature_keys"},
    "sigdnn.runtime": {"sigdnn.graph", "sigdnn.runtime"},
    "sigdnn.registry": {"sigdnn.graph", "sigdnn.signature_keys", "sigdnn.runtime", "sigdnn.registry"},
    "sigdnn.plan_builders.reference": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.plan_builders",
    },
    "sigdnn.executor": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.accuracy",
        "sigdnn.executor",
    },
    "sigdnn.validation": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.accuracy",
        "sigdnn.executor",
        "sigdnn.validation",
    },
    "sigdnn.models": {"sigdnn.graph", "sigdnn.models"},
    "sigdnn.campaign": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.accuracy",
        "sigdnn.executor",
        "sigdnn.validation",
        "sigdnn.campaign",
    },
}


def imported_by(module: str) -> list[str]:
    code = (
        f"import json, sys, importlib; importlib.import_module({module!r}); "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'sigdnn' or m.startswith('sigdnn.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _runtime_layer_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in RUNTIME_BASE or any(prefix == allowed for layer in LAYERS.values() for allowed in layer):
            return prefix
    return module


@pytest.mark.parametrize("layer", list(LAYERS))
def test_a_layer_imports_only_itself_and_what_lies_below(layer: str) -> None:
    allowed_here = LAYERS[layer] | RUNTIME_BASE
    strays = [m for m in imported_by(layer) if _runtime_layer_of(m) not in allowed_here]
    assert not strays, f"{layer} pulled in {strays}"


def test_campaigns_import_ray_only_when_one_runs() -> None:
    code = (
        "import sys, sigdnn.campaign, sigdnn.campaign.runner, sigdnn.campaign.command; "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_builders_never_import_the_executor_and_import_sigdnn_imports_no_layer() -> None:
    assert not [m for m in imported_by("sigdnn.plan_builders.cutile.pointwise") if m.startswith("sigdnn.executor")]
    assert imported_by("sigdnn") == ["sigdnn"]
