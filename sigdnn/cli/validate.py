"""``sigdnn validate GRAPH...``: run graphs on a backend and on the reference; compare step by step."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import sigdnn
from sigdnn.cli import options
from sigdnn.cli.backend import check_backend
from sigdnn.cli.files import check_outputs, read_graph, read_inputs
from sigdnn.cli.options import EXIT_FAILED, graph_options, limits
from sigdnn.cli.screen import Screen
from sigdnn.errors import UsageError
from sigdnn.io import write_file
from sigdnn.io.files import shown
from sigdnn.validation.truth import TRUTH_BACKEND, TRUTHS, default_truth, truth_executor


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    validate = commands.add_parser(
        "validate",
        help="run graphs on a backend and on the reference; compare step by step",
        description="Validate graphs: the backend's result of every step against the reference's, on random inputs.",
    )
    validate.add_argument("graphs", nargs="+", metavar="GRAPH", help="one or more graph files (.sdg)")
    validate.add_argument("--seed", type=options.seed, default=0, help="first seed of the random inputs (default: 0)")
    validate.add_argument(
        "--seeds", type=options.count, default=1, metavar="N", help="run seeds SEED..SEED+N-1 (default: 1)"
    )
    validate.add_argument(
        "--inputs",
        action="append",
        metavar="FILE",
        help="the inputs by name (.safetensors, .npz, .npy; may be repeated), e.g. those a campaign saved with a "
        "failing case; they must hold every input of the one GRAPH. Without --inputs every input is random",
    )
    validate.add_argument(
        "--initialized",
        action="store_true",
        help="draw weights (*.w, w*, *.weight) as a model initializes them, N(0, 1/fan-in), and norm scales near 1, "
        "the other inputs as usual: validation's draw of every input in [-2, 2) grows a deep model's activations "
        "far past any trained model's",
    )
    validate.add_argument("--json", action="store_true", help="print every report as JSON instead of tables")
    validate.add_argument("--report", metavar="FILE", help="also write every report as JSON to FILE")
    validate.add_argument(
        "--engine", type=options.engine, metavar="ID|NAME", help="pin every node to one builder (id or name)"
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
    validate.add_argument(
        "--truth",
        choices=TRUTHS,
        help="what judges: the GPU reference (float64 on the GPU) or the CPU reference "
        "(default: gpu when the GPU reference can run here, else cpu; the report names it)",
    )
    graph_options(validate, backend_default="gpu")
    validate.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace, screen: Screen) -> int:
    reads = [*((path, "graph file") for path in args.graphs), *((path, "--inputs file") for path in args.inputs or ())]
    check_outputs([(args.report, "--report file")], reads)
    check_backend(args.backend, default_gpu=True)
    if args.fallback and args.backend != "gpu":
        raise UsageError("--fallback needs --backend gpu (the reference runs every node itself)")
    if args.inputs and (len(args.graphs) > 1 or args.seeds > 1):
        raise UsageError("--inputs gives one graph its inputs: give one GRAPH and no --seeds")
    if args.inputs and args.initialized:
        raise UsageError("--initialized draws the inputs that --inputs gives: give one of them")
    seeds = range(args.seed, args.seed + args.seeds)
    fallback = "reference" if args.fallback else None
    if args.plot:
        from sigdnn.validation.plot import plot_failures, pyplot

        pyplot()  # without matplotlib, say so before validating anything
    truth_backend = TRUTH_BACKEND[args.truth or default_truth()]
    from sigdnn.accuracy.inputs import initialized_inputs

    runs: list[tuple[str, int, Any]] = []
    plots: list[str] = []
    with screen.progress(total=len(args.graphs) * len(seeds)) as update:
        for path in args.graphs:
            args.graph = path  # named by any error from here on
            update(f"reading {path}")
            graph = sigdnn.deserialize(read_graph(args, path), limits=limits(args, truth_backend))  # the truth's
            device = sigdnn.Executor(args.backend, engine=args.engine, fallback=fallback, limits=limits(args))
            truth = truth_executor(args.truth, limits=limits(args, truth_backend))
            given = given_inputs(args, graph, update) if args.inputs else None
            for seed in seeds:
                update(f"validating {path} (seed {seed})")
                drawn = initialized_inputs(graph, seed) if args.initialized else given
                report = sigdnn.validate(graph, drawn, seed=seed, executor=device, truth=truth)
                runs.append((path, None if given else seed, report))  # no seed drew inputs from files
                if args.plot:
                    plots += plot_failures(report, args.plot, f"{os.path.basename(path)}_seed{seed}")
                update(f"validated {path} (seed {seed})", advance=1)
    if args.report:
        text = json.dumps(_validation_json(runs), indent=2)
        write_file(args.report, lambda f: f.write(text.encode()), what="--report file")
    if args.json:
        screen.json(_validation_json(runs))
    else:
        from sigdnn.validation.table import plain

        for path, seed, report in runs:
            verdict = "PASS" if report.passed else "FAIL"
            title = (
                f"{path} ({_source(args, seed)}): graph '{report.graph}' against the {report.truth.upper()} reference"
            )
            screen.line(plain(f"{title}: {verdict}", report.rows(), report.details()))
        if len(runs) > 1:
            screen.table(
                "summary",
                [("graph file", "left"), ("seed", "right"), ("verdict", "left")],
                [[path, str(seed), "PASS" if report.passed else "FAIL"] for path, seed, report in runs],
            )
        if args.report:
            screen.line(f"wrote the reports to {shown(args.report)}")
        for plot in plots:
            screen.line(f"wrote {shown(plot)}")
    return 0 if all(report.passed for _, _, report in runs) else EXIT_FAILED


def _source(args: argparse.Namespace, seed: int | None) -> str:
    return f"seed {seed}" if seed is not None else f"inputs {', '.join(shown(p) for p in args.inputs)}"


def given_inputs(args: argparse.Namespace, graph: Any, update: Any) -> dict[str, Any]:
    """Every input of ``graph`` from the --inputs files (a validation on partly random inputs would not replay)."""
    given = read_inputs(args, graph, update)
    missing = [t.name for t in graph.inputs if t.name not in given]
    if missing:
        raise UsageError(
            f"--inputs {', '.join(shown(p) for p in args.inputs)} lack input(s) {', '.join(map(repr, missing))} "
            f"of graph '{graph.name}'"
        )
    return given


def _validation_json(runs: list[tuple[str, int, Any]]) -> dict[str, Any]:
    return {
        "passed": all(report.passed for _, _, report in runs),
        "runs": [{"file": path, "seed": seed, **json.loads(report.to_json())} for path, seed, report in runs],
    }
