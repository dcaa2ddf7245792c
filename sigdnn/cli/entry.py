"""The command line's entry point: the parser every command adds itself to, and ``main``."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

import sigdnn
from sigdnn.cli import builders, campaign, import_graph, inspect, run, validate
from sigdnn.cli.failures import error_message, one_line, silence_stdout
from sigdnn.cli.options import EXIT_ERROR, Parser
from sigdnn.cli.screen import Screen
from sigdnn.errors import SigdnnError

COMMANDS = (run, inspect, builders, validate, campaign, import_graph)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="sigdnn",
        description="Execute deep-learning operation graphs serialized as FlatBuffers (.sdg).",
        epilog="Exit status: 0 success, 1 a validation failed, 2 an error (one line on stderr).",
    )
    parser.add_argument("--version", action="version", version=f"sigdnn {sigdnn.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


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
        silence_stdout()
        return 0
    except KeyboardInterrupt:
        print("sigdnn: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("SIGDNN_TRACEBACK") and not isinstance(e, SigdnnError):
            raise
        print(one_line(error_message(e, args)), file=sys.stderr)
        return EXIT_ERROR
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
