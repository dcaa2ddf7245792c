"""The ``sigdnn`` command: run, inspect and validate graphs, list builders.

Exit status: 0 success, 1 a validation that failed, 2 any error, reported as
ONE line on stderr that names the file and says what to do (never a
traceback; ``SIGDNN_TRACEBACK=1`` shows one for an internal error). A bare
``sigdnn`` prints the help and exits 2, as argparse does for a missing
command: nothing ran, and a script must not take it for success.

Files are read through :mod:`sigdnn.io` (regular files only, sizes capped
before reading). Tables and progress use ``rich``, imported here only and
only when something is shown, so ``import sigdnn`` stays light.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import sigdnn
from sigdnn.errors import SigdnnError, UsageError
from sigdnn.io import (
    DEFAULT_MAX_GRAPH_FILE_BYTES,
    DEFAULT_MAX_TENSOR_FILE_BYTES,
    Expected,
    FileError,
    format_bytes,
    parse_bytes,
    read_graph_file,
    read_tensor_file,
    write_file,
    write_tensor_file,
)
from sigdnn.io.files import shown

if TYPE_CHECKING:
    from sigdnn.executor.plan import Step

PROFILE_ROWS = 10  # slowest steps a profile lists

EXIT_FAILED, EXIT_ERROR = 1, 2
GPU_MODULES = {"cuda.core": "cuda-python", "cuda.tile": "cuda-tile", "cutlass": "nvidia-cutlass-dsl"}
_STATS_CHUNK = 1 << 20
# What to do, by error class, when the message itself does not say.
_ADVICE = {
    "SchemaError": "give a .sdg graph written by sigdnn (Graph.serialize, or the scripts in examples/)",
    "VariantPackError": "compare the inputs with `sigdnn inspect GRAPH` (names, dtypes, logical dims)",
    "NoPlanError": "`sigdnn builders` lists what each builder serves and why one is unavailable",
}


# -- sizes, memory, time ------------------------------------------------------------------------
def default_max_bytes() -> int:
    """A quarter of this machine's memory (at most the library's own limit): safe on a laptop.

    The reference widens operands to float64 and random inputs are drawn in
    float64, so a run takes a few times the graph's declared bytes.
    """
    library = sigdnn.Limits().max_total_bytes
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return library
    return min(library, max(memory // 4, 1 << 26))


def _seconds(t: float) -> str:
    if t < 1e-3:
        return f"{t * 1e6:.0f} µs"
    return f"{t * 1000:.0f} ms" if t < 1 else f"{t:.2f} s"


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; seeds are integers >= 0")
    return value


def _count(text: str) -> int:
    value = _seed(text)
    if value < 1:
        raise argparse.ArgumentTypeError("give at least 1")
    return value


def _engine(text: str) -> int | str:
    return int(text) if text.isdigit() else text


# -- output ---------------------------------------------------------------------------------------
class Screen:
    """stdout for results (tables, JSON), stderr for progress; rich only once something is drawn."""

    def __init__(self) -> None:
        self._out: Any = None

    @property
    def out(self) -> Any:
        if self._out is None:
            from rich.console import Console

            self._out = Console(markup=False, highlight=False, emoji=False)
            if not self._out.is_terminal:  # piped: lines as long as their content, for grep and scripts
                self._out.width = 1 << 16
        return self._out

    def line(self, text: str = "") -> None:
        print(text)

    def json(self, data: Any) -> None:
        print(json.dumps(data, indent=2, allow_nan=False))

    def table(self, title: str | None, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[str]]) -> None:
        """A table; columns are (header, "left" | "right")."""
        from rich import box
        from rich.table import Table

        sys.stdout.flush()
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)
        for header, justify in columns:
            table.add_column(header, justify=justify)
        for row in rows:
            table.add_row(*row)
        self.out.print(table)

    @contextlib.contextmanager
    def progress(self, total: int | None = None) -> Iterator[Any]:
        """A live display on stderr while something runs, when stderr is a terminal; yields update(text)."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = Console(stderr=True, markup=False, highlight=False)
        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns.append(TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("", total=total)

            def update(text: str, advance: int = 0) -> None:
                bar.update(task, description=text, advance=advance)

            yield update


# -- arguments ------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) that point at --help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def _graph_options(parser: argparse.ArgumentParser, backend_default: str = "reference") -> None:
    parser.add_argument(
        "--backend",
        default=backend_default,
        choices=("reference", "gpu"),
        help=f"where to run: the NumPy reference on the CPU or the GPU builders (default: {backend_default})",
    )
    parser.add_argument(
        "--max-bytes",
        type=_size,
        default=default_max_bytes(),
        metavar="SIZE",
        help="refuse graphs whose tensors together declare more than SIZE (e.g. 8GiB); sigdnn.Limits(max_total_bytes=)"
        f" (default: a quarter of this machine's memory, {format_bytes(default_max_bytes())})",
    )
    parser.add_argument(
        "--max-file-bytes",
        type=_size,
        metavar="SIZE",
        help=f"refuse graph and tensor files larger than SIZE (default: {format_bytes(DEFAULT_MAX_GRAPH_FILE_BYTES)} "
        f"for graphs, {format_bytes(DEFAULT_MAX_TENSOR_FILE_BYTES)} for tensor files)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sigdnn",
        description="Execute deep-learning operation graphs serialized as FlatBuffers (.sdg).",
        epilog="Exit status: 0 success, 1 a validation failed, 2 an error (one line on stderr).",
    )
    parser.add_argument("--version", action="version", version=f"sigdnn {sigdnn.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run a graph and summarize its outputs", description="Run a graph.")
    run.add_argument("graph", help="the graph file (.sdg)")
    run.add_argument(
        "--inputs",
        action="append",
        metavar="FILE",
        help="input tensors by name: .safetensors (every dtype, exactly), .npz or .npy; may be repeated. "
        "Without --inputs every input is random",
    )
    run.add_argument(
        "--random-missing",
        action="store_true",
        help="fill inputs the --inputs files lack with random values (otherwise that is an error)",
    )
    run.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (an integer >= 0; default: 0)")
    run.add_argument(
        "--out",
        metavar="FILE",
        help="write the outputs to exactly FILE: npz if it ends in .npz, safetensors otherwise",
    )
    run.add_argument(
        "--save-inputs",
        metavar="FILE",
        help="write the inputs the run used, random ones included, so `--inputs FILE` replays it bit for bit",
    )
    run.add_argument("--engine", type=_engine, metavar="ID|NAME", help="pin every node to one builder (id or name)")
    run.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    run.add_argument(
        "--profile",
        action="store_true",
        help="time every step (synchronizing after each) and list the slowest; with --json, every step's time",
    )
    _graph_options(run)
    run.set_defaults(func=cmd_run)

    inspect = sub.add_parser(
        "inspect",
        help="tensors, steps in execution order, keys, builders, peak memory",
        description="Prepare a graph (no execution) and show the plan.",
    )
    inspect.add_argument("graph", help="the graph file (.sdg)")
    inspect.add_argument("--json", action="store_true", help="print the plan as JSON")
    _graph_options(inspect)
    inspect.set_defaults(func=cmd_inspect)

    builders = sub.add_parser(
        "builders",
        help="every registered builder and whether it can run here",
        description="List the registered plan builders.",
    )
    builders.add_argument("--json", action="store_true", help="print the list as JSON")
    builders.set_defaults(func=cmd_builders)

    validate = sub.add_parser(
        "validate",
        help="run graphs on a backend and on the reference; compare step by step",
        description="Validate graphs: the backend's result of every step against the reference's, on random inputs.",
    )
    validate.add_argument("graphs", nargs="+", metavar="GRAPH", help="one or more graph files (.sdg)")
    validate.add_argument("--seed", type=_seed, default=0, help="first seed of the random inputs (default: 0)")
    validate.add_argument("--seeds", type=_count, default=1, metavar="N", help="run seeds SEED..SEED+N-1 (default: 1)")
    validate.add_argument("--json", metavar="FILE", help="also write every report as JSON to FILE ('-': stdout)")
    validate.add_argument(
        "--engine", type=_engine, metavar="ID|NAME", help="pin every node to one builder (id or name)"
    )
    validate.add_argument(
        "--fallback",
        action="store_true",
        help="with --backend gpu: run nodes no GPU builder takes on the reference (named in the table)",
    )
    validate.add_argument(
        "--plot",
        metavar="DIR",
        help="write an error-distribution plot (PNG) of every failing step to DIR (needs sigdnn[plot])",
    )
    _graph_options(validate, backend_default="gpu")
    validate.set_defaults(func=cmd_validate)

    campaign = sub.add_parser(
        "campaign",
        help="validate thousands of generated or given graphs x seeds x engines on a Ray cluster",
        description="Run a validation campaign from a TOML spec (see sigdnn/campaign/spec.py); needs sigdnn[campaign].",
    )
    campaign.add_argument("spec", help="the campaign spec (.toml)")
    campaign.add_argument(
        "--ray",
        default="local",
        metavar="auto|ADDRESS",
        help="join a running Ray cluster ('auto': the one this machine runs; or its address); "
        "default: start a local cluster for the run",
    )
    campaign.add_argument("--gpus", type=_count, metavar="N", help="GPUs of the local cluster (default: all)")
    campaign.add_argument("--resume", action="store_true", help="finish a campaign: skip the cases already in results")
    campaign.add_argument("--output", metavar="DIR", help="write results to DIR instead of the spec's output")
    campaign.add_argument(
        "--max-bytes",
        type=_size,
        default=default_max_bytes(),
        metavar="SIZE",
        help=f"refuse graphs whose tensors declare more than SIZE (default: {format_bytes(default_max_bytes())})",
    )
    campaign.set_defaults(func=cmd_campaign)

    imported = sub.add_parser(
        "import",
        help="convert an ONNX model, a hipDNN buffer or cuDNN-frontend JSON into a .sdg (weights included)",
        description="Import a graph from another format and write it as a sigdnn graph.",
    )
    imported.add_argument("graph", help="the file to import (.onnx, a hipDNN FlatBuffers graph, cuDNN graph JSON)")
    imported.add_argument("-o", "--output", required=True, metavar="FILE", help="the .sdg to write (exactly FILE)")
    imported.add_argument("--max-file-bytes", type=_size, metavar="SIZE", help="refuse larger files (default: 256 MiB)")
    imported.set_defaults(func=cmd_import)
    return parser


# -- shared steps ---------------------------------------------------------------------------------
def _limits(args: argparse.Namespace) -> sigdnn.Limits:
    return sigdnn.Limits(max_total_bytes=args.max_bytes)


def _file_cap(args: argparse.Namespace, default: int) -> int:
    return default if args.max_file_bytes is None else args.max_file_bytes


def _read_graph(args: argparse.Namespace, path: str) -> bytes:
    return read_graph_file(path, max_bytes=_file_cap(args, DEFAULT_MAX_GRAPH_FILE_BYTES))


def _check_backend(backend: str) -> None:
    """--backend gpu needs cuda.core and a GPU DSL: say how to install them before anything else fails."""
    if backend != "gpu":
        return
    import importlib.util

    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    missing = [package for module, package in GPU_MODULES.items() if not present(module)]
    if "cuda-python" in missing or {"cuda-tile", "nvidia-cutlass-dsl"} <= set(missing):  # memory, or no DSL
        raise UsageError(
            f"--backend gpu needs the GPU packages ({', '.join(missing)} not installed); "
            "install them with: pip install 'sigdnn[gpu]'"
        )


def _prepare(args: argparse.Namespace, update: Any, engine: Any = None) -> tuple[sigdnn.Executor, Any, float]:
    """(executor, plan, seconds prepare took) for ``args.graph``."""
    _check_backend(args.backend)
    update(f"reading {args.graph}")
    data = _read_graph(args, args.graph)
    update(f"preparing {args.graph}")
    start = time.perf_counter()
    executor = sigdnn.Executor(args.backend, engine=engine, limits=_limits(args))
    plan = executor.prepare(data)
    return executor, plan, time.perf_counter() - start


def _expected(graph: Any) -> dict[str, Expected]:
    """What an inputs file may hold: the graph's inputs and its pass-by-value scalars (overrides)."""
    wanted = [*graph.inputs, *(t for t in graph.tensors.values() if t.value is not None)]
    return {t.name: Expected(tuple(t.dims), graph.dtype_of(t)) for t in wanted}


def _stats(array: np.ndarray) -> dict[str, Any]:
    """min / max / mean of the finite values and the non-finite count, in float64, a chunk at a time."""
    flat = np.asarray(array).reshape(-1)
    low, high, total, finite_count = np.inf, -np.inf, 0.0, 0
    for start in range(0, flat.size, _STATS_CHUNK):
        values = flat[start : start + _STATS_CHUNK].astype(np.float64)
        finite = values[np.isfinite(values)]
        if finite.size:
            low, high = min(low, float(finite.min())), max(high, float(finite.max()))
            total += float(finite.sum())
            finite_count += finite.size
    if not finite_count:
        return {"min": None, "max": None, "mean": None, "non_finite": int(flat.size)}
    return {"min": low, "max": high, "mean": total / finite_count, "non_finite": int(flat.size - finite_count)}


# -- commands -------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace, screen: Screen) -> int:
    from sigdnn.validation.inputs import random_inputs

    if args.out is not None and args.out == args.save_inputs:
        raise UsageError(f"--out and --save-inputs both name {shown(args.out)}; give two files")
    with screen.progress() as update:
        executor, plan, prepare_s = _prepare(args, update, engine=args.engine)
        graph = plan.graph
        given = _read_inputs(args, graph, update)
        missing = [t.name for t in graph.inputs if t.name not in given]
        if args.inputs and missing and not args.random_missing:
            raise UsageError(
                f"--inputs {', '.join(shown(p) for p in args.inputs)} lack input(s) {', '.join(map(repr, missing))} "
                f"of graph '{graph.name}'; add them, or pass --random-missing to draw them at random (seed {args.seed})"
            )
        update(f"drawing {len(missing)} random input(s)")
        inputs = {**random_inputs(graph, seed=args.seed, skip=set(given)), **given}
        if args.save_inputs:
            update(f"writing {args.save_inputs}")
            write_tensor_file(args.save_inputs, inputs, what="--save-inputs file")
        update(f"executing {len(plan.steps)} step(s) on {args.backend}")
        times: list[tuple[str, str, float]] = []

        def step_done(index: int, step: Step, seconds: float) -> None:
            times.append((step.name, step.builder.name, seconds))
            update(f"executing step {index + 1}/{len(plan.steps)} on {args.backend}")

        start = time.perf_counter()
        # Step by step means a device synchronization per step: only for a profile, or where it costs nothing.
        follow = args.profile or args.backend == "reference"
        outputs = executor.execute(plan, inputs, on_step=step_done if follow else None)
        execute_s = time.perf_counter() - start
        outputs = {name: np.asarray(value) for name, value in outputs.items()}
        written = None
        if args.out:
            update(f"writing {args.out}")
            written = write_tensor_file(args.out, outputs, what="--out file")
        update("summarizing")
        stats = {name: _stats(value) for name, value in outputs.items()}
    summary = {
        "graph": graph.name,
        "file": args.graph,
        "backend": args.backend,
        "nodes": len(graph.nodes),
        "steps": len(plan.steps),
        "seconds": {"prepare": prepare_s, "execute": execute_s},
        "peak_intermediate_bytes": plan.memory.peak_bytes,
        "inputs": {"from_files": sorted(given), "random": missing, "seed": args.seed if missing else None},
        "outputs": [
            {"name": name, "dtype": str(value.dtype), "shape": list(value.shape), **stats[name]}
            for name, value in outputs.items()
        ],
        "out": None if written is None else {"path": args.out, "format": written},
        "saved_inputs": args.save_inputs,
    }
    if args.profile:
        summary["profile"] = [{"step": name, "builder": builder, "seconds": s} for name, builder, s in times]
    if args.json:
        screen.json(summary)
        return 0
    screen.line(
        f"graph '{graph.name}': {len(graph.nodes)} node(s) in {len(plan.steps)} step(s) on {args.backend}; "
        f"prepared in {_seconds(prepare_s)}, executed in {_seconds(execute_s)}; "
        f"peak intermediate memory {format_bytes(plan.memory.peak_bytes)}"
    )
    if missing:
        screen.line(f"random inputs (seed {args.seed}): {', '.join(missing)}")
    screen.table(
        None,
        [("output", "left"), ("dtype", "left"), ("shape", "left"), *_right("min", "max", "mean", "non-finite")],
        [
            [
                o["name"],
                o["dtype"],
                str(o["shape"]),
                *(_number(o[k]) for k in ("min", "max", "mean")),
                str(o["non_finite"]),
            ]
            for o in summary["outputs"]
        ],
    )
    if args.profile:
        slowest = sorted(times, key=lambda t: -t[2])[:PROFILE_ROWS]
        total = sum(t[2] for t in times) or 1.0
        screen.table(
            f"slowest of {len(times)} steps",
            [("step", "left"), ("builder", "left"), *_right("time", "share")],
            [[name, builder, _seconds(s), f"{100 * s / total:.1f}%"] for name, builder, s in slowest],
        )
    if args.save_inputs:
        screen.line(f"wrote the inputs to {shown(args.save_inputs)} (replay: --inputs {shown(args.save_inputs)})")
    if written:
        screen.line(f"wrote {', '.join(outputs)} to {shown(args.out)} ({written})")
    return 0


def _left(*headers: str) -> list[tuple[str, str]]:
    return [(h, "left") for h in headers]


def _right(*headers: str) -> list[tuple[str, str]]:
    return [(h, "right") for h in headers]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _read_inputs(args: argparse.Namespace, graph: Any, update: Any) -> dict[str, np.ndarray]:
    expect = _expected(graph)
    given: dict[str, np.ndarray] = {}
    for path in args.inputs or ():
        update(f"reading {path}")
        for name, array in read_tensor_file(
            path, expect=expect, max_bytes=_file_cap(args, DEFAULT_MAX_TENSOR_FILE_BYTES)
        ).items():
            if name in given:
                raise UsageError(f"--inputs: tensor {name!r} is in more than one file (again in {shown(path)})")
            given[name] = array
    return given


def cmd_inspect(args: argparse.Namespace, screen: Screen) -> int:
    with screen.progress() as update:
        _, plan, _ = _prepare(args, update)
    if args.json:
        screen.json(plan_summary(plan))
    else:
        screen.line(plan.describe())
    return 0


def cmd_import(args: argparse.Namespace, screen: Screen) -> int:
    """Convert (sigdnn.io detects the format), check, and write the sigdnn bytes to exactly --output."""
    from sigdnn.io import write_file

    data = _read_graph(args, args.graph)
    graph = sigdnn.deserialize(data)
    write_file(args.output, lambda f: f.write(data), what="imported graph")
    constants = sum(len(t.data) for t in graph.tensors.values() if t.data is not None)
    screen.line(
        f"wrote {shown(args.output)}: {len(graph.nodes)} nodes, {len(graph.tensors)} tensors, "
        f"{format_bytes(constants)} of constants"
    )
    return 0


def plan_summary(plan: Any) -> dict[str, Any]:
    """The plan as JSON data (``inspect --json``): the one place that knows the plan's shape."""
    return plan.as_dict()


def cmd_builders(args: argparse.Namespace, screen: Screen) -> int:
    from sigdnn.registry import DEFAULT_REGISTRY

    rows = []
    for b in DEFAULT_REGISTRY.builders():
        reason = b.available()
        rows.append(
            {
                "engine_id": b.engine_id,
                "name": b.name,
                "library": b.library,
                "device": b.device,
                "ops": list(b.ops),
                "available": reason is None,
                "reason": reason,
            }
        )
    failures = dict(DEFAULT_REGISTRY.load_failures)
    if args.json:
        screen.json({"builders": rows, "not_loaded": failures})
        return 0
    screen.table(
        None,
        [("engine", "right"), *_left("name", "library", "device", "serves", "availability")],
        [
            [str(r["engine_id"]), r["name"], r["library"], r["device"], ", ".join(r["ops"]) or "regions", _state(r)]
            for r in rows
        ],
    )
    for source, reason in failures.items():
        screen.line(f"not loaded: {source}: {reason}")
    return 0


def _state(row: dict[str, Any]) -> str:
    return "available" if row["available"] else f"unavailable: {row['reason']}"


def cmd_validate(args: argparse.Namespace, screen: Screen) -> int:
    _check_backend(args.backend)
    if args.fallback and args.backend != "gpu":
        raise UsageError("--fallback needs --backend gpu (the reference runs every node itself)")
    seeds = range(args.seed, args.seed + args.seeds)
    fallback = "reference" if args.fallback else None
    if args.plot:
        from sigdnn.validation.plot import plot_failures, pyplot

        pyplot()  # without matplotlib, say so before validating anything
    runs: list[tuple[str, int, Any]] = []
    plots: list[str] = []
    with screen.progress(total=len(args.graphs) * len(seeds)) as update:
        for path in args.graphs:
            args.graph = path  # named by any error from here on
            update(f"reading {path}")
            graph = sigdnn.deserialize(_read_graph(args, path), limits=_limits(args))
            device = sigdnn.Executor(args.backend, engine=args.engine, fallback=fallback, limits=_limits(args))
            for seed in seeds:
                update(f"validating {path} (seed {seed})")
                report = sigdnn.validate(graph, seed=seed, executor=device)
                runs.append((path, seed, report))
                if args.plot:
                    plots += plot_failures(report, args.plot, f"{os.path.basename(path)}_seed{seed}")
                update(f"validated {path} (seed {seed})", advance=1)
    if args.json == "-":
        screen.json(_validation_json(runs))
    else:
        from sigdnn.validation.validate import COLUMNS

        for path, seed, report in runs:
            verdict = "PASS" if report.passed else "FAIL"
            screen.table(f"{path} (seed {seed}): graph '{report.graph}' {verdict}", COLUMNS, report.rows())
        if len(runs) > 1:
            screen.table(
                "summary",
                [("graph file", "left"), ("seed", "right"), ("verdict", "left")],
                [[path, str(seed), "PASS" if report.passed else "FAIL"] for path, seed, report in runs],
            )
        if args.json:
            text = json.dumps(_validation_json(runs), indent=2)
            write_file(args.json, lambda f: f.write(text.encode()), what="--json file")
            screen.line(f"wrote the reports to {shown(args.json)}")
        for plot in plots:
            screen.line(f"wrote {shown(plot)}")
    return 0 if all(report.passed for _, _, report in runs) else EXIT_FAILED


def cmd_campaign(args: argparse.Namespace, screen: Screen) -> int:
    from sigdnn.campaign.command import run

    return run(args, screen)


def _validation_json(runs: list[tuple[str, int, Any]]) -> dict[str, Any]:
    return {
        "passed": all(report.passed for _, _, report in runs),
        "runs": [{"file": path, "seed": seed, **json.loads(report.to_json())} for path, seed, report in runs],
    }


# -- entry point ----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, 1 or 2)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error (already printed on one line)
        return e.code if isinstance(e.code, int) else EXIT_ERROR
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        return args.func(args, Screen())
    except BrokenPipeError:  # the reader went away (`sigdnn inspect g | head`): nothing left to say
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        print("sigdnn: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("SIGDNN_TRACEBACK") and not isinstance(e, SigdnnError):
            raise
        print(_one_line(error_message(e, args)), file=sys.stderr)
        return EXIT_ERROR
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()


def error_message(e: BaseException, args: argparse.Namespace) -> str:
    """The one line a failure is reported as: what happened, where, and what to do."""
    if isinstance(e, FileError):  # names its file already
        return f"sigdnn: error: FileError: {e}"
    if isinstance(e, SigdnnError):
        where = f" (graph file {shown(args.graph)})" if getattr(args, "graph", None) else ""
        advice = _advice(e, args)
        return f"sigdnn: error: {type(e).__name__}{where}: {e}" + (f"; {advice}" if advice else "")
    if isinstance(e, MemoryError):
        return (
            "sigdnn: error: out of memory; pass a smaller --max-bytes so graphs this large are refused up front, "
            "or run on a machine with more memory"
        )
    return (
        f"sigdnn: internal error: {type(e).__name__}: {e} "
        "(a bug in sigdnn: please report it; SIGDNN_TRACEBACK=1 shows where it happened)"
    )


def _advice(e: SigdnnError, args: argparse.Namespace) -> str | None:
    max_bytes = getattr(args, "max_bytes", None)
    if max_bytes is not None and f"limit {max_bytes}" in str(e):
        return f"if the graph is trusted, raise --max-bytes (now {format_bytes(max_bytes)})"
    return next((_ADVICE[c.__name__] for c in type(e).__mro__ if c.__name__ in _ADVICE), None)


def _one_line(text: str) -> str:
    """One printable line: newlines become spaces, other control characters (a hostile file's
    terminal escapes, quoted back in a message) their escapes."""
    text = text.replace("\r\n", " ").replace("\n", " ")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
