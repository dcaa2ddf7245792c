"""A local GPU campaign asks the machine first (#32): no GPU, no GPU builders or more --gpus than GPUs is a one-line
error before Ray starts and before any case runs (Ray itself would offer --gpus N whatever the machine has)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sigdnn.campaign.resources import check_local_gpus
from sigdnn.cli import main
from sigdnn.errors import UsageError
from sigdnn.runtime import cuda


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """A stand-in machine: set ``gpus`` (0: no usable GPU) and ``dsl`` (whether a GPU DSL imports)."""
    state: dict = {"gpus": 1, "dsl": {"cuda.tile", "cutlass"}}
    monkeypatch.setattr(cuda, "gpu_unavailable_reason", lambda: None if state["gpus"] else "no CUDA device is visible")
    monkeypatch.setattr(cuda, "visible_gpu_count", lambda: state["gpus"])
    monkeypatch.setattr(
        cuda, "dsl_unavailable_reason", lambda module, package: None if module in state["dsl"] else "missing"
    )
    return state


def test_the_reference_backend_needs_no_gpu(machine) -> None:
    machine["gpus"] = 0
    check_local_gpus("reference", 8)


def test_no_gpu_says_what_to_do(machine) -> None:
    machine["gpus"] = 0
    with pytest.raises(UsageError, match="backend is gpu, but this machine cannot run it: no CUDA device is visible"):
        check_local_gpus("gpu", None)


def test_no_gpu_builders_says_what_to_install(machine) -> None:
    machine["dsl"] = set()
    with pytest.raises(UsageError, match=r"cuda-tile or nvidia-cutlass-dsl missing\): pip install 'sigdnn\[gpu\]'"):
        check_local_gpus("gpu", 1)


@pytest.mark.parametrize("present", ["cuda.tile", "cutlass"])
def test_one_gpu_dsl_is_enough(machine, present: str) -> None:
    machine["dsl"] = {present}
    check_local_gpus("gpu", 1)


@pytest.mark.parametrize(("asked", "present", "ok"), [(None, 1, True), (2, 2, True), (1, 2, True), (3, 2, False)])
def test_gpus_at_most_the_machine_s(machine, asked, present, ok) -> None:
    machine["gpus"] = present
    if ok:
        check_local_gpus("gpu", asked)
    else:
        with pytest.raises(UsageError, match=rf"--gpus {asked}, but this machine has {present} GPU\(s\)"):
            check_local_gpus("gpu", asked)


def test_the_command_refuses_before_ray_starts_or_a_case_runs(
    machine, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray")

    def never(*args: object, **kw: object) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", never)
    spec = tmp_path / "s.toml"
    spec.write_text('backend = "gpu"\n[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4]]\n')
    assert main(["campaign", str(spec), "--gpus", "4"]) == 2
    err = capsys.readouterr().err
    assert "--gpus 4, but this machine has 1 GPU(s)" in err and err.count("\n") == 1
    assert not (tmp_path / "campaign-results" / "s" / "results.jsonl").exists()
