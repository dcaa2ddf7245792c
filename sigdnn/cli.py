"""The ``sigdnn`` command: run, inspect and validate graphs, list builders."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sigdnn.errors import SigdnnError


def _load_inputs(path: str | None) -> dict[str, np.ndarray]:
    if path is None:
        return {}
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def _summary(name: str, array: np.ndarray) -> str:
    values = np.asarray(array, dtype=np.float64) if array.dtype != np.bool_ else array.astype(np.float64)
    finite = values[np.isfinite(values)]
    stats = (
        f"min {finite.min():.6g} max {finite.max():.6g} mean {finite.mean():.6g}" if finite.size else "no finite values"
    )
    bad = values.size - finite.size
    return f"{name}: {array.dtype} {list(array.shape)} {stats}" + (f" ({bad} non-finite)" if bad else "")


def cmd_run(args: argparse.Namespace) -> int:
    from sigdnn.executor import Executor
    from sigdnn.validation.inputs import random_inputs

    ex = Executor(args.backend, engine=args.engine)
    plan = ex.prepare(args.graph)
    given = _load_inputs(args.inputs)
    inputs = {**random_inputs(plan.graph, seed=args.seed, skip=set(given)), **given}
    outputs = ex.execute(plan, inputs)
    print(
        f"graph '{plan.graph.name}': {len(plan.steps)} nodes on {args.backend}; peak intermediate memory {plan.peak_intermediate_bytes} bytes"
    )
    for name, array in outputs.items():
        print("  " + _summary(name, np.asarray(array)))
    if args.out:
        np.savez(args.out, **{k: np.asarray(v) for k, v in outputs.items()})
        print(f"wrote {args.out}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from sigdnn.executor import Executor

    print(Executor(args.backend).prepare(args.graph).describe())
    return 0


def cmd_builders(args: argparse.Namespace) -> int:
    from sigdnn.registry import DEFAULT_REGISTRY

    print(f"{'engine':>6}  {'name':<28} {'library':<10} {'device':<6} {'serves':<12} availability")
    for b in DEFAULT_REGISTRY.builders():
        reason = b.available()
        state = "available" if reason is None else f"unavailable: {reason}"
        serves = ",".join(b.ops) or "regions"
        print(f"{b.engine_id:>6}  {b.name:<28} {b.library:<10} {b.device:<6} {serves:<12} {state}")
    for source, reason in DEFAULT_REGISTRY.load_failures.items():
        print(f"   (not loaded) {source}: {reason}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from sigdnn.validation import validate

    report = validate(Path(args.graph).read_bytes(), seed=args.seed)
    print(report.table())
    if args.json:
        Path(args.json).write_text(report.to_json())
    return 0 if report.passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sigdnn", description="Execute serialized deep-learning operation graphs.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a graph (random inputs unless --inputs is given)")
    run.add_argument("graph", help="a .sdg file")
    run.add_argument("--inputs", help=".npz with input arrays by tensor name")
    run.add_argument("--out", help="write the outputs to this .npz")
    run.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    run.add_argument("--backend", default="reference", choices=("reference", "gpu"))
    run.add_argument("--engine", type=lambda s: int(s) if s.isdigit() else s, help="pin a builder by id or name")
    run.set_defaults(func=cmd_run)
    inspect = sub.add_parser("inspect", help="tensors, execution order, keys, builders, peak memory")
    inspect.add_argument("graph")
    inspect.add_argument("--backend", default="reference", choices=("reference", "gpu"))
    inspect.set_defaults(func=cmd_inspect)
    builders = sub.add_parser("builders", help="every registered builder and whether it can run here")
    builders.set_defaults(func=cmd_builders)
    validate = sub.add_parser("validate", help="run on the GPU and the reference; compare every output")
    validate.add_argument("graph")
    validate.add_argument("--seed", type=int, default=0)
    validate.add_argument("--json", help="also write the report as JSON here")
    validate.set_defaults(func=cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SigdnnError as e:
        print(f"sigdnn: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"sigdnn: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
