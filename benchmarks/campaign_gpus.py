"""A validation campaign over the cuTile builders' ops on 1 GPU and on N GPUs of one host, in one run.

Run on the device with Ray installed there. The device has no package index
and carries at most 64 MiB a call, so the cp312 ray wheel (79 MB) travels in
two parts (/work/main/.whl_ray/a and b, with the dependencies the device
image lacks: jsonschema, jsonschema-specifications, referencing, rpds-py),
in three calls back to back (the machine stays warm 30 s after a call):

    1. carry [".whl_ray/a"]:  mkdir -p /opt/raywhl && cp .whl_ray/a/* /opt/raywhl/
    2. carry [".whl_ray/b"]:  cp .whl_ray/b/* /opt/raywhl/ && cd /opt/raywhl && cat ray.whl.part.aa ray.whl.part.ab
       > ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl && sha256sum -c ray.sha256 && python3 -m pip install
       --no-deps --no-index --target /opt/raypkgs ./*.whl && PYTHONPATH=/opt/raypkgs python3 -c "import ray"
    3. carry [".gpu/tile", ".gpuwt-campaign"]:  bash .gpu/tile/install.sh && . /opt/gpusite/env.sh &&
       cd .gpuwt-campaign && export PYTHONPATH=$PWD:/opt/raypkgs:$PYTHONPATH PYTHONUNBUFFERED=1 &&
       python3 benchmarks/campaign_gpus.py --gpus 2 --out $OUT/campaign_gpus.md --json $OUT/campaign_gpus.json

The campaign: every pointwise mode the cuTile builder serves x float32 /
float16 / bfloat16 x 7 shapes (2 x 64 .. 2 x 262144, x4 apart) x seeds, plus graph
files of 2-, 3- and 4-op pointwise chains (which the cuTile fusion builder
runs as one region) at the same sizes; unpinned, so each node goes to the
best GPU builder. At least 2,000 cases (``--seeds`` scales it).

Order: a warm-up campaign over one small shape per (mode, dtype) on N GPUs
(so every kernel is compiled into the disk cache before anything is timed),
then the full campaign on 1 GPU, then on N GPUs, each in its own local Ray
cluster. Throughput is cases per second between the first and the last
result of a run (cluster start-up, actor start-up and the first case are
fixed costs, reported apart as the wall time); the ratio N-GPU / 1-GPU is
the figure the issue asks for (>= 1.8 on 2 GPUs). The two runs must agree
case by case (same verdicts), which the script checks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sigdnn
from sigdnn.campaign import parse_spec
from sigdnn.campaign.cases import generate_cases
from sigdnn.campaign.runner import run_campaign
from sigdnn.campaign.summary import summarize
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.plan_builders.cutile.codegen import FLOAT_MODES

DTYPES = ("float32", "float16", "bfloat16")
SHAPES = '[[2, "64..262144*4"]]'  # 2 x (64, 256, ..., 262144): 7 shapes
CHAINS = (("add", "relu_fwd"), ("mul", "gelu_fwd", "add"), ("add", "tanh_fwd", "mul", "sigmoid_fwd"))


def cutile_modes() -> list[str]:
    """The pointwise modes the cuTile builder serves on floats (gen_index takes no data: left out)."""
    return sorted(FLOAT_MODES)


def chain_files(folder: Path) -> list[str]:
    """Pointwise chains as .sdg files (the fusion builder's work), at the generator's sizes and dtypes."""
    names = []
    for chain in CHAINS:
        for dtype in DTYPES:
            for width in (64 * 4**i for i in range(7)):
                g = sigdnn.Graph(f"chain_{'_'.join(chain)}_{dtype}_{width}", io_dtype=dtype, compute_dtype="float32")
                x, y = g.tensor("x", dims=(2, width)), g.tensor("y", dims=(2, width))
                t = x
                for mode in chain:
                    t = g.pointwise(mode, t, y) if MODES[mode].arity == 2 else g.pointwise(mode, t)
                t.set_output(True).set_name("out")
                path = folder / f"{g.name}.sdg"
                path.write_bytes(g.serialize())
                names.append(path.name)
    return names


def spec_text(seeds: int, shapes: str, files: list[str], output: str) -> str:
    modes = json.dumps(cutile_modes())
    return (
        f'name = "cutile-ops"\nbackend = "gpu"\nseeds = {seeds}\noutput = "{output}"\nshrink = 4\n'
        f'[[generate]]\nop = "pointwise"\nmodes = {modes}\ndtypes = {json.dumps(list(DTYPES))}\nshapes = {shapes}\n'
        + (f"[[graphs]]\nfiles = {json.dumps(files)}\n" if files else "")
    )


def timed_run(folder: Path, text: str, gpus: int) -> dict[str, Any]:
    spec = parse_spec(text, folder)
    stamps: list[float] = []
    started = time.perf_counter()
    result = run_campaign(spec, gpus=gpus, on_row=lambda row: stamps.append(time.perf_counter()))
    wall = time.perf_counter() - started
    steady = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
    return {
        "gpus": gpus,
        "cases": len(result.rows),
        "failures": len(result.failures),
        "errors": len(result.errors),
        "wall_s": wall,
        "first_row_s": stamps[0] - started if stamps else None,
        "cases_per_s": steady,
        "verdicts": {r["case"]: r["verdict"] for r in result.rows},
        "summary": summarize(result.rows),
        "first_errors": [r.get("error") for r in result.errors[:5]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=2, help="GPUs of the multi-GPU run (default 2)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per generated graph (default 2)")
    parser.add_argument("--out", type=Path, help="write the results as markdown here")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = chain_files(folder)
        full = spec_text(args.seeds, SHAPES, files, "full-1")
        plan = generate_cases(parse_spec(full, folder))
        cases = len(plan.cases)
        if cases < 2000:
            print(f"only {cases} cases: give more --seeds (the issue asks for >= 2,000)", file=sys.stderr)
            return 2
        print(
            f"campaign: {cases} cases, {len(plan.skipped)} combinations skipped ({len(cutile_modes())} modes, {len(files)} chain files)",
            flush=True,
        )
        warm = timed_run(folder, spec_text(1, "[[2, 64]]", files, "warmup"), args.gpus)
        print(f"warm-up: {warm['cases']} cases in {warm['wall_s']:.1f} s on {args.gpus} GPU(s)", flush=True)
        one = timed_run(folder, full, 1)
        print(f"1 GPU: {one['cases_per_s']:.1f} cases/s ({one['wall_s']:.1f} s wall)", flush=True)
        many = one  # one GPU only (the 2-GPU kind withheld): no second run, no ratio
        if args.gpus > 1:
            many = timed_run(folder, full.replace('output = "full-1"', 'output = "full-n"'), args.gpus)
            print(f"{args.gpus} GPUs: {many['cases_per_s']:.1f} cases/s ({many['wall_s']:.1f} s wall)", flush=True)
    agree = one["verdicts"] == many["verdicts"]
    ratio = many["cases_per_s"] / one["cases_per_s"] if one["cases_per_s"] else 0.0
    print(f"ratio {ratio:.2f}x; the runs agree case by case: {agree}", flush=True)
    gpu_name = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.splitlines()
    lines = [
        f"# Campaign throughput: 1 GPU vs {args.gpus} GPUs ({datetime.date.today()})",
        "",
        f"Machine: {len(gpu_name)} x {gpu_name[0] if gpu_name else '?'}, {platform.processor() or platform.machine()}; "
        f"Python {platform.python_version()}, Ray {ray.__version__}.",
        f"Command: `python3 benchmarks/campaign_gpus.py --gpus {args.gpus} --seeds {args.seeds}`",
        "",
        f"{one['cases']} cases: every cuTile pointwise float mode x {', '.join(DTYPES)} x 7 shapes "
        f"(2 x 64 .. 2 x 262144) x {args.seeds} seeds, plus {len(files)} pointwise-chain graph files "
        "(fusion builder); warm kernel caches (a warm-up campaign first).",
        "",
        "| run | cases | failing | errors | wall s | first row s | cases/s (steady) |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in (one, many) if many is not one else (one,):
        lines.append(
            f"| {run['gpus']} GPU(s) | {run['cases']} | {run['failures']} | {run['errors']} | {run['wall_s']:.1f} "
            f"| {run['first_row_s']:.1f} | {run['cases_per_s']:.1f} |"
        )
    lines += [
        "",
        f"**Ratio {ratio:.2f}x** ({args.gpus} GPUs / 1 GPU, steady throughput); verdicts identical case by case: "
        f"{agree}."
        if many is not one
        else "One GPU only: no multi-GPU run, so no ratio.",
        "",
        "| op family | dtype | engine | cases | failures | errors | worst abs | worst ulp |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {g.family} | {g.dtype} | {g.engine} | {g.cases} | {g.failures} | {g.errors} | {g.worst_abs:.3g} "
            f"| {g.worst_ulp:.3g} |"
            for g in many["summary"]
        ),
    ]
    if many["first_errors"]:
        lines += ["", "First errors:", *(f"- {e}" for e in many["first_errors"])]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        figures = {k: {kk: vv for kk, vv in v.items() if kk not in ("verdicts", "summary")} for k, v in
                   {"one": one, "many": many}.items()}  # fmt: skip
        args.json.write_text(json.dumps({**figures, "ratio": ratio, "agree": agree}, indent=2))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
