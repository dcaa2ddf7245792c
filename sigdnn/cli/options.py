"""What every command's arguments share: exit codes, argument types, the parser class, the graph options."""

from __future__ import annotations

import argparse
import os
import re

import attrs

import sigdnn
from sigdnn.executor.executor import default_limits
from sigdnn.io import DEFAULT_MAX_GRAPH_FILE_BYTES, DEFAULT_MAX_TENSOR_FILE_BYTES, format_bytes, parse_bytes

EXIT_FAILED, EXIT_ERROR = 1, 2


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


def size(text: str) -> int:
    """A byte count such as 8GiB."""
    try:
        return parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def seed(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; seeds are integers >= 0")
    return value


def count(text: str) -> int:
    """An integer >= 1."""
    value = seed(text)
    if value < 1:
        raise argparse.ArgumentTypeError("give at least 1")
    return value


def engine(text: str) -> int | str:
    """A builder's engine id (digits) or its name."""
    return int(text) if text.isdigit() else text


MAX_DIM = 1 << 62  # a dim sigdnn can hold; the graph's limits refuse far less


def input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """NAME=D0,D1,...: the dims of one graph input (each a whole number >= 1; 2.5 is refused, not truncated)."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=D0,D1,... (e.g. x=1,3,224,224)")
    values = []
    for dim in dims.split(","):
        dim = dim.strip()
        if not re.fullmatch(r"[0-9]+", dim) or not 1 <= int(dim) <= MAX_DIM:
            raise argparse.ArgumentTypeError(f"{text!r}: dim {dim!r} is not a whole number from 1 to 2^62")
        values.append(int(dim))
    return name, tuple(values)


def input_shape_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input-shape",
        type=input_shape,
        action="append",
        dest="input_shapes",
        metavar="NAME=D0,D1,...",
        help="the dims of an ONNX model's input whose dims are symbolic (a batch size, a sequence length); "
        "may be repeated",
    )


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) that point at --help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def tf32_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="let float32 matmuls and convs run as TF32 (10 mantissa bits, as torch's convs and ONNX Runtime do "
        "by default): those nodes compute at float16's precision and are validated at it (sigdnn.allow_tf32)",
    )


def graph_options(parser: argparse.ArgumentParser, backend_default: str = "reference") -> None:
    """--backend, --max-bytes, --max-file-bytes, --input-shape and --tf32, for the commands that read and run
    graphs."""
    input_shape_option(parser)
    parser.add_argument(
        "--backend",
        default=backend_default,
        choices=("reference", "gpu", "gpu-reference"),
        help="where to run: the NumPy reference on the CPU, the GPU builders, or the GPU reference "
        f"(float64 on the GPU) (default: {backend_default})",
    )
    parser.add_argument(
        "--max-bytes",
        type=size,
        default=default_max_bytes(),
        metavar="SIZE",
        help="refuse graphs whose tensors together declare more than SIZE (e.g. 8GiB); sigdnn.Limits(max_total_bytes=)"
        f" (default: a quarter of this machine's memory, {format_bytes(default_max_bytes())})",
    )
    parser.add_argument(
        "--max-file-bytes",
        type=size,
        metavar="SIZE",
        help=f"refuse graph and tensor files larger than SIZE (default: {format_bytes(DEFAULT_MAX_GRAPH_FILE_BYTES)} "
        f"for graphs, {format_bytes(DEFAULT_MAX_TENSOR_FILE_BYTES)} for tensor files)",
    )
    tf32_option(parser)


def limits(args: argparse.Namespace, backend: str | None = None) -> sigdnn.Limits:
    """The graph limits --max-bytes asks for, on ``backend``'s defaults (``--backend``'s unless given; the
    executor's ``default_limits``)."""
    return attrs.evolve(default_limits(backend or args.backend), max_total_bytes=args.max_bytes)
