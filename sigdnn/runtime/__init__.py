"""The runtime layer under the builders: devices, streams, device memory, device arrays.

``sigdnn.runtime.cuda`` holds the GPU side (GpuContext, CudaGraph); it
imports cuda-python only when first used. ``sigdnn.runtime.device_array`` is
the typed view of device memory every GPU builder passes around.
"""

from sigdnn.runtime.device import CPU, Device, ExecutionContext

__all__ = ["CPU", "Device", "ExecutionContext"]
