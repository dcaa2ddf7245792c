"""The runtime layer under the builders: devices, streams, device memory, device arrays.

``sigdnn.runtime.cuda`` holds the GPU side (DeviceArray, GpuContext); it
imports cuda-python only when first used.
"""

from sigdnn.runtime.device import CPU, Device, ExecutionContext

__all__ = ["CPU", "Device", "ExecutionContext"]
