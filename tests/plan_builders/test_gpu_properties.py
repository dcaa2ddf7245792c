"""The device facts the GPU builders plan with, decided without a GPU: the CUDA driver is replaced by a fake
that answers like one (and fails like one), so the reading, the caching and the Hopper check run here."""

from __future__ import annotations

import sys
import types

import pytest

from sigdnn.errors import NotSupported
from sigdnn.graph.node import Node
from sigdnn.plan_builders import gpu_properties
from sigdnn.runtime.device import Device

OK, BAD = 0, 999


def fake_driver(attributes: dict[int, dict[str, int]], get_status: int = OK, attr_status: int = OK):
    """A cuda.bindings.driver stand-in: ordinal -> {attribute name: value}."""
    names = ("COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR", "MULTIPROCESSOR_COUNT")
    attribute = types.SimpleNamespace(**{f"CU_DEVICE_ATTRIBUTE_{n}": types.SimpleNamespace(name=n) for n in names})
    asked: list[tuple[str, int]] = []

    def get(ordinal: int):
        return get_status, ordinal

    def attr(a, dev):
        asked.append((a.name, dev))
        return attr_status, attributes[dev][a.name]

    driver = types.SimpleNamespace(
        CUdevice_attribute=attribute,
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=OK),
        cuDeviceGet=get,
        cuDeviceGetAttribute=attr,
    )
    return driver, asked


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch):
    def install(attributes: dict[int, dict[str, int]], **status: int):
        fake, asked = fake_driver(attributes, **status)
        bindings = types.ModuleType("cuda.bindings")
        bindings.driver = fake
        monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
        monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake)
        gpu_properties.device_properties.cache_clear()
        return asked

    yield install
    gpu_properties.device_properties.cache_clear()


H200 = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 132}
A100 = {"COMPUTE_CAPABILITY_MAJOR": 8, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 108}


def gpu(device_id: int | None) -> Device:
    return Device("gpu", types.SimpleNamespace(device_id=device_id))


def test_device_properties_reads_capability_and_sm_count_of_the_ordinal_once(driver) -> None:
    asked = driver({0: A100, 1: H200})
    assert gpu_properties.device_properties(1) == ((9, 0), 132)
    assert gpu_properties.device_properties(0) == ((8, 0), 108)
    assert gpu_properties.device_properties(1) == ((9, 0), 132)  # cached: the driver is not asked again
    names = ["COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR", "MULTIPROCESSOR_COUNT"]
    assert asked == [(n, 1) for n in names] + [(n, 0) for n in names]


@pytest.mark.parametrize(
    ("status", "message"), [({"get_status": BAD}, "cuDeviceGet"), ({"attr_status": BAD}, "COMPUTE")]
)
def test_a_driver_failure_is_an_error_naming_the_call(driver, status: dict[str, int], message: str) -> None:
    driver({0: H200}, **status)
    with pytest.raises(RuntimeError, match=message):
        gpu_properties.device_properties(0)


def test_device_id_of_reads_the_context_and_defaults_to_zero() -> None:
    assert gpu_properties.device_id_of(gpu(3)) == 3
    assert gpu_properties.device_id_of(gpu(None)) == 0
    assert gpu_properties.device_id_of(Device("gpu")) == 0
    assert gpu_properties.device_id_of(None) == 0


def test_planning_sm_count_is_the_gpus_or_an_h200s_without_one(driver) -> None:
    driver({0: H200, 2: A100})
    assert gpu_properties.planning_sm_count(gpu(2)) == 108
    assert gpu_properties.planning_sm_count(Device("cpu")) == 132
    assert gpu_properties.planning_sm_count(None) == 132


def test_require_hopper_declines_another_gpu_by_name_and_ignores_the_cpu(driver) -> None:
    driver({0: H200, 1: A100})
    node = Node("mm", None, None)  # only the name is read
    gpu_properties.require_hopper(node, gpu(0))
    gpu_properties.require_hopper(node, Device("cpu"))
    gpu_properties.require_hopper(node, None)
    with pytest.raises(NotSupported, match=r"node 'mm': needs sm_90 \(Hopper\), the device is sm_80"):
        gpu_properties.require_hopper(node, gpu(1))
