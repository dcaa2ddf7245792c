"""The campaign's files as a user finds them: their names, a closed log, failing cases written again
on a resume, NaN errors in a report, and a failed write naming the file it could not write."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from sigdnn.campaign import results
from sigdnn.campaign.cases import generate_cases
from sigdnn.campaign.judge import compute_reference
from sigdnn.campaign.results import ResultsLog, finished, write_failure
from sigdnn.campaign.spec import parse_spec
from sigdnn.errors import SigdnnError
from sigdnn.io import FileError


def test_the_file_names_are_the_documented_ones() -> None:
    assert (results.RESULTS, results.SHRUNK, results.FAILURES) == ("results.jsonl", "shrunk.jsonl", "failures")


def test_the_log_makes_missing_folders_and_closes(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "a" / "b" / "results.jsonl")
    log.write({"case": "x", "verdict": "pass"})
    log.close()
    with pytest.raises(ValueError, match="closed file"):
        log.write({"case": "y", "verdict": "pass"})
    with ResultsLog(tmp_path / "r.jsonl") as inside:
        inside.write({"case": "x", "verdict": "pass"})
    with pytest.raises(ValueError, match="closed file"):
        inside.write({"case": "y", "verdict": "pass"})
    assert list(finished(tmp_path / "r.jsonl").rows) == ["x"]


def test_a_damaged_row_in_the_middle_is_skipped_and_every_row_after_it_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = '{"case": "a", "verdict": "pass"}\n'
    for bad in ["[1, 2]\n", '{"verdict": "pass"}\n', '"text"\n', "not json\n", '{"case": 7}\n', "\xff\xfe\n"]:
        text = good + bad + '{"case": "d", "verdict": "pass"}\n'
        path.write_text(text)
        earlier = finished(path)
        assert list(earlier.rows) == ["a", "d"] and earlier.unreadable == (2,)
        assert path.read_text() == text  # never truncated


def test_results_through_a_symbolic_link_are_refused_and_the_target_untouched(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("not a row\nthe user's notes\n")
    campaign = tmp_path / "campaign"
    campaign.mkdir()
    (campaign / "results.jsonl").symlink_to(precious)
    with pytest.raises(FileError, match="is a symbolic link"):
        finished(campaign / "results.jsonl")
    with pytest.raises(FileError, match="is a symbolic link"):
        ResultsLog(campaign / "results.jsonl")
    assert precious.read_text() == "not a row\nthe user's notes\n"


def test_results_with_a_second_name_are_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.jsonl").write_text('{"case": "a"}\n')
    os.link(tmp_path / "elsewhere.jsonl", tmp_path / "results.jsonl")
    with pytest.raises(FileError, match="has 2 names"):
        finished(tmp_path / "results.jsonl")
    with pytest.raises(FileError, match="has 2 names"):
        ResultsLog(tmp_path / "results.jsonl")


@pytest.fixture(scope="module")
def failing_case(tmp_path_factory: pytest.TempPathFactory):
    spec = parse_spec('backend = "reference"\nengines = ["broken.pointwise"]\nseeds = [2]\n[[generate]]\n'
                      'op = "pointwise"\nmodes = ["mul"]\nshapes = [[3]]\n', tmp_path_factory.mktemp("spec"))  # fmt: skip
    (case,) = generate_cases(spec).cases
    return case, compute_reference(case.graph, case.seed)


def test_a_failing_case_written_twice_is_replaced(tmp_path: Path, failing_case) -> None:
    case, reference = failing_case
    row = {"case": case.case_id, "verdict": "fail", "max_abs_error": math.nan, "max_ulp_error": math.inf}
    write_failure(tmp_path, case, reference, {**row, "verdict": "error"})
    write_failure(tmp_path, case, reference, row)  # a resumed campaign judges it again
    report = json.loads((tmp_path / case.case_id / "case.json").read_text())
    assert report["verdict"] == "fail"
    assert math.isnan(report["max_abs_error"]) and report["max_ulp_error"] == math.inf


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("graph.sdg", "failing case graph"),
        ("inputs.safetensors", "failing case inputs"),
        ("reference.safetensors", "failing case reference outputs"),
        ("case.json", "failing case report"),
    ],
)
def test_a_file_that_cannot_be_written_is_named(tmp_path: Path, failing_case, name: str, what: str) -> None:
    case, reference = failing_case
    (tmp_path / case.case_id / name).mkdir(parents=True)  # a folder where the file goes
    with pytest.raises(SigdnnError, match=f"{what} "):
        write_failure(tmp_path, case, reference, {"case": case.case_id, "verdict": "fail"})
