"""``sigdnn inspect GRAPH``: prepare a graph (no execution) and show the plan."""

from __future__ import annotations

import argparse
from typing import Any

from sigdnn.cli.backend import prepare
from sigdnn.cli.options import graph_options
from sigdnn.cli.screen import Screen


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="tensors, steps in execution order, keys, builders, peak memory",
        description="Prepare a graph (no execution) and show the plan.",
    )
    inspect.add_argument("graph", help="the graph file (.sdg)")
    inspect.add_argument("--json", action="store_true", help="print the plan as JSON")
    graph_options(inspect)
    inspect.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace, screen: Screen) -> int:
    with screen.progress() as update:
        _, plan, _ = prepare(args, update)
    if args.json:
        screen.json(plan_summary(plan))
    else:
        screen.line(plan.describe())
    return 0


def plan_summary(plan: Any) -> dict[str, Any]:
    """The plan as JSON data (``inspect --json``): the one place that knows the plan's shape."""
    return plan.as_dict()
