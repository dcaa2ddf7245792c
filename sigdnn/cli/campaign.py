"""``sigdnn campaign SPEC``: the arguments; :mod:`sigdnn.campaign.command` runs the campaign."""

from __future__ import annotations

import argparse
from typing import Any

from sigdnn.cli import options
from sigdnn.cli.screen import Screen
from sigdnn.io import format_bytes


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    campaign = commands.add_parser(
        "campaign",
        help="validate thousands of generated or given graphs x seeds x engines on a Ray cluster (or in-process)",
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
    campaign.add_argument("--gpus", type=options.count, metavar="N", help="GPUs of the local cluster (default: all)")
    campaign.add_argument(
        "--in-process",
        action="store_true",
        help="run the cases in this process, one at a time, without Ray (one GPU, or no Ray installed)",
    )
    campaign.add_argument("--resume", action="store_true", help="finish a campaign: skip the cases already in results")
    campaign.add_argument("--output", metavar="DIR", help="write results to DIR instead of the spec's output")
    campaign.add_argument(
        "--max-bytes",
        type=options.size,
        default=options.default_max_bytes(),
        metavar="SIZE",
        help=f"refuse graphs whose tensors declare more than SIZE (default: {format_bytes(options.default_max_bytes())})",
    )
    campaign.set_defaults(func=cmd_campaign)


def cmd_campaign(args: argparse.Namespace, screen: Screen) -> int:
    from sigdnn.campaign.command import run

    return run(args, screen)
