"""Import time of sigdnn (target: `python -c "import sigdnn"` under 0.3 s) beside what it builds on.

Each command runs in a fresh interpreter, ``--runs`` times, interleaved so a
noisy moment hits every row alike; the median is reported. Rows: the bare
interpreter, numpy + ml_dtypes (what any use of sigdnn costs), ``import sigdnn``
(lazy: the API loads on first use), the first use of the executor, torch (the
usual alternative, when installed), and the CLI's own start-up. Then the
sigdnn modules that cost the most (``-X importtime``), to show where the rest goes.

Run: python benchmarks/import_time.py [--runs 21]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.3

ROWS = {
    "python -c pass": ["-c", "pass"],
    'python -c "import numpy, ml_dtypes"': ["-c", "import numpy, ml_dtypes"],
    'python -c "import sigdnn"': ["-c", "import sigdnn"],
    "import sigdnn; sigdnn.Executor (first use)": ["-c", "import sigdnn; sigdnn.Executor"],
    "sigdnn --version": ["-m", "sigdnn", "--version"],
    "sigdnn builders (imports rich)": ["-m", "sigdnn", "builders"],
}
if importlib.util.find_spec("torch") is not None:
    ROWS['python -c "import torch"'] = ["-c", "import torch"]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def once(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heaviest_modules(env: dict[str, str], count: int = 8) -> list[tuple[int, str]]:
    """(self microseconds, module) of the costliest sigdnn modules when the executor is first used."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import sigdnn; sigdnn.Executor"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
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
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sigdnn; print(sigdnn.__file__, sorted(m for m in ('rich', 'safetensors', 'torch') if m in sys.modules))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for argv in ROWS.values():  # warm the file cache
        once(argv, env)
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    for _ in range(args.runs):
        for name, argv in ROWS.items():
            times[name].append(once(argv, env))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}; runs {args.runs}"
    )
    print(f"imported: {loaded}")
    print(f"{'command':<42} {'median':>8} {'min':>8} {'max':>8}")
    for name, values in times.items():
        print(f"{name:<42} {statistics.median(values):>7.3f}s {min(values):>7.3f}s {max(values):>7.3f}s")
    sigdnn_s = statistics.median(times['python -c "import sigdnn"'])
    first_use_s = statistics.median(times["import sigdnn; sigdnn.Executor (first use)"])
    verdict = "met" if sigdnn_s < TARGET_S else "NOT met"
    print(f"import sigdnn: {sigdnn_s:.3f} s (target < {TARGET_S} s: {verdict}); executor loaded: {first_use_s:.3f} s")
    print(f"load average (1 min) after the runs: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("costliest sigdnn modules at first use of the executor (self time, one run):")
    for micros, module in heaviest_modules(env):
        print(f"  {micros / 1000:6.1f} ms  {module}")


if __name__ == "__main__":
    main()
