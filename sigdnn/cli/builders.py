"""``sigdnn builders``: every registered builder and whether it can run here."""

from __future__ import annotations

import argparse
from typing import Any

from sigdnn.cli.screen import Screen, left


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    builders = commands.add_parser(
        "builders",
        help="every registered builder and whether it can run here",
        description="List the registered plan builders.",
    )
    builders.add_argument("--json", action="store_true", help="print the list as JSON")
    builders.add_argument(
        "--matrix",
        action="store_true",
        help="print the support matrix instead: which library serves each op in each dtype (markdown; "
        "with --json, the rows)",
    )
    builders.set_defaults(func=cmd_builders)


def cmd_builders(args: argparse.Namespace, screen: Screen) -> int:
    from sigdnn.registry import DEFAULT_REGISTRY

    if args.matrix:
        return _matrix(args, screen)
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
        [("engine", "right"), *left("name", "library", "device", "serves", "availability")],
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


def _matrix(args: argparse.Namespace, screen: Screen) -> int:
    from sigdnn.registry.support_matrix import markdown_table, support_rows

    if args.json:
        screen.json([{"op": op, "dtypes": {d: None if c is None else list(c) for d, c in cells.items()}}
                     for op, cells in support_rows()])  # fmt: skip
    else:
        screen.line(markdown_table().rstrip("\n"))
    return 0
