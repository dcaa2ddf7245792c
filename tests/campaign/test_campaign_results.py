"""Results files: rows flushed as written, torn lines skipped (never cut) on resume, failing cases written replayable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import sigdnn
from sigdnn.campaign.cases import generate_cases
from sigdnn.campaign.judge import compute_reference
from sigdnn.campaign.results import Earlier, ResultsLog, finished, reproduce_command, write_failure
from sigdnn.campaign.spec import parse_spec
from sigdnn.io import read_tensor_file


def test_rows_are_readable_as_soon_as_written(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "results.jsonl"
    log = ResultsLog(path)
    log.write({"case": "a", "verdict": "pass", "max_abs_error": float("nan")})
    assert finished(path).rows["a"]["verdict"] == "pass"  # flushed before close
    log.write({"case": "b", "verdict": "fail"})
    log.close()
    assert list(finished(path).rows) == ["a", "b"]
    with ResultsLog(path) as again:  # appends
        again.write({"case": "a", "verdict": "fail"})
    assert finished(path).rows["a"]["verdict"] == "fail" and len(path.read_text().splitlines()) == 3


def test_a_torn_last_line_is_skipped_kept_and_ended_so_new_rows_start_clean(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    assert finished(path).rows == {} and not path.exists()
    good = '{"case": "a", "verdict": "pass"}\n{"case": "b", "verdict": "fail"}\n'
    path.write_text(good + '{"case": "c", "ver')
    earlier = finished(path)
    assert list(earlier.rows) == ["a", "b"] and earlier.unreadable == (3,)
    assert path.read_text() == good + '{"case": "c", "ver\n'  # nothing cut off; the torn line ended
    with ResultsLog(path) as log:
        log.write({"case": "c", "verdict": "pass"})
    assert list(finished(path).rows) == ["a", "b", "c"]
    path.write_text(good)
    assert finished(path) == Earlier({"a": {"case": "a", "verdict": "pass"}, "b": {"case": "b", "verdict": "fail"}})
    assert path.read_text() == good


def test_the_reproduce_command_pins_the_engine_and_quotes_paths(tmp_path: Path) -> None:
    spec = parse_spec('backend = "reference"\nengines = ["broken.pointwise", 30100]\nseeds = [4]\n[[generate]]\n'
                      'op = "pointwise"\nmodes = ["add"]\nshapes = [[3]]\n', tmp_path)  # fmt: skip
    by_name, by_id = generate_cases(spec).cases
    assert reproduce_command(Path("a b/graph.sdg"), by_name) == (
        "sigdnn validate 'a b/graph.sdg' --backend reference --seed 4 --engine broken.pointwise"
    )
    assert reproduce_command(Path("g.sdg"), by_id).endswith("--seed 4 --engine 30100")
    unpinned = generate_cases(parse_spec('[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[3]]\n', tmp_path))
    assert reproduce_command(Path("g.sdg"), unpinned.cases[0]) == "sigdnn validate g.sdg --backend gpu --seed 0"


def test_a_failing_case_is_written_as_graph_inputs_reference_and_report(tmp_path: Path) -> None:
    spec = parse_spec('backend = "reference"\nengines = ["broken.pointwise"]\nseeds = [2]\n[[generate]]\n'
                      'op = "pointwise"\nmodes = ["mul"]\ndtypes = ["bfloat16"]\nshapes = [[3, 5]]\n', tmp_path)  # fmt: skip
    (case,) = generate_cases(spec).cases
    reference = compute_reference(case.graph, case.seed)
    command = write_failure(tmp_path / "failures", case, reference, {"case": case.case_id, "verdict": "fail"})
    folder = tmp_path / "failures" / case.case_id
    assert command == reproduce_command(folder / "graph.sdg", case)
    assert (folder / "graph.sdg").read_bytes() == case.graph
    inputs = read_tensor_file(folder / "inputs.safetensors")
    outputs = read_tensor_file(folder / "reference.safetensors")
    for saved, original in [(inputs, reference.inputs), (outputs, reference.outputs)]:
        assert saved.keys() == original.keys()
        for name, value in original.items():
            assert saved[name].dtype == value.dtype
            np.testing.assert_array_equal(saved[name], value)
    replay = sigdnn.Executor("reference").run(folder / "graph.sdg", inputs)
    np.testing.assert_array_equal(replay["out"], outputs["out"])
    report = json.loads((folder / "case.json").read_text())
    assert report["verdict"] == "fail" and report["reproduce"] == command
    assert report["run_device_only"] == (
        f"sigdnn run {folder / 'graph.sdg'} --inputs {folder / 'inputs.safetensors'} --engine broken.pointwise"
    )
