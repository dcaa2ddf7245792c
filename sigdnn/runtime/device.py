"""Device and ExecutionContext: where plans run and what each run hands them.

The layer under the builders: the executor and every GPU builder import it;
it imports nothing above itself, and nothing GPU-related at import time.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Device:
    """Where plans run: ``kind`` is "cpu" or "gpu"; ``context`` the GPU context (a runtime.cuda.GpuContext)."""

    kind: str = "cpu"
    context: Any = None


CPU = Device("cpu")


@attrs.frozen
class ExecutionContext:
    """What one run hands every step: the stream to enqueue on and the shared workspace.

    ``stream`` is None on the CPU and a raw CUstream handle (int) on the GPU.
    ``workspace`` is one buffer of the plan's largest ``workspace_bytes``
    (a NumPy uint8 array on the CPU, a DeviceArray of bytes on the GPU);
    a step may use its first ``workspace_bytes`` freely while it runs.
    """

    device: Device = CPU
    stream: Any = None
    workspace: Any = None
