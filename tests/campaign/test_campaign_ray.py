"""Campaigns on a Ray local cluster against a deliberately broken CPU plugin (installed as an entry point).

One cluster (2 CPUs) serves the module. What is checked:
- a 576-case campaign finds exactly the cases the planted rules say fail,
  and no false failure (a correct plugin on the same cases passes all);
- each (graph, seed) reference runs once, shared by both engines;
- every failing case is written out and replays (graph + inputs files);
- the shrinker reduces failing cases to the smallest failing shape;
- a worker killed mid-run and a driver stopped mid-run, then resumed,
  finish with the undisturbed results and do not redo finished cases.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from campaign_plugin_site import BROKEN, GOOD, make_plugin_site, planted_failure, spec_text  # noqa: E402

import sigdnn  # noqa: E402
from sigdnn.campaign import parse_spec  # noqa: E402
from sigdnn.campaign.cases import generate_cases  # noqa: E402
from sigdnn.campaign.judge import compute_reference, judge  # noqa: E402
from sigdnn.campaign.runner import local_runtime_env, run_campaign  # noqa: E402
from sigdnn.cli import main  # noqa: E402
from sigdnn.executor import executor as executor_module  # noqa: E402
from sigdnn.io import read_tensor_file  # noqa: E402
from sigdnn.registry import Registry  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = make_plugin_site(tmp_path_factory.mktemp("site"))
    sys.path.insert(0, str(path))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=local_runtime_env())
    yield path
    ray.shutdown()
    sys.path.remove(str(path))
    sys.modules.pop("broken_plugin_builders", None)


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_campaign_finds_exactly_the_planted_failures(
    site: Path, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text([BROKEN, GOOD], '[["1..4", "1..12"]]'))
    status = main(["campaign", str(spec), "--output", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert status == 1  # failures
    rows = read_rows(tmp_path / "out" / "results.jsonl")
    assert len(rows) == len({r["case"] for r in rows}) == 2 * 3 * 48 * 2 >= 500
    assert not [r for r in rows if r["verdict"] == "error"]
    failing = {r["case"] for r in rows if r["verdict"] == "fail"}
    expected = {r["case"] for r in rows if planted_failure(r)}
    assert failing == expected and len(expected) == 3 * (16 + 11)
    assert "576 cases" in printed and "81 failing" in printed and "288 reference runs" in printed
    assert "pointwise[add]   float16    broken.pointwise      48         16" in printed

    # Every failing case replays from its files: the inputs saved, the engine pinned, the same wrong answer.
    registry = Registry()  # loads the plugin's entry point from the site on sys.path
    for row in [r for r in rows if r["verdict"] == "fail"][:6]:
        folder = tmp_path / "out" / "failures" / row["case"]
        assert row["reproduce"].startswith(f"sigdnn validate {folder / 'graph.sdg'} --backend reference --seed 0")
        graph = sigdnn.deserialize((folder / "graph.sdg").read_bytes())
        inputs = read_tensor_file(folder / "inputs.safetensors")
        replay = sigdnn.validate(graph, inputs, executor=sigdnn.Executor("reference", engine=BROKEN, registry=registry))
        assert not replay.passed
        assert replay.outputs[0].max_abs_error == pytest.approx(row["max_abs_error"])

    # The recorded command itself reproduces the failure (same seed, same inputs, the engine pinned).
    monkeypatch.setattr(executor_module, "DEFAULT_REGISTRY", registry)
    capsys.readouterr()
    for row in [r for r in rows if r["verdict"] == "fail"][:2]:
        assert main(shlex.split(row["reproduce"])[1:]) == 1
        table = capsys.readouterr().out
        assert BROKEN in table and "FAIL" in table

    # The shrinker: from the largest failing case of each group to the smallest shape the rule makes fail.
    shrunk = read_rows(tmp_path / "out" / "shrunk.jsonl")
    assert len(shrunk) == 6
    by_mode = {s["smallest"].split()[0]: s["to"] for s in shrunk}
    assert by_mode == {"pointwise[add]": [1, 9], "pointwise[mul]": [1, 3]}
    assert {tuple(s["from"]) for s in shrunk} == {(4, 12), (3, 11)}
    assert "shrunk [4, 12] -> [1, 9]" in printed


def test_a_killed_worker_and_a_stopped_driver_resume_to_the_same_results(site: Path, tmp_path: Path) -> None:
    spec = parse_spec(spec_text([BROKEN], '[["1..3", "1..8"]]', modes='["mul"]', shrink=0), tmp_path)
    cases = generate_cases(spec).cases
    assert len(cases) == 72
    crash_at = 40  # the worker running this case dies (os._exit) once; Ray restarts it and runs the case again
    crash_shape = "x".join(map(str, cases[crash_at].recipe.shape))
    assert crash_shape not in ["x".join(map(str, c.recipe.shape)) for c in cases[25:crash_at]]

    class Stop(Exception):
        pass

    seen: list[str] = []

    def stop_after_25(row: dict[str, Any]) -> None:
        # Counted, not a case id: with two actors the 25th row to arrive need not be case 24's (under load
        # a later case can finish first, and stopping at case 24's row then left 24 or 26 rows).
        seen.append(row["case"])
        if len(seen) == 25:
            raise Stop  # the driver goes away between two results

    with pytest.raises(Stop):
        run_campaign(spec, on_row=stop_after_25)
    results = tmp_path / "campaign-results" / "results.jsonl"
    first = read_rows(results)
    # Two actors run cases side by side: rows arrive in completion order, not case order.
    assert len(first) == len({r["case"] for r in first}) == 25
    assert {r["case"] for r in first} <= {c.case_id for c in cases}
    with open(results, "a") as f:
        f.write('{"case": "torn')  # a write the kill cut short

    with pytest.raises(sigdnn.UsageError, match="--resume"):
        run_campaign(spec)
    (site / "crash-once").write_text(crash_shape)
    resumed = run_campaign(spec, resume=True)
    assert (resumed.ran, resumed.resumed, resumed.unreadable) == (47, 25, (26,))
    assert not (site / "crash-once").exists()  # the planted crash happened
    assert results.read_text().splitlines()[25] == '{"case": "torn'  # skipped and reported, never cut off
    lines = [json.loads(line) for i, line in enumerate(results.read_text().splitlines()) if i != 25]
    assert lines[:25] == first  # finished cases were not redone
    rows = [{r["case"]: r for r in lines}[c.case_id] for c in cases]  # rows arrive in completion order
    assert len(lines) == len(rows) == 72
    assert len({r["run"] for r in lines[25:]}) == 1 and lines[25]["run"] != first[0]["run"]
    crashed = {r["case"]: r for r in lines[25:]}[cases[crash_at].case_id]  # it ran in the resumed run
    assert crashed["worker"] not in {r["worker"] for r in first}  # ... on a worker restarted after the crash
    assert not resumed.errors

    # The same results as an undisturbed run: each case judged here, in this process.
    sigdnn.register(sys.modules["broken_plugin_builders"].BrokenPointwise, replace=True)
    try:
        for case, row in zip(cases, rows):
            alone = judge(case, compute_reference(case.graph, case.seed))
            assert (row["verdict"], row["max_abs_error"]) == (alone["verdict"], alone["max_abs_error"])
    finally:
        sigdnn.registry.DEFAULT_REGISTRY.unregister(30100)
    assert sum(r["verdict"] == "fail" for r in rows) == sum(planted_failure(r) for r in rows) == 3 * 7


def test_the_gpu_backend_needs_a_cluster_with_gpus(site: Path, tmp_path: Path) -> None:
    spec = parse_spec('backend = "gpu"\n[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4]]\n', tmp_path)
    with pytest.raises(sigdnn.UsageError, match="the Ray cluster has no GPU"):
        run_campaign(spec)
    assert ray.is_initialized()  # a cluster the campaign joined is left running
