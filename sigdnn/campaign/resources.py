"""What a local GPU campaign needs, checked before the cluster starts and before any case runs.

Ray takes ``--gpus N`` on faith (a local cluster started with more GPUs than the machine has offers them
all), and a machine with GPUs but no CUDA driver or GPU packages still lets every case start: each then
ends as an error after its reference run. So the machine is asked first.
"""

from __future__ import annotations

from sigdnn.errors import UsageError

INSTALL = "pip install 'sigdnn[gpu]'"
DSLS = (("cuda.tile", "cuda-tile"), ("cutlass", "nvidia-cutlass-dsl"))


def check_local_gpus(backend: str, gpus: int | None) -> None:
    """For a local cluster: the GPU backend can run here, on at least ``gpus`` GPUs; UsageError saying what to do."""
    if backend != "gpu":
        return
    from sigdnn.runtime import cuda

    reason = cuda.gpu_unavailable_reason()
    if reason is not None:
        raise UsageError(
            f"the spec's backend is gpu, but this machine cannot run it: {reason}; install the GPU packages on a "
            f"machine with an NVIDIA GPU ({INSTALL}), join a cluster with GPUs (--ray ADDRESS), "
            'or validate the CPU builders (backend = "reference")'
        )
    if all(cuda.dsl_unavailable_reason(module, package) is not None for module, package in DSLS):
        packages = " or ".join(package for _, package in DSLS)
        raise UsageError(f"the spec's backend is gpu, but no GPU builder can run here ({packages} missing): {INSTALL}")
    count = cuda.visible_gpu_count()
    if gpus is not None and gpus > count:
        raise UsageError(f"--gpus {gpus}, but this machine has {count} GPU(s): give --gpus {count} or fewer")
