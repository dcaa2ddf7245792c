"""``sigdnn run GRAPH``: run a graph on given or random inputs and summarize its outputs."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from sigdnn.cli import options
from sigdnn.cli.backend import prepare
from sigdnn.cli.files import check_outputs, read_inputs
from sigdnn.cli.options import graph_options
from sigdnn.cli.screen import Screen, duration, number, right
from sigdnn.errors import UsageError
from sigdnn.io import format_bytes, write_tensor_file
from sigdnn.io.files import shown

if TYPE_CHECKING:
    from sigdnn.executor.plan import Step

PROFILE_ROWS = 10  # slowest steps a profile lists
_STATS_CHUNK = 1 << 20


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    run = commands.add_parser("run", help="run a graph and summarize its outputs", description="Run a graph.")
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
    run.add_argument(
        "--seed", type=options.seed, default=0, help="seed of the random inputs (an integer >= 0; default: 0)"
    )
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
    run.add_argument(
        "--engine", type=options.engine, metavar="ID|NAME", help="pin every node to one builder (id or name)"
    )
    run.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    run.add_argument(
        "--profile",
        action="store_true",
        help="time every step (synchronizing after each) and list the slowest; with --json, every step's time",
    )
    graph_options(run)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace, screen: Screen) -> int:
    from sigdnn.accuracy.inputs import random_inputs

    reads = [(args.graph, "graph file"), *((path, "--inputs file") for path in args.inputs or ())]
    check_outputs([(args.out, "--out file"), (args.save_inputs, "--save-inputs file")], reads)
    with screen.progress() as update:
        executor, plan, prepare_s = prepare(args, update, engine=args.engine)
        graph = plan.graph
        given = read_inputs(args, graph, update)
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
        f"prepared in {duration(prepare_s)}, executed in {duration(execute_s)}; "
        f"peak intermediate memory {format_bytes(plan.memory.peak_bytes)}"
    )
    if missing:
        screen.line(f"random inputs (seed {args.seed}): {', '.join(missing)}")
    screen.table(
        None,
        [("output", "left"), ("dtype", "left"), ("shape", "left"), *right("min", "max", "mean", "non-finite")],
        [
            [
                o["name"],
                o["dtype"],
                str(o["shape"]),
                *(number(o[k]) for k in ("min", "max", "mean")),
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
            [("step", "left"), ("builder", "left"), *right("time", "share")],
            [[name, builder, duration(s), f"{100 * s / total:.1f}%"] for name, builder, s in slowest],
        )
    if args.save_inputs:
        screen.line(f"wrote the inputs to {shown(args.save_inputs)} (replay: --inputs {shown(args.save_inputs)})")
    if written:
        screen.line(f"wrote {', '.join(outputs)} to {shown(args.out)} ({written})")
    return 0


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
