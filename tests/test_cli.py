"""The sigdnn command (issue 10's CLI items): what each command prints, writes and reads back.

Most cases call ``sigdnn.cli.main`` in this process (a subprocess costs
~0.3 s); a few go through ``python -m sigdnn`` to check the real entry point,
the closed pipe and what ``import sigdnn`` loads. Values are checked against
the Python API on the same inputs, and files bit for bit.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cli_helpers import add_graph, assert_one_line_error, cli, cli_process, typed_graph

import sigdnn
from sigdnn.cli import build_parser, default_max_bytes
from sigdnn.io import read_tensor_file, write_tensor_file
from sigdnn.validation import random_inputs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def api_run(graph_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    executor = sigdnn.Executor()
    return executor.execute(executor.prepare(graph_path.read_bytes()), inputs)


# -- the command itself ------------------------------------------------------------------------------
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--version")
    assert code == 0 and out.strip() == f"sigdnn {sigdnn.__version__}"


def test_entry_point_through_python_dash_m() -> None:
    done = cli_process("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"sigdnn {sigdnn.__version__}" and not done.stderr


def test_bare_sigdnn_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys)
    assert code == 2 and not err
    assert out.startswith("usage: sigdnn") and all(c in out for c in ("run", "inspect", "builders", "validate"))


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "run", "--help")
    assert code == 0 and "--save-inputs" in out and "--random-missing" in out


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_all_parsers(sub))
    return found


def test_every_argument_has_help() -> None:
    parsers = _all_parsers(build_parser())
    assert len(parsers) == 7  # sigdnn and run, inspect, builders, validate, campaign, import
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), parser.prog
            else:
                assert action.help and action.help != argparse.SUPPRESS, (parser.prog, action.dest)


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "g.sdg", "--backend", "cpu")
    assert_one_line_error(code, err, "invalid choice: 'cpu'", "sigdnn run --help")
    code, _, err = cli(capsys, "frobnicate")
    assert_one_line_error(code, err, "invalid choice: 'frobnicate'")


# -- run ---------------------------------------------------------------------------------------------
def test_run_with_inputs_writes_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 3), np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    code, out, err = cli(capsys, "run", graph, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz")
    assert code == 0, err
    with np.load(tmp_path / "out.npz") as written:
        np.testing.assert_array_equal(written["c"], a + b)
    row = next(line for line in out.splitlines() if line.startswith("c "))
    assert row.split() == ["c", "float32", "[2,", "3]", "1", "6", "3.5", "0"]
    assert f"wrote c to '{tmp_path / 'out.npz'}' (npz)" in out


def test_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")
    a = np.array([[1, np.inf, 3], [4, 5, np.nan]], np.float32)
    write_tensor_file(tmp_path / "in.safetensors", {"a": a, "b": np.zeros((1, 3), np.float32)})
    code, out, err = cli(capsys, "run", graph, "--inputs", tmp_path / "in.safetensors", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["graph"] == "small" and summary["nodes"] == 1 and summary["backend"] == "reference"
    assert summary["inputs"] == {"from_files": ["a", "b"], "random": [], "seed": None}
    assert summary["outputs"] == [
        {"name": "c", "dtype": "float32", "shape": [2, 3], "min": 1.0, "max": 5.0, "mean": 13 / 4, "non_finite": 2}
    ]
    assert summary["seconds"]["execute"] >= 0 and summary["peak_intermediate_bytes"] == 0


def test_run_profile_times_every_step_and_lists_the_slowest(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "run", EXAMPLES / "conv_bias_relu.sdg", "--profile", "--json")
    assert code == 0, err
    profile = json.loads(out)["profile"]
    plan = sigdnn.Executor().prepare(EXAMPLES / "conv_bias_relu.sdg")
    assert [p["step"] for p in profile] == [s.name for s in plan.steps]
    assert all(p["seconds"] > 0 for p in profile)
    assert {p["builder"] for p in profile} == {"reference.conv_fprop", "reference.pointwise"}
    code, out, _ = cli(capsys, "run", EXAMPLES / "conv_bias_relu.sdg", "--profile")
    table = out[out.index("slowest of 3 steps") :].splitlines()
    rows = [line.split()[0] for line in table if line.startswith(("conv", "bias", "relu"))]
    assert sorted(rows) == ["bias", "conv", "relu"]


def test_run_reports_time_and_memory_in_human_units(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "run", EXAMPLES / "conv_bias_relu.sdg")
    head = out.splitlines()[0]
    assert code == 0 and "prepared in " in head and "executed in " in head
    assert "peak intermediate memory 1.53 MiB" in head  # 1,605,632 bytes


def test_missing_inputs_are_an_error_that_lists_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")
    write_tensor_file(tmp_path / "a.safetensors", {"a": np.ones((2, 3), np.float32)})
    code, _, err = cli(capsys, "run", graph, "--inputs", tmp_path / "a.safetensors")
    assert_one_line_error(code, err, "lack input(s) 'b'", "--random-missing")
    code, out, err = cli(capsys, "run", graph, "--inputs", tmp_path / "a.safetensors", "--random-missing", "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"] == {"from_files": ["a"], "random": ["b"], "seed": 0}


def test_without_inputs_everything_is_random(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "run", add_graph(tmp_path / "g.sdg"), "--seed", "5")
    assert code == 0 and "random inputs (seed 5): a, b" in out


def test_inputs_from_several_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")
    a, b = np.full((2, 3), 2, np.float32), np.full((1, 3), 3, np.float32)
    np.save(tmp_path / "a.npy", a)
    write_tensor_file(tmp_path / "b.safetensors", {"b": b})
    code, _, err = cli(
        capsys,
        "run",
        graph,
        "--inputs",
        tmp_path / "a.npy",
        "--inputs",
        tmp_path / "b.safetensors",
        "--out",
        tmp_path / "o",
    )
    assert code == 0, err
    assert read_tensor_file(tmp_path / "o")["c"].tolist() == (a + b).tolist()
    code, _, err = cli(
        capsys, "run", graph, "--inputs", tmp_path / "b.safetensors", "--inputs", tmp_path / "b.safetensors"
    )
    assert_one_line_error(code, err, "tensor 'b' is in more than one file")


def test_a_wrong_input_name_gets_a_close_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")
    write_tensor_file(
        tmp_path / "in.safetensors", {"a": np.ones((2, 3), np.float32), "bb": np.ones((1, 3), np.float32)}
    )
    code, _, err = cli(capsys, "run", graph, "--inputs", tmp_path / "in.safetensors")
    assert_one_line_error(code, err, "tensor 'bb': is not an input of this graph; did you mean 'b'?", "'a', 'b'")


def test_out_writes_exactly_the_path_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")
    os.chdir(tmp_path)
    code, out, err = cli(capsys, "run", "g.sdg", "--out", "out_noext")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.sdg", "out_noext"]
    assert "wrote c to 'out_noext' (safetensors)" in out
    assert read_tensor_file(tmp_path / "out_noext")["c"].shape == (2, 3)
    del graph


def test_save_inputs_replays_a_random_run_bit_for_bit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = typed_graph(tmp_path / "g.sdg", "bfloat16")
    saved, first, second = tmp_path / "in.safetensors", tmp_path / "o1.safetensors", tmp_path / "o2.safetensors"
    assert cli(capsys, "run", graph, "--seed", "11", "--save-inputs", saved, "--out", first)[0] == 0
    inputs = read_tensor_file(saved)
    want = random_inputs(sigdnn.deserialize(graph.read_bytes()), seed=11)
    assert set(inputs) == {"x", "w"} and all(same_bits(inputs[k], want[k]) for k in want)
    code, out, err = cli(capsys, "run", graph, "--inputs", saved, "--out", second)
    assert code == 0 and "random inputs" not in out, err
    assert same_bits(read_tensor_file(first)["y"], read_tensor_file(second)["y"])


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_low_precision_outputs_cross_the_cli_bit_for_bit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: str, suffix: str
) -> None:
    """Graph A's outputs, written by `run --out`, are graph B's inputs through `run --inputs`."""
    first = typed_graph(tmp_path / "a.sdg", dtype, inputs=("x", "w"), output="y")
    second = typed_graph(tmp_path / "b.sdg", dtype, inputs=("y", "v"), output="z")
    a_in, a_out, b_in, b_out = (tmp_path / f"{n}{suffix}" for n in ("a_in", "a_out", "b_in", "b_out"))
    assert cli(capsys, "run", first, "--seed", "2", "--save-inputs", a_in, "--out", a_out)[0] == 0
    y = read_tensor_file(a_out)["y"]
    assert y.dtype == sigdnn.DataType(dtype).numpy
    assert same_bits(y, api_run(first, read_tensor_file(a_in))["y"])
    write_tensor_file(b_in, {"v": read_tensor_file(a_in)["w"]})
    code, _, err = cli(capsys, "run", second, "--inputs", a_out, "--inputs", b_in, "--out", b_out)
    assert code == 0, err
    assert same_bits(read_tensor_file(b_out)["z"], api_run(second, {"y": y, "v": read_tensor_file(b_in)["v"]})["z"])


def test_npz_of_ml_dtypes_arrays_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """np.savez stores ml_dtypes arrays as raw |V2; the graph's dtype gives them back their meaning."""
    graph = typed_graph(tmp_path / "g.sdg", "bfloat16")
    inputs = random_inputs(sigdnn.deserialize(graph.read_bytes()), seed=4)
    np.savez(tmp_path / "in.npz", **inputs)
    code, _, err = cli(capsys, "run", graph, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "o.safetensors")
    assert code == 0, err
    assert same_bits(read_tensor_file(tmp_path / "o.safetensors")["y"], api_run(graph, inputs)["y"])
    assert inputs["x"].dtype == ml_dtypes.bfloat16


def test_out_and_save_inputs_must_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")
    code, _, err = cli(capsys, "run", graph, "--out", tmp_path / "x", "--save-inputs", tmp_path / "x")
    assert_one_line_error(code, err, "--out file and --save-inputs file both name")


@pytest.mark.skipif(importlib.util.find_spec("cutlass") is not None, reason="the GPU DSLs are installed here")
def test_backend_gpu_without_the_dsls_says_how_to_install(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", add_graph(tmp_path / "g.sdg"), "--backend", "gpu")
    assert_one_line_error(code, err, "pip install 'sigdnn[gpu]'")


def test_max_bytes_maps_to_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = add_graph(tmp_path / "g.sdg")  # a, b, c: 24 + 12 + 24 bytes
    assert cli(capsys, "run", graph, "--max-bytes", "60")[0] == 0
    code, _, err = cli(capsys, "run", graph, "--max-bytes", "59")
    assert_one_line_error(code, err, "GraphError", "(limit 59)", "raise --max-bytes (now 59 bytes)")
    code, _, err = cli(capsys, "inspect", graph, "--max-bytes", "59")
    assert_one_line_error(code, err, "(limit 59)")


def test_default_max_bytes_is_a_quarter_of_memory() -> None:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert default_max_bytes() == min(sigdnn.Limits().max_total_bytes, memory // 4)


def test_a_graph_declaring_8_gib_is_refused_before_random_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    g = sigdnn.Graph("big", io_dtype="float32")
    g.pointwise("relu_fwd", g.tensor("x", dims=(1 << 31,)), name="r").set_output(True).set_name("y")
    (tmp_path / "big.sdg").write_bytes(g.serialize())
    code, _, err = cli(capsys, "run", tmp_path / "big.sdg", "--max-bytes", "4GiB")
    assert_one_line_error(code, err, "GraphError", "big.sdg", "raise --max-bytes (now 4 GiB)")


# -- inspect, builders, validate ----------------------------------------------------------------------
def test_inspect_shows_order_keys_builders_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "inspect", EXAMPLES / "conv_bias_relu.sdg")
    plan = sigdnn.Executor().prepare((EXAMPLES / "conv_bias_relu.sdg").read_bytes())
    assert code == 0 and out.strip() == plan.describe().strip()


def test_inspect_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "inspect", EXAMPLES / "conv_bias_relu.sdg", "--json")
    data = json.loads(out)
    assert code == 0 and data["graph"] == "conv_bias_relu"
    assert [n for step in data["steps"] for n in step["nodes"]] == ["conv", "bias", "relu"]
    assert {step["builder"] for step in data["steps"]} == {"reference.conv_fprop", "reference.pointwise"}
    assert data["memory"]["peak_intermediate_bytes"] > 0


def test_builders_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "builders", "--json")
    data = json.loads(out)
    by_name = {b["name"]: b for b in data["builders"]}
    assert code == 0 and by_name["reference.matmul"]["available"] and by_name["reference.matmul"]["engine_id"] == 1001
    assert by_name["cutile.pointwise"]["ops"] == ["pointwise"]
    code, out, _ = cli(capsys, "builders")
    rows = {line.split()[1]: line for line in out.splitlines()[2:] if line.strip()}
    assert code == 0 and set(by_name) <= set(rows)
    assert rows["reference.pointwise"].split()[:5] == ["1000", "reference.pointwise", "reference", "cpu", "pointwise"]


def test_tables_align_whatever_the_name_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long = "an_output_with_a_name_far_longer_than_any_column_would_guess_" * 2
    add_graph(tmp_path / "g.sdg", output=long)
    g = sigdnn.Graph("two", io_dtype="float16")
    x = g.tensor("x", dims=(2,))
    g.pointwise("relu_fwd", x, name="r").set_output(True).set_name("s")
    g.pointwise("abs", x, name="q").set_output(True).set_name(long[:40])
    (tmp_path / "two.sdg").write_bytes(g.serialize())
    code, out, _ = cli(capsys, "run", tmp_path / "two.sdg")
    lines = [line for line in out.splitlines() if line.startswith(("output", "s ", long[:40]))]
    assert code == 0 and len(lines) == 3
    assert len({line.index("float16") for line in lines[1:]} | {lines[0].index("dtype")}) == 1


def test_validate_several_graphs_and_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one, two = add_graph(tmp_path / "one.sdg"), typed_graph(tmp_path / "two.sdg", "bfloat16")
    report = tmp_path / "report.json"
    code, out, err = cli(capsys, "validate", one, two, "--backend", "reference", "--seeds", "2", "--report", report)
    assert code == 0, err
    data = json.loads(report.read_text())
    assert data["passed"] and [(r["file"], r["seed"]) for r in data["runs"]] == [
        (str(one), 0),
        (str(one), 1),
        (str(two), 0),
        (str(two), 1),
    ]
    assert all(r["passed"] and r["nodes"] for r in data["runs"])
    assert out.count("graph 'small' against the CPU reference: PASS") == 2 and "summary" in out
    assert out.count("graph 'mul_bfloat16' against the CPU reference: PASS") == 2


def test_validate_json_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "validate", add_graph(tmp_path / "g.sdg"), "--backend", "reference", "--json")
    assert code == 0 and json.loads(out)["runs"][0]["graph"] == "small"


def test_errors_name_the_graph_file_and_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.sdg"
    bad.write_bytes(b"\x00" * 64)
    for command in ("run", "inspect"):
        code, _, err = cli(capsys, command, bad)
        assert_one_line_error(code, err, "SchemaError", str(bad), "not a sigdnn graph", "give a .sdg graph")
    code, _, err = cli(capsys, "validate", bad, "--backend", "reference")
    assert_one_line_error(code, err, "SchemaError", str(bad))


def test_missing_graph_file_is_worded_the_same_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    errors = {
        cli(capsys, c, tmp_path / "nope.sdg", "--backend", "reference")[2] for c in ("run", "inspect", "validate")
    }
    assert len(errors) == 1
    assert_one_line_error(
        2, errors.pop(), f"cannot read graph file '{tmp_path / 'nope.sdg'}': No such file or directory"
    )


# -- display -------------------------------------------------------------------------------------------
def test_progress_is_shown_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that takes a while shows what it is doing, with the time elapsed."""
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich treats the streams as terminals
    execute = sigdnn.Executor.execute

    def slow(self: sigdnn.Executor, *args: object, **kw: object) -> object:
        time.sleep(0.5)
        return execute(self, *args, **kw)

    monkeypatch.setattr(sigdnn.Executor, "execute", slow)
    code, _, err = cli(capsys, "run", add_graph(tmp_path / "g.sdg"))
    assert code == 0 and "executing 1 step(s) on reference" in err and "0:00:00" in err


def test_nothing_but_results_when_piped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "run", add_graph(tmp_path / "g.sdg"), "--json")
    assert code == 0 and err == "" and json.loads(out)


def test_closed_pipe_is_a_clean_exit(tmp_path: Path) -> None:
    """`sigdnn inspect g | head -0`: the reader is gone before sigdnn writes."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "sigdnn", "inspect", str(EXAMPLES / "long_chain.sdg")],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0 and done.stderr == ""


def test_import_sigdnn_loads_neither_rich_nor_safetensors() -> None:
    code = "import sys, sigdnn; print(sorted(m for m in ('rich', 'safetensors', 'torch') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_validate_names_its_truth_and_a_gpu_truth_without_a_gpu_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = add_graph(tmp_path / "one.sdg")
    code, out, err = cli(capsys, "validate", one, "--backend", "reference", "--json")
    assert code == 0, err
    assert json.loads(out)["runs"][0]["truth"] == "cpu"  # no GPU here: the default truth is the CPU reference
    code, out, err = cli(capsys, "validate", one, "--backend", "reference", "--truth", "cpu")
    assert code == 0 and "against the CPU reference: PASS" in out
    code, out, err = cli(capsys, "validate", one, "--backend", "reference", "--truth", "gpu")
    assert code == 2 and "the gpu-reference backend cannot run here" in err
    code, out, err = cli(capsys, "validate", one, "--truth", "tpu")
    assert code == 2 and "invalid choice: 'tpu'" in err
