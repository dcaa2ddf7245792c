"""Mutation testing for sigdnn's core modules: every mutant, each run against only the tests that reach it.

    python scripts/mutation.py                          # every module in mutation.toml
    python scripts/mutation.py sigdnn/dtypes.py         # one module
    python scripts/mutation.py sigdnn/dtypes.py --list  # the mutants, without running them
    python scripts/mutation.py sigdnn/dtypes.py --json out.json  # also write every outcome as JSON

Why not mutmut: mutmut 3 mutates only inside functions (the mode tables of
the reference are module-level lambdas), mutates every error message, and
selects tests by function, not by line. This tool makes one mutant per
syntactic change below (module level included, error messages and
docstrings left alone), and runs it like so:

- The parent imports the heavy third-party packages once (NumPy, torch,
  hypothesis, pytest) but no sigdnn module.
- A baseline run, traced line by line in the module under test, records which
  tests execute each line (and checks that they pass unmutated).
- Each mutant runs in a forked child whose import system serves the mutated
  module's code, with pytest given only the tests that execute the mutated
  lines (all the module's tests for code run at import time, by a decorator too), stopping at the
  first failure. A mutant no test reaches survives without a run; a child
  that runs past its time limit (an endless loop) or dies of a signal (a
  crash: NumPy aborting on a heap the mutant corrupted) counts as killed.

A mutant's id is its scope, the change and an occurrence number, so it
survives edits elsewhere in the file. ``[equivalent] of mutation.toml`` lists
the survivors that cannot change behaviour, each with the reason; the score
is killed / (mutants - equivalent).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType

import tomllib

ROOT = Path(__file__).resolve().parent.parent

# -- mutation operators --------------------------------------------------------
COMPARE_SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
BINOP_SWAPS: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub,),
    ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div,),
    ast.Div: (ast.Mult,),
    ast.FloorDiv: (ast.Div,),
    ast.Mod: (ast.FloorDiv,),
    ast.Pow: (ast.Mult,),
    ast.LShift: (ast.RShift,),
    ast.RShift: (ast.LShift,),
    ast.BitAnd: (ast.BitOr,),
    ast.BitOr: (ast.BitAnd,),
    ast.BitXor: (ast.BitOr,),
}
NAME_SWAPS = {"max": "min", "min": "max", "maximum": "minimum", "minimum": "maximum", "any": "all", "all": "any"}


@dataclass
class Mutant:
    id: str
    line: int
    end_line: int
    module_level: bool  # runs at import time rather than inside a function
    apply: Callable[[], None] = field(repr=False)


def _src(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first))
    return found


def _skipped_subtrees(tree: ast.AST) -> set[int]:
    """Nodes never mutated: imports, annotations, docstrings, messages (raise arguments, f-strings), asserts."""
    skip: set[int] = set()

    def skip_all(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assert, ast.JoinedStr)):
            skip_all(node)
        elif isinstance(node, ast.Raise):
            skip_all(node.exc)
            skip_all(node.cause)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skip_all(node.returns)
            for a in (
                *node.args.posonlyargs,
                *node.args.args,
                *node.args.kwonlyargs,
                node.args.vararg,
                node.args.kwarg,
            ):
                if a is not None:
                    skip_all(a.annotation)
            for d in node.decorator_list:
                skip_all(d)
        elif isinstance(node, ast.AnnAssign):
            skip_all(node.annotation)
    docs = _docstring_nodes(tree)  # once: recomputing it per node made enumeration quadratic
    skip.update(docs)
    for node in ast.walk(tree):
        if id(node) in docs:
            skip_all(node)
    return skip


def _replace_in_parent(parent: ast.AST, old: ast.AST, new: ast.AST) -> Callable[[], None]:
    def apply() -> None:
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new
                        return
        raise AssertionError("node not found in its parent")

    return apply


def _set(node: ast.AST, attribute: str, value: object) -> Callable[[], None]:
    return lambda: setattr(node, attribute, value)


def _node_mutations(node: ast.AST, parent: ast.AST) -> Iterator[tuple[str, Callable[[], None]]]:
    """(description, apply) for each mutant of one node."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            swap = COMPARE_SWAPS.get(type(op))
            if swap is not None:
                new_ops = [*node.ops[:i], swap(), *node.ops[i + 1 :]]
                mutated = ast.Compare(node.left, new_ops, node.comparators)
                yield f"{_src(node)} -> {_src(mutated)}", _set(node, "ops", new_ops)
    elif isinstance(node, ast.BinOp):
        for swap in BINOP_SWAPS.get(type(node.op), ()):
            yield f"{_src(node)} -> {_src(ast.BinOp(node.left, swap(), node.right))}", _set(node, "op", swap())
    elif isinstance(node, ast.AugAssign):
        for swap in BINOP_SWAPS.get(type(node.op), ()):
            mutated = ast.AugAssign(node.target, swap(), node.value)
            yield f"{_src(node)} -> {_src(mutated)}", _set(node, "op", swap())
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.Invert)):
        yield f"{_src(node)} -> {_src(node.operand)}", _replace_in_parent(parent, node, node.operand)
    elif isinstance(node, ast.BoolOp):
        swap = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield f"{_src(node)} -> {_src(ast.BoolOp(swap(), node.values))}", _set(node, "op", swap())
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield f"{v} -> {not v}", _set(node, "value", not v)
        elif isinstance(v, (int, float)) and not isinstance(parent, ast.UnaryOp):
            yield f"{v!r} -> {v + 1!r}", _set(node, "value", v + 1)
        elif isinstance(v, str) and v:
            yield f"{v!r} -> {'XX' + v + 'XX'!r}", _set(node, "value", "XX" + v + "XX")
    elif isinstance(node, ast.Name) and node.id in NAME_SWAPS and isinstance(parent, ast.Call) and parent.func is node:
        yield f"{node.id}() -> {NAME_SWAPS[node.id]}()", _set(node, "id", NAME_SWAPS[node.id])
    elif (
        isinstance(node, ast.Attribute)
        and node.attr in NAME_SWAPS
        and isinstance(parent, ast.Call)
        and parent.func is node
    ):
        yield f"{_src(node)}() -> .{NAME_SWAPS[node.attr]}()", _set(node, "attr", NAME_SWAPS[node.attr])
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield f"{_src(node)} -> return None", _set(node, "value", ast.Constant(None))
    elif isinstance(node, ast.Continue):
        yield "continue -> break", _replace_in_parent(parent, node, ast.Break())
    elif isinstance(node, ast.Break):
        yield "break -> continue", _replace_in_parent(parent, node, ast.Continue())
    if isinstance(node, (ast.Expr, ast.AugAssign, ast.Delete, ast.Raise)) or (
        isinstance(node, ast.Assign) and all(isinstance(t, (ast.Attribute, ast.Subscript)) for t in node.targets)
    ):
        yield f"delete `{_src(node)}`", _replace_in_parent(parent, node, ast.Pass())


def _scopes(tree: ast.AST) -> dict[int, str]:
    """Node id -> qualified name of the innermost function or class around it ('<module>' at the top)."""
    scope: dict[int, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.name if name == "<module>" else f"{name}.{child.name}"
            scope[id(child)] = inner
            visit(child, inner)

    visit(tree, "<module>")
    return scope


def _in_function(tree: ast.AST) -> set[int]:
    """Nodes whose code runs when a function or lambda is called rather than at import."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
        elif isinstance(node, ast.Lambda):
            inside.update(id(n) for n in ast.walk(node.body))
    return inside


def _enumerate(tree: ast.AST) -> list[Mutant]:
    """Every mutant of ``tree``, in a fixed order; each ``apply`` changes ``tree`` itself."""
    skip = _skipped_subtrees(tree)
    scope = _scopes(tree)
    inside = _in_function(tree)
    found: list[Mutant] = []
    seen: dict[str, int] = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            if id(child) in skip:
                continue
            for description, apply in _node_mutations(child, parent):
                base = f"{scope.get(id(child), '<module>')}: {description}"
                seen[base] = seen.get(base, 0) + 1
                mid = base if seen[base] == 1 else f"{base} #{seen[base]}"
                line = getattr(child, "lineno", getattr(parent, "lineno", 1))
                end = getattr(child, "end_lineno", line) or line
                found.append(Mutant(mid, line, end, id(child) not in inside, apply))
    return found


def mutants(source: str, path: str) -> list[Mutant]:
    return _enumerate(ast.parse(source, path))


def mutated_code(source: str, path: str, index: int) -> CodeType:
    """``source`` compiled with mutant number ``index`` applied to a fresh parse."""
    tree = ast.parse(source, path)
    _enumerate(tree)[index].apply()
    return compile(ast.fix_missing_locations(tree), path, "exec")


# -- running -------------------------------------------------------------------
class _MutatedModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module's code object in place of its file."""

    def __init__(self, name: str, path: str, code) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        package = [str(Path(self.path).parent)] if Path(self.path).name == "__init__.py" else None
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=self, submodule_search_locations=package
        )

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        exec(self.code, module.__dict__)


def _quiet_hypothesis() -> None:
    from hypothesis import Phase, settings

    # Deterministic, no example database, and no shrinking: a mutant needs one failing example, not the least.
    phases = [Phase.explicit, Phase.generate]
    settings.register_profile("mutation", database=None, derandomize=True, deadline=None, phases=phases)
    settings.load_profile("mutation")


AT_IMPORT = "<import>"  # what the tracer records for lines run while the tests are collected


class _LineTracer:
    """pytest plugin: which test executes which line of one file."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.lines: dict[int, set[str]] = {}
        self.durations: dict[str, float] = {}
        self.failed: list[str] = []
        self._test: str | None = None

    def _local(self, frame, event, arg):
        if event == "line" and self._test is not None:
            self.lines.setdefault(frame.f_lineno, set()).add(self._test)
        return self._local

    def _global(self, frame, event, arg):
        if frame.f_code.co_filename == self.filename:
            if self._test is not None:
                self.lines.setdefault(frame.f_lineno, set()).add(self._test)
            return self._local
        return None

    def pytest_sessionstart(self, session) -> None:
        """Trace collection too: a line that runs while the tests import (a decorator's body) reaches every test."""
        self._test = AT_IMPORT
        sys.settrace(self._global)

    def pytest_collection_finish(self, session) -> None:
        sys.settrace(None)
        self._test = None

    def pytest_runtest_setup(self, item) -> None:
        import threading

        self._test = item.nodeid
        self._start = time.perf_counter()
        sys.settrace(self._global)
        threading.settrace(self._global)

    def pytest_runtest_teardown(self, item) -> None:
        import threading

        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        self.durations[item.nodeid] = time.perf_counter() - self._start
        self._test = None

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.failed.append(report.nodeid)


def _pytest_args(tests: list[str]) -> list[str]:
    return ["-q", "-x", "-p", "no:cacheprovider", "--no-header", *tests]


def _in_child(fn: Callable[[], int], timeout: float) -> tuple[int, float]:
    """Run ``fn`` in a forked child; (its exit status, seconds). -9 when killed for time."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            code = fn()
        finally:
            os._exit(code)
    deadline = start + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.perf_counter() - start
        if time.perf_counter() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -9, time.perf_counter() - start
        time.sleep(0.01)


class _Only:
    """pytest plugin: run only these node ids. (Ids such as ``test[(3, 2)]`` cannot be given as arguments.)"""

    def __init__(self, nodeids: list[str]) -> None:
        self.wanted = set(nodeids)

    def pytest_collection_modifyitems(self, config, items) -> None:
        dropped = [item for item in items if item.nodeid not in self.wanted]
        items[:] = [item for item in items if item.nodeid in self.wanted]
        config.hook.pytest_deselected(items=dropped)


def _run_pytest(tests: list[str]) -> int:
    """Run the given node ids (their files collected, the rest deselected); pytest's exit code."""
    import pytest

    _quiet_hypothesis()
    files = list(dict.fromkeys(t.split("::")[0] for t in tests))
    return int(pytest.main(_pytest_args(files), plugins=[_Only(tests)]))


def _baseline(module_file: Path, tests: list[str]) -> tuple[dict[int, set[str]], dict[str, float]]:
    """Traced unmutated run: line -> tests, test -> seconds. Exits if a test fails."""
    import tempfile

    out = Path(tempfile.mkstemp(suffix=".json")[1])

    def run() -> int:
        import pytest

        _quiet_hypothesis()
        tracer = _LineTracer(str(module_file))
        code = pytest.main(_pytest_args(tests), plugins=[tracer])
        out.write_text(
            json.dumps(
                {
                    "lines": {k: sorted(v) for k, v in tracer.lines.items()},
                    "durations": tracer.durations,
                    "failed": tracer.failed,
                }
            )
        )
        return int(code)

    status, _ = _in_child(run, timeout=1800)
    data = json.loads(out.read_text() or "{}")
    out.unlink()
    if status != 0:
        sys.exit(f"baseline run of {tests} failed (exit {status}); failed tests: {data.get('failed')}")
    return {int(k): set(v) for k, v in data["lines"].items()}, data["durations"]


def _module_name(path: Path) -> str:
    """The dotted name Python imports ``path`` as: a package's ``__init__.py`` is the package itself."""
    parts = path.with_suffix("").relative_to(ROOT).parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed, timeout, crashed, survived, uncovered, error
    seconds: float


KILLS = ("killed", "timeout", "crashed")
MARKS = {"killed": ".", "timeout": "T", "crashed": "C", "survived": "S", "error": "E"}


def _verdict(status: int) -> str:
    """A mutant's outcome from its child's exit status (``_in_child``).

    pytest exits 1 when a test failed, 2 when collection failed (the mutated module does not import).
    -9 is the time limit. Any other signal is a crash (an abort, a segfault): the mutant broke the
    process the tests run in, which a CI run reports as failing too, so it is detected, as a timeout
    is (PIT counts its run and memory errors as kills likewise); the baseline and the unmutated run
    passed in the same harness, so the mutant caused it. pytest's exits 3-5 (internal error, usage
    error, no tests) mean the harness went wrong: not a kill.
    """
    if status == -9:
        return "timeout"
    if status < 0:
        return "crashed"
    return {0: "survived", 1: "killed", 2: "killed"}.get(status, "error")


def run_module(path: Path, tests: list[str], only: list[str] | None = None) -> list[Outcome]:
    source = path.read_text()
    name = _module_name(path)
    all_mutants = mutants(source, str(path))
    lines, durations = _baseline(path, tests)
    every = list(durations)  # collection order: some tests depend on the order they run in
    # The time limit covers a child's start and collection too: twice an unmutated run of every test.
    status, clean = _in_child(lambda: _run_pytest(every), timeout=1800)
    if status != 0:
        sys.exit(f"unmutated run of {tests} failed (exit {status})")
    budget = 10 + 2 * clean
    outcomes = []
    for index, m in enumerate(all_mutants):
        if only and not any(text in m.id for text in only):
            continue
        reaching = set().union(*(lines.get(n, set()) for n in range(m.line, m.end_line + 1)))
        selected = every if m.module_level or AT_IMPORT in reaching else [t for t in every if t in reaching]
        if not selected:
            outcomes.append(Outcome(m, "uncovered", 0.0))
            continue

        def run(index: int = index, selected: list[str] = selected) -> int:
            sys.meta_path.insert(0, _MutatedModule(name, str(path), mutated_code(source, str(path), index)))
            return _run_pytest(selected)

        status, seconds = _in_child(run, budget)
        verdict = _verdict(status)
        outcomes.append(Outcome(m, verdict, seconds))
        print(MARKS[verdict], end="", flush=True)
    print()
    return outcomes


def _config() -> dict:
    return tomllib.loads((ROOT / "mutation.toml").read_text())


def _preload() -> None:
    """Import heavy third-party packages once, in the parent, so each forked child starts warm."""
    for mod in ("numpy", "ml_dtypes", "attrs", "flatbuffers", "hypothesis", "pytest", "mpmath", "torch"):
        with contextlib.suppress(ImportError):
            __import__(mod)
    assert not any(m == "sigdnn" or m.startswith("sigdnn.") for m in sys.modules), "sigdnn imported in the parent"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help="module files (default: every one in [modules] of mutation.toml)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", action="append", help="run only mutants whose id contains this text (repeatable)")
    parser.add_argument("--json", help="write every outcome here (JSON)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    config = _config()
    modules = args.modules or list(config["modules"])
    if args.list:
        for module in modules:
            for m in mutants((ROOT / module).read_text(), module):
                print(f"{module}:{m.line}: {m.id}")
        return 0
    _preload()
    equivalent = config.get("equivalent", {})
    results = {}
    failed = False
    for module in modules:
        tests = config["modules"][module]
        start = time.perf_counter()
        print(f"{module} ({', '.join(tests)})")
        outcomes = run_module(ROOT / module, tests, args.only)
        known = equivalent.get(module, {})
        survivors = [o for o in outcomes if o.status in ("survived", "uncovered", "error")]
        equiv = [o for o in survivors if o.mutant.id in known]
        killed = sum(o.status in KILLS for o in outcomes)
        counted = len(outcomes) - len(equiv)
        score = killed / counted if counted else 1.0
        stale = sorted(set(known) - {o.mutant.id for o in outcomes}) if not args.only else []
        print(
            f"  {killed} killed / {counted} non-equivalent = {score:.1%} "
            f"({len(outcomes)} mutants, {len(equiv)} equivalent, {time.perf_counter() - start:.0f} s)"
        )
        for o in survivors:
            tag = "equivalent" if o in equiv else o.status.upper()
            print(f"  {tag}: line {o.mutant.line}: {o.mutant.id}")
        for s in stale:
            print(f"  STALE equivalent entry (no such mutant now): {s}")
        failed |= score < config.get("threshold", 0.9)
        results[module] = {
            "tests": tests,
            "mutants": len(outcomes),
            "killed": killed,
            "equivalent": len(equiv),
            "score": score,
            "survivors": [
                {"id": o.mutant.id, "line": o.mutant.line, "status": o.status, "why": known.get(o.mutant.id)}
                for o in survivors
            ],
        }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
