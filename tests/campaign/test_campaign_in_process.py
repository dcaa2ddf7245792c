"""Campaigns without Ray (``sigdnn campaign --in-process``) against the deliberately broken CPU plugin.

What is checked: the in-process runner finds exactly the cases the planted
rules fail (the rules restated here, not imported), computes each (graph,
seed) reference once, writes replayable failure files and shrinks as the
Ray runner does; a stopped run resumes without redoing a case; a reference
or a judge that raises becomes an ``error`` row and the campaign goes on;
the command's options that mean nothing without Ray are refused. The Ray
runner's GPU campaigns compute their references on the case actors (a
recording stand-in for Ray checks where each call goes).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import broken_plugin_builders as plugin
import pytest
from campaign_plugin_site import BROKEN, GOOD, planted_failure, spec_text
from test_campaign_command import BLOCK_RAY

import sigdnn
from sigdnn.campaign import command, in_process, parse_spec, summary
from sigdnn.campaign.cases import generate_cases
from sigdnn.campaign.in_process import run_in_process
from sigdnn.campaign.runner import CALLS_PER_ACTOR, _Pool
from sigdnn.cli import main
from sigdnn.io import read_tensor_file
from sigdnn.registry import DEFAULT_REGISTRY


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    """The plugin's two engines in the default registry (a Ray worker would load them by entry point)."""
    for builder in (plugin.BrokenPointwise, plugin.GoodPointwise):
        sigdnn.register(builder, replace=True)
    yield
    for builder in (plugin.BrokenPointwise, plugin.GoodPointwise):
        DEFAULT_REGISTRY.unregister(builder.engine_id)


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_in_process_campaign_finds_exactly_the_planted_failures(tmp_path: Path, capsys: Any) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text([BROKEN, GOOD], '[["1..2", "1..12"]]'))
    status = main(["campaign", str(spec), "--in-process", "--output", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert status == 1  # failures
    rows = read_rows(tmp_path / "out" / "results.jsonl")
    assert [r["case"] for r in rows] == [
        c.case_id for c in generate_cases(parse_spec(spec.read_text(), tmp_path)).cases
    ]
    assert len(rows) == 2 * 3 * 24 * 2 and not [r for r in rows if r["verdict"] == "error"]
    failing = {r["case"] for r in rows if r["verdict"] == "fail"}
    assert failing == {r["case"] for r in rows if planted_failure(r)} and len(failing) == 3 * (8 + 5)
    assert f"{len(rows)} cases" in printed and f"{len(failing)} failing" in printed
    assert f" 0 errors; {len(rows) // 2} reference runs;" in printed  # one per graph and seed, both engines
    assert len({r["run"] for r in rows}) == 1 and len(rows[0]["run"]) == 12  # the Ray runner's run ids
    passing = [r for r in rows if r["verdict"] == "pass"]
    assert passing and not [r for r in passing if "reproduce" in r]  # only failures are written out
    assert sorted(p.name for p in (tmp_path / "out" / "failures").iterdir()) == sorted(failing)

    for row in [r for r in rows if r["verdict"] == "fail"][:3]:  # each failure replays from its files
        folder = tmp_path / "out" / "failures" / row["case"]
        graph = sigdnn.deserialize((folder / "graph.sdg").read_bytes())
        inputs = read_tensor_file(folder / "inputs.safetensors")
        replay = sigdnn.validate(graph, inputs, executor=sigdnn.Executor("reference", engine=BROKEN))
        assert not replay.passed and replay.outputs[0].max_abs_error == pytest.approx(row["max_abs_error"])

    shrunk = read_rows(tmp_path / "out" / "shrunk.jsonl")
    assert {s["smallest"].split()[0]: s["to"] for s in shrunk} == {"pointwise[add]": [1, 9], "pointwise[mul]": [1, 3]}
    assert "shrunk [2, 12] -> [1, 9]" in printed
    by_case = {r["case"]: r for r in rows}
    for entry in shrunk:
        assert set(entry) == {"case", "from", "to", "tries", "budget_exhausted", "smallest", "reproduce"}
        assert by_case[entry["case"]]["verdict"] == "fail" and entry["from"] == by_case[entry["case"]]["shapes"]["out"]
        assert entry["budget_exhausted"] is False and 0 < entry["tries"] < 200
        smallest = Path(entry["reproduce"].split()[2]).parent  # sigdnn validate FOLDER/graph.sdg ...
        assert smallest != tmp_path / "out" / "failures" / entry["case"]  # a smaller case, written out anew
        assert json.loads((smallest / "case.json").read_text())["shrunk_from"] == entry["case"]


def test_a_case_nothing_smaller_fails_replays_from_its_own_files(tmp_path: Path) -> None:
    spec = parse_spec(spec_text([BROKEN], "[[1, 9]]", modes='["add"]'), tmp_path)
    result = run_in_process(spec)
    assert len(result.failures) == len(result.shrunk) == 3  # the three dtypes
    rows = {r["case"]: r for r in result.failures}
    for entry in result.shrunk:
        assert entry["from"] == entry["to"] == [1, 9] and entry["reproduce"] == rows[entry["case"]]["reproduce"]


@pytest.mark.parametrize("name", ["results.jsonl", "shrunk.jsonl"])
def test_results_behind_a_link_are_refused_before_any_work(tmp_path: Path, name: str) -> None:
    spec = parse_spec(spec_text([BROKEN], "[[2]]", modes='["add"]'), tmp_path)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text('{"case": "someone else\'s"}\n')
    (tmp_path / "campaign-results").mkdir()
    (tmp_path / "campaign-results" / name).symlink_to(elsewhere)
    with pytest.raises(sigdnn.FileError, match="is a symbolic link"):
        run_in_process(spec)
    assert elsewhere.read_text() == '{"case": "someone else\'s"}\n'
    assert sorted(p.name for p in (tmp_path / "campaign-results").iterdir()) == [name]  # refused before any case


def test_a_stopped_in_process_run_resumes_without_redoing_a_case(tmp_path: Path) -> None:
    spec = parse_spec(spec_text([BROKEN], '[["1..2", "1..6"]]', modes='["mul"]', shrink=0), tmp_path)
    cases = generate_cases(spec).cases

    class Stop(Exception):
        pass

    def stop_at_10(row: dict[str, Any]) -> None:
        if row["case"] == cases[9].case_id:
            raise Stop

    with pytest.raises(Stop):
        run_in_process(spec, on_row=stop_at_10)
    results = tmp_path / "campaign-results" / "results.jsonl"
    first = read_rows(results)
    assert [r["case"] for r in first] == [c.case_id for c in cases[:10]]
    with pytest.raises(sigdnn.UsageError, match="--resume"):
        run_in_process(spec)
    resumed = run_in_process(spec, resume=True)
    assert (resumed.ran, resumed.resumed) == (len(cases) - 10, 10)
    lines = read_rows(results)
    assert lines[:10] == first and [r["case"] for r in lines] == [c.case_id for c in cases]
    assert [r["case"] for r in resumed.rows] == [c.case_id for c in cases]
    assert sum(r["verdict"] == "fail" for r in lines) == sum(planted_failure(r) for r in lines) > 0


def test_a_reference_or_judge_that_raises_is_an_error_row_and_the_campaign_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = parse_spec(spec_text([BROKEN, GOOD], '[["1..3"]]', modes='["mul"]', shrink=0), tmp_path)
    cases = generate_cases(spec).cases
    poisoned, real = cases[0].reference_key, in_process.compute_reference

    def reference(graph: bytes, seed: int, *args: Any, **kwargs: Any) -> Any:
        if (graph, seed) == (cases[0].graph, cases[0].seed):
            raise MemoryError("the reference ran out\nsecond line")
        return real(graph, seed, *args, **kwargs)

    calls: list[str] = []
    real_judge = in_process.CaseWorker.judge

    def judge(self: Any, case: Any, ref: Any) -> dict[str, Any]:
        calls.append(case.case_id)
        if case.case_id == cases[-1].case_id:
            raise RuntimeError("a bug in a builder")
        return real_judge(self, case, ref)

    monkeypatch.setattr(in_process, "compute_reference", reference)
    monkeypatch.setattr(in_process.CaseWorker, "judge", judge)
    result = run_in_process(spec)
    rows = {r["case"]: r for r in result.rows}
    poisoned_cases = [c.case_id for c in cases if c.reference_key == poisoned]
    assert len(poisoned_cases) == 2  # both engines of the graph and seed
    for case_id in poisoned_cases:
        assert rows[case_id]["verdict"] == "error"
        assert rows[case_id]["error"] == "MemoryError: the reference ran out"
    assert rows[cases[-1].case_id] == {**rows[cases[-1].case_id], "verdict": "error",
                                       "error": "RuntimeError: a bug in a builder"}  # fmt: skip
    assert not set(poisoned_cases) & set(calls)  # no judge without a reference
    others = [c.case_id for c in cases if c.case_id not in poisoned_cases and c.case_id != cases[-1].case_id]
    assert others and all(rows[c]["verdict"] in ("pass", "fail") for c in others)
    assert len(result.rows) == len(cases) and len(result.errors) == 3


def test_each_reference_is_freed_once_its_engines_are_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec(spec_text([BROKEN, GOOD], '[["1..4"]]', modes='["mul"]', shrink=0), tmp_path)
    made: list[weakref.ref] = []  # every reference computed (ReferenceResult holds dicts: no WeakSet)
    spreads: list[bool] = []
    real, real_judge = in_process.compute_reference, in_process.CaseWorker.judge

    def reference(*args: Any, spread: bool) -> Any:
        spreads.append(spread)
        result = real(*args, spread=spread)
        made.append(weakref.ref(result))
        return result

    held: list[int] = []

    def judge(self: Any, case: Any, ref: Any) -> dict[str, Any]:
        gc.collect()
        held.append(sum(r() is not None for r in made))
        return real_judge(self, case, ref)

    monkeypatch.setattr(in_process, "compute_reference", reference)
    monkeypatch.setattr(in_process.CaseWorker, "judge", judge)
    run_in_process(spec)
    assert len(held) == 2 * 3 * 4 and set(held) == {1}  # never more than the one being judged
    assert spreads == [True] * 12  # no tolerance override: the spread is measured, once per graph and seed

    spreads.clear()
    overridden = parse_spec(spec_text([BROKEN], '[[2]]', modes='["mul"]', shrink=0) + "\n[tolerance]\nrtol = 0.5\n",
                            tmp_path / "other")  # fmt: skip
    assert {r["verdict"] for r in run_in_process(overridden).rows} == {"pass"}
    assert spreads == [False] * 3  # a given tolerance needs no spread


def test_a_shrink_that_raises_is_recorded_and_the_others_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec(spec_text([BROKEN], '[["1..2", "1..10"]]'), tmp_path)
    real_shrink = in_process.CaseWorker.shrink
    tried: list[str] = []

    def shrink(self: Any, case: Any, *args: Any) -> Any:
        tried.append(case.case_id)
        if len(tried) == 1:
            raise MemoryError("shrinking ran out")
        return real_shrink(self, case, *args)

    monkeypatch.setattr(in_process.CaseWorker, "shrink", shrink)
    result = run_in_process(spec)
    assert len(result.shrunk) == len(tried) == 6  # add and mul, three dtypes
    assert result.shrunk[0] == {"case": tried[0], "error": "MemoryError"}
    assert all(s["to"] in ([1, 9], [1, 3]) for s in result.shrunk[1:])
    assert len(read_rows(tmp_path / "campaign-results" / "shrunk.jsonl")) == 5  # the error is not a line


def test_without_ray_in_process_runs_and_the_hint_names_it(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('backend = "reference"\n[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4]]\n')
    run = [sys.executable, "-c", BLOCK_RAY, "campaign", str(spec), "--output", str(tmp_path / "out")]
    refused = subprocess.run(run, capture_output=True, text=True)
    assert refused.returncode == 2 and "or pass --in-process" in refused.stderr
    done = subprocess.run([*run, "--in-process"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (row,) = read_rows(tmp_path / "out" / "results.jsonl")  # one dtype (the default), one engine
    assert (row["verdict"], row["builders"]) == ("pass", ["reference.pointwise"])


@pytest.mark.parametrize("option", [["--ray", "auto"], ["--gpus", "1"]])
def test_in_process_refuses_the_cluster_options(tmp_path: Path, option: list[str], capsys: Any) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4]]\n')
    assert main(["campaign", str(spec), "--in-process", *option]) == 2
    assert "--in-process runs without Ray: --ray and --gpus have no meaning with it" in capsys.readouterr().err


class _Recorder:
    """A stand-in for Ray's remote handles: each ``.remote`` call is recorded with who received it."""

    def __init__(self, name: str, log: list[tuple[str, str, tuple]]) -> None:
        self.name, self.log = name, log

    def __getattr__(self, method: str) -> Any:
        recorder = self

        class Method:
            def remote(self, *args: Any) -> str:
                recorder.log.append((recorder.name, method, args))
                return f"{recorder.name}.{method}"

        return Method()


class _FakeRay:
    """Ray's ``remote(...).options(...)``: an actor class gives recorders named actor0, actor1, ...; a function
    gives one recorder named cpu-task."""

    def __init__(self, resources: dict[str, float], log: list) -> None:
        self.resources, self.log, self.actors = resources, log, 0
        self.options: list[tuple[str, dict[str, Any]]] = []  # (what was made remote, the options asked for)

    def cluster_resources(self) -> dict[str, float]:
        return self.resources

    def remote(self, target: Any) -> Any:
        fake = self

        def make_actor(*args: Any) -> _Recorder:
            fake.actors += 1
            return _Recorder(f"actor{fake.actors - 1}", fake.log)

        class Options:
            def options(self, **kwargs: Any) -> Any:
                fake.options.append((target.__name__, kwargs))
                if isinstance(target, type):
                    return type("Actor", (), {"remote": staticmethod(make_actor)})()
                return _Recorder("cpu-task", fake.log).__getattr__("call")

        return Options()


@pytest.mark.parametrize(
    ("backend", "resources", "actors", "options"),
    [
        ("gpu", {"GPU": 2.0, "CPU": 8.0}, 2, {"num_gpus": 1, "num_cpus": 1}),
        ("gpu", {"GPU": 2.0, "CPU": 2.0}, 2, {"num_gpus": 1, "num_cpus": 0}),  # no CPU left for the references
        ("gpu", {"GPU": 1.0}, 1, {"num_gpus": 1, "num_cpus": 0}),  # a cluster that names no CPU has one
        ("reference", {"CPU": 8.0}, 4, {"num_cpus": 1}),  # a pair of CPUs an actor: half left to references
        ("reference", {"CPU": 1.0}, 1, {"num_cpus": 1}),
        ("reference", {}, 1, {"num_cpus": 1}),
    ],
)
def test_the_pool_asks_ray_for_an_actor_per_gpu_or_cpu_pair(
    tmp_path: Path, backend: str, resources: dict[str, float], actors: int, options: dict[str, int]
) -> None:
    spec = parse_spec(f'backend = "{backend}"\nretries = 5\n[[generate]]\nop = "pointwise"\nshapes = [[4]]\n',
                      tmp_path)  # fmt: skip
    ray = _FakeRay(resources, [])
    pool = _Pool(ray, spec, sigdnn.graph.limits.DEFAULT_LIMITS)
    assert len(pool.actors) == ray.actors == actors and pool.in_flight == [0] * actors
    assert ray.options == [("CaseWorker", {"max_restarts": -1, "max_task_retries": 5, **options}),
                           ("_reference", {"num_cpus": 1, "max_retries": 5})]  # fmt: skip


def test_the_pool_queues_on_the_least_busy_actor_up_to_its_limit(tmp_path: Path) -> None:
    spec = parse_spec('backend = "reference"\n[[generate]]\nop = "pointwise"\nshapes = [[4]]\n', tmp_path)
    pool = _Pool(_FakeRay({"CPU": 6.0}, []), spec, sigdnn.graph.limits.DEFAULT_LIMITS)
    assert pool.free() == 0
    pool.in_flight = [2, 1, 3]
    assert pool.free() == 1
    pool.in_flight = [CALLS_PER_ACTOR, CALLS_PER_ACTOR - 1, CALLS_PER_ACTOR]
    assert pool.free() == 1
    pool.in_flight = [CALLS_PER_ACTOR] * 3
    assert pool.free() is None


@pytest.mark.parametrize("backend", ["gpu", "reference"])
def test_a_gpu_campaigns_references_run_on_its_case_actors(tmp_path: Path, backend: str) -> None:
    spec = parse_spec(f'backend = "{backend}"\n[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4]]\n',
                      tmp_path)  # fmt: skip
    case = generate_cases(spec).cases[0]
    log: list[tuple[str, str, tuple]] = []
    pool = _Pool(_FakeRay({"GPU": 2.0, "CPU": 8.0}, log), spec, spec_limits := sigdnn.graph.limits.DEFAULT_LIMITS)
    log.clear()
    pool.reference(len(pool.actors) - 1, case)
    if backend == "gpu":  # the actor that judges the case computes its reference, on its GPU
        assert log == [(f"actor{len(pool.actors) - 1}", "reference", (case.graph, case.seed, True))]
    else:
        assert log == [("cpu-task", "call", (case.graph, case.seed, spec_limits, True))]


def test_the_command_lists_failures_errors_and_progress(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, so the command's own lines are checked here: ten failures named then a count, errors named,
    the progress line after each row, and the exit status."""
    lines: list[str] = []
    totals: list[int] = []

    @contextlib.contextmanager
    def progress(total: int, failures_of: Any, enabled: bool = True) -> Iterator[Any]:
        totals.append(total)
        yield lambda: lines.append(f"{failures_of()} failing")

    monkeypatch.setattr(summary, "progress_display", progress)
    real_judge = in_process.CaseWorker.judge

    def judge(self: Any, case: Any, ref: Any) -> dict[str, Any]:
        if case.recipe.shape == (1, 1):
            raise RuntimeError("a bug")
        return real_judge(self, case, ref)

    monkeypatch.setattr(in_process.CaseWorker, "judge", judge)
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text([BROKEN], '[["1..2", "1..12"]]', modes='["add"]', shrink=0))
    assert main(["campaign", str(spec), "--in-process", "--output", str(tmp_path / "campaign-results")]) == 1
    out = capsys.readouterr().out
    rows = read_rows(tmp_path / "campaign-results" / "results.jsonl")
    failures = [r for r in rows if r["verdict"] == "fail"]
    assert totals == [len(rows)] == [72] and len(failures) == 24
    failing, seen = 0, []
    for row in rows:
        failing += row["verdict"] != "pass"
        seen.append(f"{failing} failing")
    assert lines == seen  # an error counts as failing, as a failure does
    shown = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert shown == [f"FAIL {r['source']} seed 0: {r['reproduce']}" for r in failures[:10]]
    assert f"... 14 more in {tmp_path / 'campaign-results' / 'results.jsonl'}" in out
    errors = [line for line in out.splitlines() if line.startswith("ERROR ")]
    assert errors == [f"ERROR {r['source']} seed 0: RuntimeError: a bug" for r in rows if r["verdict"] == "error"]
    assert len(errors) == 3 and "summary" in out


def test_ten_failures_are_all_named_without_a_count(tmp_path: Path, capsys: Any) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text([BROKEN], '[["1..5", "1..10"]]', modes='["add"]', shrink=0).replace(
        '["float32", "float16", "bfloat16"]', '["float32"]'))  # fmt: skip
    assert main(["campaign", str(spec), "--in-process"]) == 1
    out = capsys.readouterr().out
    assert sum(line.startswith("FAIL ") for line in out.splitlines()) == 10 and " more in " not in out
    spec.write_text(spec_text([GOOD], '[["1..2", "1..10"]]', modes='["add"]', shrink=0))
    assert main(["campaign", str(spec), "--in-process", "--output", str(tmp_path / "good")]) == 0


def test_without_ray_the_command_refuses_unless_in_process(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command, "ray_missing", lambda: True)
    spec = tmp_path / "s.toml"
    spec.write_text('backend = "reference"\n[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4]]\n')
    assert main(["campaign", str(spec)]) == 2
    assert capsys.readouterr().err.strip() == (
        "sigdnn: error: UsageError: sigdnn campaign runs on Ray, which is not installed; install it with: pip install "
        "'sigdnn[campaign]', or pass --in-process to run the cases in this process, one at a time"
    )
    assert main(["campaign", str(spec), "--in-process"]) == 0


def test_ray_missing_asks_the_import_system(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def find_spec(name: str) -> Any:
        asked.append(name)
        return None if name == "ray" else object()

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert command.ray_missing() is True and asked == ["ray"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    assert command.ray_missing() is False

    def broken(name: str) -> Any:
        raise ValueError("ray.__spec__ is None")

    monkeypatch.setattr(importlib.util, "find_spec", broken)
    assert command.ray_missing() is True


def test_eleven_failures_and_errors_name_ten_each_and_count_the_rest(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_judge = in_process.CaseWorker.judge

    def judge(self: Any, case: Any, ref: Any) -> dict[str, Any]:
        if case.recipe.shape[-1] <= 8 and case.recipe.shape[0] <= 11:
            raise RuntimeError("a bug")
        return real_judge(self, case, ref)

    monkeypatch.setattr(in_process.CaseWorker, "judge", judge)
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text([BROKEN], '[["1..11", [8, 9]]]', modes='["add"]', shrink=0).replace(
        '["float32", "float16", "bfloat16"]', '["float32"]'))  # fmt: skip
    assert main(["campaign", str(spec), "--in-process", "--output", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("FAIL ") for line in out) == 10
    assert sum(line.startswith("ERROR ") for line in out) == 10
    assert f"... 1 more in {tmp_path / 'out' / 'results.jsonl'}" in out
    assert [line.strip() for line in out if line.strip().startswith("summary")] == ["summary"]
    assert "0 from earlier runs), 11 failing, 11 errors; 22 reference runs;" in out[0]


def test_a_resume_reports_unreadable_lines_and_skipped_combinations(tmp_path: Path, capsys: Any) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'backend = "reference"\n[[generate]]\nop = "conv_fprop"\nshapes = [[1, 1, 1, 5, 2, 2], [1, 1, 1, 1, 2, 2]]\n'
    )
    out_dir = tmp_path / "out"
    assert main(["campaign", str(spec), "--in-process", "--output", str(out_dir)]) == 0
    first = capsys.readouterr().out
    assert ("skipped 1 combination(s) no graph can be made of, e.g. conv_fprop float32 [1, 1, 1, 5, 2, 2] packed: "
            "conv_fprop recipe: a 5-wide filter leaves no output of spatial dims [2, 2]") in first  # fmt: skip
    for torn, listed in ((10, "2, 3, 4, 5, 6, 7, 8, 9, 10, 11"), (11, "2, 3, 4, 5, 6, 7, 8, 9, 10, 11 ...")):
        with open(out_dir / "results.jsonl", "a") as f:
            f.write("torn\n" * (torn - 10 if torn > 10 else torn))
        assert main(["campaign", str(spec), "--in-process", "--output", str(out_dir), "--resume"]) == 0
        lines = capsys.readouterr().out
        assert "1 cases (0 run now, 1 from earlier runs)" in lines
        assert (f"{out_dir / 'results.jsonl'}: skipped {torn} unreadable line(s) of earlier results (line {listed}); "
                "they stay in the file, and a case with no readable row runs again") in lines  # fmt: skip
