"""The one line a failure is reported as on stderr: what happened, where, and what to do."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from sigdnn.errors import SigdnnError
from sigdnn.io import FileError, format_bytes
from sigdnn.io.files import shown

# What to do, by error class, when the message itself does not say.
_ADVICE = {
    "SchemaError": "give a .sdg graph written by sigdnn (Graph.serialize, or the scripts in examples/)",
    "VariantPackError": "compare the inputs with `sigdnn inspect GRAPH` (names, dtypes, logical dims)",
    "NoPlanError": "`sigdnn builders` lists what each builder serves and why one is unavailable",
}


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


def one_line(text: str) -> str:
    """One printable line: newlines become spaces, other control characters (a hostile file's
    terminal escapes, quoted back in a message) their escapes."""
    text = text.replace("\r\n", " ").replace("\n", " ")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
