"""CLI edges a new user hit (#32): an --engine that runs no node, validate with no GPU, validate --inputs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import add_graph, cli

import sigdnn
from sigdnn.cli.screen import Screen
from sigdnn.errors import UsageError


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_engine_that_serves_no_node_of_the_graph_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = add_graph(tmp_path / "g.sdg")
    code, out, err = cli(capsys, command, path, "--backend", "reference", "--engine", "reference.sdpa")
    assert code == 2 and out == ""
    assert "engine reference.sdpa (#" in err and "serves no node of graph 'small' (its ops: pointwise)" in err


def test_an_engine_that_serves_a_node_runs_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", add_graph(tmp_path / "g.sdg"), "--engine", "reference.pointwise")
    assert code == 0, err


def test_the_executor_refuses_an_engine_no_step_runs() -> None:
    g = sigdnn.Graph("mm", io_dtype="float32")
    g.matmul(g.tensor("a", (2, 3)), g.tensor("b", (3, 4))).set_output(True)
    with pytest.raises(UsageError, match=r"engine reference\.pointwise \(#\d+\) serves no node of graph 'mm'"):
        sigdnn.Executor("reference", engine="reference.pointwise").prepare(g)
    assert sigdnn.Executor("reference", engine="reference.matmul").prepare(g).steps


def test_validate_with_no_gpu_packages_says_to_install_them_or_use_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    code, out, err = cli(capsys, "validate", add_graph(tmp_path / "g.sdg"))
    assert code == 2 and out == ""
    assert "sigdnn validate checks the GPU builders against the reference unless told otherwise" in err
    assert "pip install 'sigdnn[gpu]'" in err and "--backend reference" in err


def test_validate_with_the_packages_but_no_gpu_says_why_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())
    monkeypatch.setattr("sigdnn.runtime.cuda.gpu_unavailable_reason", lambda: "no CUDA device is visible")
    code, _, err = cli(capsys, "validate", add_graph(tmp_path / "g.sdg"))
    assert code == 2
    assert "--backend gpu cannot run here: no CUDA device is visible; validate the graph on the CPU" in err
    assert "--backend reference" in err


def test_validate_inputs_replays_the_saved_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The inputs reach the comparison: a NaN in them shows in the JSON's worst element, not a random value."""
    path = add_graph(tmp_path / "g.sdg")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([[0.5, -1.0, 2.0]], np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    code, out, err = cli(capsys, "validate", path, "--backend", "reference", "--inputs", tmp_path / "in.npz")
    assert code == 0, err
    assert f"g.sdg (inputs '{tmp_path / 'in.npz'}'): graph 'small' against the CPU reference: PASS" in out
    got: dict[str, np.ndarray] = {}
    sigdnn.validate(sigdnn.deserialize(path.read_bytes()), {"a": a, "b": b}, backend="reference", got=got)
    np.testing.assert_array_equal(got["c"], a + b)
    code, out, _ = cli(capsys, "validate", path, "--backend", "reference", "--inputs", tmp_path / "in.npz", "--json")
    assert code == 0 and '"seed": null' in out


def test_validate_inputs_must_hold_every_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = add_graph(tmp_path / "g.sdg")
    np.savez(tmp_path / "in.npz", a=np.zeros((2, 3), np.float32))
    code, _, err = cli(capsys, "validate", path, "--backend", "reference", "--inputs", tmp_path / "in.npz")
    assert code == 2 and "lack input(s) 'b' of graph 'small'" in err


@pytest.mark.parametrize("extra", [["--seeds", "2"], ["SECOND"]])
def test_validate_inputs_is_for_one_graph_and_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    path = add_graph(tmp_path / "g.sdg")
    np.savez(tmp_path / "in.npz", a=np.zeros((2, 3), np.float32), b=np.zeros((1, 3), np.float32))
    extra = [str(path) if e == "SECOND" else e for e in extra]
    code, _, err = cli(capsys, "validate", path, *extra, "--backend", "reference", "--inputs", tmp_path / "in.npz")
    assert code == 2 and "--inputs gives one graph its inputs" in err


def test_validate_inputs_of_the_wrong_shape_name_the_tensor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = add_graph(tmp_path / "g.sdg")
    np.savez(tmp_path / "in.npz", a=np.zeros((3, 3), np.float32), b=np.zeros((1, 3), np.float32))
    code, _, err = cli(capsys, "validate", path, "--backend", "reference", "--inputs", tmp_path / "in.npz")
    assert code == 2 and "tensor 'a' (uid 1): shape [3, 3] does not match the graph's dims [2, 3]" in err


def test_validate_initialized_draws_weights_at_a_models_scale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--initialized: the weight w of y = x @ w is N(0, 1/fan-in) (fan-in 256: std 1/16, where validation's
    draw in [-2, 2) has std 1.15), x drawn as without the flag; each seed its own draw; not with --inputs."""
    g = sigdnn.Graph("linear", io_dtype="float32")
    g.matmul(g.tensor("x", (4, 256)), g.tensor("w", (256, 32)), name="mm").set_output(True).set_name("y")
    path = tmp_path / "linear.sdg"
    path.write_bytes(g.serialize())
    seen: list[dict[str, np.ndarray]] = []
    real = sigdnn.validate

    def recording(graph, inputs, **kw):
        seen.append(inputs)
        return real(graph, inputs, **kw)

    monkeypatch.setattr(sigdnn, "validate", recording)
    code, _, err = cli(capsys, "validate", path, "--backend", "reference", "--initialized", "--seeds", "2")
    assert code == 0, err
    assert len(seen) == 2 and not np.array_equal(seen[0]["w"], seen[1]["w"])
    for seed, inputs in enumerate(seen):
        assert 0.055 < inputs["w"].std() < 0.07
        np.testing.assert_array_equal(inputs["x"], sigdnn.validation.random_inputs(g, seed)["x"])
    code, _, err = cli(capsys, "validate", path, "--backend", "reference")
    assert code == 0 and seen[-1] is None
    np.savez(tmp_path / "in.npz", x=np.zeros((4, 256), np.float32), w=np.zeros((256, 32), np.float32))
    code, _, err = cli(
        capsys, "validate", path, "--initialized", "--backend", "reference", "--inputs", tmp_path / "in.npz"
    )
    assert code == 2 and "--initialized draws the inputs that --inputs gives" in err


def test_validate_of_several_graphs_sums_up_and_fails_if_any_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two graph files, the second judged failing: each gets its verdict, a summary table lists both (graph file,
    seed, verdict), the exit status is 1, and --report says where it wrote the reports."""
    first, second = add_graph(tmp_path / "first.sdg", "first"), add_graph(tmp_path / "second.sdg", "second")
    real = sigdnn.validate

    class Failing:
        passed = False

        def __init__(self, report) -> None:
            self.report = report

        def __getattr__(self, name: str):
            return getattr(self.report, name)

    def judged(graph, inputs, **kw):
        report = real(graph, inputs, **kw)
        return Failing(report) if graph.name == "second" else report

    monkeypatch.setattr(sigdnn, "validate", judged)
    monkeypatch.setattr("sigdnn.cli.validate._validation_json", lambda runs: {"runs": len(runs)})
    report = tmp_path / "reports.json"
    code, out, err = cli(capsys, "validate", first, second, "--backend", "reference", "--report", report)
    assert code == 1, err
    assert (
        "graph 'first' against the CPU reference: PASS" in out
        and "graph 'second' against the CPU reference: FAIL" in out
    )
    lines = out.splitlines()
    summary = lines[[line.strip() for line in lines].index("summary") :]
    header = summary[1]
    assert [h.strip() for h in header.split("  ") if h.strip()] == ["graph file", "seed", "verdict"]
    rows = [line for line in summary[2:] if "sdg" in line]
    assert [r.split() for r in rows] == [[str(first), "0", "PASS"], [str(second), "0", "FAIL"]]
    assert all(r.index(" 0 ") + 1 == header.index("seed") + 3 for r in rows)  # the seed right-justified
    assert f"wrote the reports to '{report}'" in out and report.read_text() == '{\n  "runs": 2\n}'
    code, out, _ = cli(capsys, "validate", first, "--backend", "reference")
    assert code == 0 and "summary" not in out


@pytest.mark.parametrize("target", ["graph", "inputs"])
def test_validate_never_writes_its_report_over_a_file_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    path = add_graph(tmp_path / "g.sdg")
    np.savez(tmp_path / "in.npz", a=np.zeros((2, 3), np.float32), b=np.zeros((1, 3), np.float32))
    before = {p: p.read_bytes() for p in (path, tmp_path / "in.npz")}
    report = path if target == "graph" else tmp_path / "in.npz"
    code, out, err = cli(capsys, "validate", path, "--backend", "reference", "--inputs", tmp_path / "in.npz",
                         "--report", report)  # fmt: skip
    what = "graph file" if target == "graph" else "--inputs file"
    assert code == 2 and out == ""
    assert err.startswith(f"sigdnn: error: FileError: --report file '{report}' is the {what} this command reads")
    assert {p: p.read_bytes() for p in before} == before


def test_validate_shows_its_progress_graph_by_graph_and_seed_by_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the live display says (on a terminal): each file read, each seed validated, the bar's total and steps."""
    shown: list[tuple[str, int]] = []
    totals: list[int | None] = []

    @contextlib.contextmanager
    def progress(self: Any, total: int | None = None) -> Iterator[Any]:
        totals.append(total)
        yield lambda text, advance=0: shown.append((text, advance))

    monkeypatch.setattr(Screen, "progress", progress)
    first, second = add_graph(tmp_path / "g.sdg"), add_graph(tmp_path / "h.sdg")
    code, _, err = cli(capsys, "validate", first, second, "--backend", "reference", "--seed", "3", "--seeds", "2")
    assert code == 0, err
    assert totals == [4]
    assert shown == [
        (f"reading {first}", 0),
        (f"validating {first} (seed 3)", 0),
        (f"validated {first} (seed 3)", 1),
        (f"validating {first} (seed 4)", 0),
        (f"validated {first} (seed 4)", 1),
        (f"reading {second}", 0),
        (f"validating {second} (seed 3)", 0),
        (f"validated {second} (seed 3)", 1),
        (f"validating {second} (seed 4)", 0),
        (f"validated {second} (seed 4)", 1),
    ]
