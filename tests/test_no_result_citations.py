"""No package module cites a benchmark result file (issue #33): results are dated snapshots that the next run
replaces, so a figure quoted beside code goes stale; the code says what it does and why, benchmarks/ says how fast."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sigdnn"


def test_no_module_cites_a_benchmark_result() -> None:
    citing = [
        f"{path.relative_to(PACKAGE).as_posix()}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "benchmarks/results" in line or "results/" in line.replace("campaign-results/", "")
    ]
    assert not citing, f"modules citing benchmark results: {citing}"
