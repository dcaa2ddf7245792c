"""``sigdnn import FILE -o OUT``: convert an ONNX model, a hipDNN buffer or cuDNN-frontend JSON into a .sdg."""

from __future__ import annotations

import argparse
from typing import Any

import sigdnn
from sigdnn.cli import options
from sigdnn.cli.files import check_outputs, read_graph
from sigdnn.cli.screen import Screen
from sigdnn.io import format_bytes, write_file
from sigdnn.io.files import shown


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    imported = commands.add_parser(
        "import",
        help="convert an ONNX model, a hipDNN buffer or cuDNN-frontend JSON into a .sdg (weights included)",
        description="Import a graph from another format and write it as a sigdnn graph.",
    )
    imported.add_argument("graph", help="the file to import (.onnx, a hipDNN FlatBuffers graph, cuDNN graph JSON)")
    imported.add_argument("-o", "--output", required=True, metavar="FILE", help="the .sdg to write (exactly FILE)")
    imported.add_argument(
        "--max-file-bytes", type=options.size, metavar="SIZE", help="refuse larger files (default: 256 MiB)"
    )
    options.input_shape_option(imported)
    options.tf32_option(imported)
    imported.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace, screen: Screen) -> int:
    """Convert (sigdnn.io detects the format), check, and write the sigdnn bytes to exactly --output."""
    check_outputs([(args.output, "--output file")], [(args.graph, "file to import")])
    data = read_graph(args, args.graph)
    graph = sigdnn.deserialize(data)
    write_file(args.output, lambda f: f.write(data), what="imported graph")
    constants = sum(len(t.data) for t in graph.tensors.values() if t.data is not None)
    screen.line(
        f"wrote {shown(args.output)}: {len(graph.nodes)} nodes, {len(graph.tensors)} tensors, "
        f"{format_bytes(constants)} of constants"
    )
    return 0
