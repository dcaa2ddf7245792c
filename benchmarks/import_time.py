"""Start-up time of sigdnn (targets: `import sigdnn` under 0.3 s, `sigdnn run` of a 3-node graph under 0.4 s).

Each command runs in a fresh interpreter, ``--runs`` times, interleaved so a
noisy moment hits every row alike; the median is reported. Rows: the bare
interpreter, numpy and ml_dtypes (ml_dtypes is loaded only for bfloat16 / fp8
tensors), ``import sigdnn`` (lazy: the API loads on first use), the first use of
the executor, ``sigdnn run`` of a 3-node float32 graph (matmul, add, relu) from a
cold process, torch (the usual alternative, when installed), and the CLI's own
start-up. Each row gives wall time and the CPU time (user + system) of the
process: on a shared machine the CPU time is the steadier figure. Then the
sigdnn modules that cost the most (``-X importtime``), to show where the rest goes.

Run: python benchmarks/import_time.py [--runs 21]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.3
RUN_TARGET_S = 0.4

ROWS = {
    "python -c pass": ["-c", "pass"],
    'python -c "import numpy"': ["-c", "import numpy"],
    'python -c "import numpy, ml_dtypes"': ["-c", "import numpy, ml_dtypes"],
    'python -c "import sigdnn"': ["-c", "import sigdnn"],
    "import sigdnn; sigdnn.Executor (first use)": ["-c", "import sigdnn; sigdnn.Executor"],
    "sigdnn --version": ["-m", "sigdnn", "--version"],
    "sigdnn run (3-node float32 graph)": ["-m", "sigdnn", "run", "TINY"],
    "sigdnn builders (imports rich)": ["-m", "sigdnn", "builders"],
}
if importlib.util.find_spec("torch") is not None:
    ROWS['python -c "import torch"'] = ["-c", "import torch"]


def environment() -> dict[str, str]:
    """The checkout first on the path, bytecode caches on as an installed package has them: with
    PYTHONDONTWRITEBYTECODE set (as some environments do) every run compiles every module again, ~0.5 s."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "sigdnn-import-time-pycache"))
    return env


def once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def tiny_graph(path: Path) -> Path:
    """matmul, add, relu over float32 (4 x 8): the start-up is all there is to time."""
    sys.path.insert(0, str(ROOT))
    import sigdnn

    g = sigdnn.Graph("tiny", io_dtype="float32", compute_dtype="float32")
    x, w, b = g.tensor("x", (4, 8)), g.tensor("w", (8, 8)), g.tensor("b", (1, 8))
    g.pointwise("relu_fwd", g.pointwise("add", g.matmul(x, w), b)).set_output(True).set_name("y")
    path.write_bytes(g.serialize())
    return path


def heaviest_modules(env: dict[str, str], count: int = 8) -> list[tuple[int, str]]:
    """(self microseconds, module) of the costliest sigdnn modules when the executor is first used."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import sigdnn; sigdnn.Executor"], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    rows = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[2].strip().startswith("sigdnn") and parts[0].strip().isdigit():
            rows.append((int(parts[0]), parts[2].strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="fresh interpreters per row (default: 21)")
    args = parser.parse_args()
    env = environment()
    rows = {name: [str(tiny_graph(Path(tempfile.mkdtemp()) / "tiny.sdg")) if a == "TINY" else a for a in argv]
            for name, argv in ROWS.items()}  # fmt: skip
    probe = "import sys, sigdnn; print(sigdnn.__file__, sorted(m for m in ('rich', 'safetensors', 'torch') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    for argv in rows.values():  # warm the file cache (and write bytecode, unless PYTHONDONTWRITEBYTECODE)
        once(argv, env)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    for _ in range(args.runs):
        for name, argv in rows.items():
            times[name].append(once(argv, env))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}; "
          f"runs {args.runs}")  # fmt: skip
    print(f"imported: {loaded}")
    print(f"{'command':<42} {'median':>8} {'min':>8} {'max':>8} {'cpu med':>8}")
    for name, pairs in times.items():
        walls, cpus = [w for w, _ in pairs], [c for _, c in pairs]
        median, low, high, cpu = statistics.median(walls), min(walls), max(walls), statistics.median(cpus)
        print(f"{name:<42} {median:>7.3f}s {low:>7.3f}s {high:>7.3f}s {cpu:>7.3f}s")
    sigdnn_s = statistics.median(w for w, _ in times['python -c "import sigdnn"'])
    first_use_s = statistics.median(w for w, _ in times["import sigdnn; sigdnn.Executor (first use)"])
    run_s = statistics.median(w for w, _ in times["sigdnn run (3-node float32 graph)"])
    verdict = "met" if sigdnn_s < TARGET_S else "NOT met"
    print(f"import sigdnn: {sigdnn_s:.3f} s (target < {TARGET_S} s: {verdict}); executor loaded: {first_use_s:.3f} s")
    verdict = "met" if run_s <= RUN_TARGET_S else "NOT met"
    print(f"sigdnn run of a 3-node graph: {run_s:.3f} s wall (target <= {RUN_TARGET_S} s: {verdict})")
    print(f"load average (1 min) after the runs: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("costliest sigdnn modules at first use of the executor (self time, one run):")
    for micros, module in heaviest_modules(env):
        print(f"  {micros / 1000:6.1f} ms  {module}")


if __name__ == "__main__":
    main()
