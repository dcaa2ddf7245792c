"""ONNX import speed: import + prepare of ResNet-18 and of a ViT-B/16 (224x224, batch 1), beside onnxruntime.

Targets: ResNet-18's sigdnn.importers.onnx.load + Executor.prepare under 2 s (issue 9), ViT-B/16's under
1.5 s (issue 32). Both models are written in tests/importers/onnx_models.py (torchvision is not a dependency).
onnxruntime's InferenceSession (CPU, default graph optimizations) is the
real alternative that does the same job (read the model, plan it), timed in
the same run. Also measured: serialize (the .sdg with its weights), its size,
and deserialize + prepare of that .sdg (what `sigdnn run model.sdg` pays).

Run: PYTHONPATH=.:tests/importers python benchmarks/onnx_import.py [--model resnet18|vit_b_16] [--repeat 5]
(each row: the median and the best of --repeat calls after one untimed call)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "importers"))

import onnxruntime as ort
import torch
from onnx_models import export, resnet18, vit_b_16_like

import sigdnn
from sigdnn.importers import onnx as onnx_import


def timed(fn, repeat: int) -> tuple[float, float]:
    """(median, best) seconds of ``repeat`` calls, after one untimed call (first-use imports, page faults)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


# name -> (title, model, fold constants at export, target seconds for import + prepare)
MODELS = {
    "resnet18": ("ResNet-18", resnet18, False, 2.0),  # batchnorm left unfolded, so BatchNormalization is imported
    "vit_b_16": ("ViT-B/16", vit_b_16_like, True, 1.5),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--model", choices=MODELS, default="resnet18")
    args = parser.parse_args()
    x = torch.zeros(1, 3, 224, 224)
    title, make, fold, target = MODELS[args.model]
    data = export(make(), x, fold_constants=fold)

    def import_and_prepare() -> None:  # a fresh executor: its plan cache would otherwise hold the plan
        sigdnn.Executor().prepare(onnx_import.load(data))

    graph = onnx_import.load(data)
    sdg = graph.serialize()
    rows = [
        ("sigdnn import + prepare (from .onnx bytes)", timed(import_and_prepare, args.repeat)),
        ("  of which import (onnx -> Graph, checked)", timed(lambda: onnx_import.load(data), args.repeat)),
        ("sigdnn serialize (Graph -> .sdg bytes)", timed(graph.serialize, args.repeat)),
        ("sigdnn deserialize + prepare (.sdg bytes)", timed(lambda: sigdnn.Executor().prepare(sdg), args.repeat)),
        (
            "onnxruntime InferenceSession (CPU)",
            timed(lambda: ort.InferenceSession(data, providers=["CPUExecutionProvider"]), args.repeat),
        ),
    ]
    print(f"# ONNX import, {title} 224x224 ({len(data) / 2**20:.1f} MiB .onnx, {len(sdg) / 2**20:.1f} MiB .sdg)")
    print(f"machine: {platform.machine()} {platform.processor() or ''} {platform.python_version()}, "
          f"numpy {np.__version__}")  # fmt: skip
    print(f"| step | median of {args.repeat} (s) | best (s) |")
    print("|---|---|---|")
    for name, (median, low) in rows:
        print(f"| {name} | {median:.3f} | {low:.3f} |")
    ours, theirs = rows[0][1][0], rows[-1][1][0]
    print(f"target: import + prepare < {target} s: {'met' if ours < target else 'NOT met'} ({ours:.3f} s median); "
          f"{ours / theirs:.2f}x onnxruntime's session")  # fmt: skip
    print(f"load average (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
