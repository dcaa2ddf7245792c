"""``sigdnn campaign SPEC``: what the CLI delegates to (it only parses the arguments)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
from pathlib import Path
from typing import Any

import attrs

from sigdnn.campaign.runner import LOCAL
from sigdnn.campaign.spec import load_spec
from sigdnn.errors import UsageError
from sigdnn.graph.limits import Limits

INSTALL_HINT = (
    "sigdnn campaign runs on Ray, which is not installed; install it with: pip install 'sigdnn[campaign]', "
    "or pass --in-process to run the cases in this process, one at a time"
)
EXIT_FAILED = 1


def ray_missing() -> bool:
    try:
        return importlib.util.find_spec("ray") is None
    except (ImportError, ValueError):
        return True


def run(args: argparse.Namespace, screen: Any) -> int:
    """Run the spec; print the summary, the failing cases' commands and the shrunk shapes.

    Exit status 0 when every case passed, 1 when one failed or errored.
    """
    if args.in_process and (args.ray != LOCAL or args.gpus is not None):
        raise UsageError("--in-process runs without Ray: --ray and --gpus have no meaning with it")
    if not args.in_process and ray_missing():
        raise UsageError(INSTALL_HINT)
    from sigdnn.campaign.summary import progress_display, summarize, summary_table

    spec = load_spec(args.spec)
    if args.output is not None:
        spec = attrs.evolve(spec, output=Path(args.output))
    failing = 0
    with contextlib.ExitStack() as stack:
        advance: list[Any] = []

        def start(total: int) -> None:
            advance.append(stack.enter_context(progress_display(total, lambda: failing)))

        def count(row: dict[str, Any]) -> None:
            nonlocal failing
            failing += row["verdict"] != "pass"
            advance[0]()

        common = {"resume": args.resume, "limits": Limits(max_total_bytes=args.max_bytes), "on_row": count,
                  "on_start": start}  # fmt: skip
        if args.in_process:
            from sigdnn.campaign.in_process import run_in_process

            result = run_in_process(spec, **common)
        else:
            from sigdnn.campaign.runner import run_campaign

            result = run_campaign(spec, ray_address=args.ray, gpus=args.gpus, **common)
    rows = result.rows
    screen.line(
        f"campaign '{spec.name}': {len(rows)} cases ({result.ran} run now, {result.resumed} from earlier runs), "
        f"{len(result.failures)} failing, {len(result.errors)} errors; {result.references} reference runs; "
        f"results in {result.output}"
    )
    if result.unreadable:
        lines = ", ".join(map(str, result.unreadable[:10])) + (" ..." if len(result.unreadable) > 10 else "")
        screen.line(
            f"{result.output / 'results.jsonl'}: skipped {len(result.unreadable)} unreadable line(s) of earlier "
            f"results (line {lines}); they stay in the file, and a case with no readable row runs again"
        )
    if result.skipped:
        what, why = result.skipped[0]
        screen.line(f"skipped {len(result.skipped)} combination(s) no graph can be made of, e.g. {what}: {why}")
    screen.out.print(summary_table(summarize(rows), "summary"))
    for row in result.failures[:10]:
        screen.line(f"FAIL {row['source']} seed {row['seed']}: {row['reproduce']}")
    if len(result.failures) > 10:
        screen.line(f"... {len(result.failures) - 10} more in {result.output / 'results.jsonl'}")
    for row in result.errors[:10]:
        screen.line(f"ERROR {row['source']} seed {row['seed']}: {row['error']}")
    for s in result.shrunk:
        if "to" in s:
            screen.line(f"shrunk {s['from']} -> {s['to']} ({s['tries']} runs): {s['smallest']}; {s['reproduce']}")
    return 0 if not result.failures and not result.errors else EXIT_FAILED
