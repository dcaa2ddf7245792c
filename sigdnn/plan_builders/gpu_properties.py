"""What the GPU builders (cuTile and CuTe alike) ask of the device: compute capability, SM count, ordinal.

Read through the CUDA driver on first use (cached per device), so importing
this module needs no GPU; tests answer for a device by replacing
``device_properties``.
"""

from __future__ import annotations

import functools

from sigdnn.errors import NotSupported
from sigdnn.graph.node import Node
from sigdnn.runtime.device import Device


@functools.cache
def device_properties(device_id: int) -> tuple[tuple[int, int], int]:
    """(compute capability, SM count) of a CUDA device, read through the driver."""
    from cuda.bindings import driver

    attr = driver.CUdevice_attribute
    err, dev = driver.cuDeviceGet(device_id)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuDeviceGet({device_id}) failed: {err!r}")
    values = []
    for a in (
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    ):
        err, v = driver.cuDeviceGetAttribute(a, dev)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuDeviceGetAttribute({a.name}) failed: {err!r}")
        values.append(int(v))
    return (values[0], values[1]), values[2]


def require_hopper(node: Node, device: Device | None) -> None:
    """NotSupported unless ``device`` (when a GPU is given) is sm_90: the kernels use Hopper's TMA and wgmma."""
    if device is not None and device.kind == "gpu":
        capability, _ = device_properties(device_id_of(device))
        if capability != (9, 0):
            raise NotSupported(
                f"node '{node.name}': needs sm_90 (Hopper), the device is sm_{capability[0]}{capability[1]}"
            )


def device_id_of(device: Device | None) -> int:
    """The CUDA device ordinal a sigdnn Device runs on (0 when it does not say)."""
    context = getattr(device, "context", None)
    return int(getattr(context, "device_id", 0) or 0)


def planning_sm_count(device: Device | None) -> int:
    """The SM count configurations are chosen for: the GPU's, or an H200's when listing them without one."""
    if device is not None and device.kind == "gpu":
        return device_properties(device_id_of(device))[1]
    return 132
