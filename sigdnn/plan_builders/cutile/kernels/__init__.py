"""The cuTile backend: generated kernel modules compiled by cuTile and launched with ``ct.launch``.

This package imports ``cuda.tile``, so it is only imported lazily (at build
time, through ``backend.backend_for``), never at ``import sigdnn``.

Each spec's text (``backend.source_of``: a pointwise or a matmul kernel) is written once to a file
named by its hash in the kernel cache directory and imported from there
(cuTile reads a kernel's source through ``inspect``, so it must live in a
file). cuTile compiles a kernel on its first launch per specialization and
keeps the cubin in its own disk cache (``CUDA_TILE_CACHE_DIR``, by default
~/.cache/cutile-python), keyed by the kernel's bytecode: a second process
finds both the source and the cubin and starts warm.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import cuda.tile as ct
import numpy as np

from sigdnn.plan_builders.cutile.backend import cache_key, source_of
from sigdnn.runtime.device_array import DeviceArray


def cache_dir() -> Path:
    """SIGDNN_CACHE_DIR/cutile, else ~/.cache/sigdnn/cutile; a private temp folder when neither is writable."""
    base = os.environ.get("SIGDNN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "sigdnn")
    for folder in (Path(base) / "cutile", Path(tempfile.gettempdir()) / f"sigdnn-cutile-{os.getuid()}"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    raise OSError("no writable folder for generated cuTile kernels (set SIGDNN_CACHE_DIR)")


def _write_once(path: Path, text: str) -> None:
    """Write ``text`` atomically unless the file already holds it (several processes may race)."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class CutileBackend:
    def __init__(self) -> None:
        self._kernels: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._dir: Path | None = None

    def kernel(self, spec: Any) -> Any:
        with self._lock:
            key = cache_key(spec)
            found = self._kernels.get(key)
            if found is None:
                found = self._kernels[key] = self._load(spec)
            return found

    def _load(self, spec: Any) -> Any:
        if self._dir is None:
            self._dir = cache_dir()
        name, text = source_of(spec)
        path = self._dir / f"{name}.py"
        _write_once(path, "import cuda.tile as ct\n" + text)
        module_spec = importlib.util.spec_from_file_location(f"sigdnn_cutile_{name}", path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module.kernel

    @staticmethod
    def view1d(array: DeviceArray, n: int, as_bytes: bool, offset: int = 0) -> DeviceArray:
        """The 1-D view a kernel reads: ``n`` elements from element ``offset`` (bool / fp8 as uint8)."""
        dtype = np.dtype(np.uint8) if as_bytes else array.dtype
        ptr = array.ptr + offset * dtype.itemsize
        return DeviceArray(ptr, (n,), (1,), dtype, owner=array.owner, device_id=array.device_id)

    @staticmethod
    def view(
        array: DeviceArray, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, offset: int = 0
    ) -> DeviceArray:
        """A strided view (element strides) of ``dtype`` from element ``offset`` of ``array``'s memory."""
        dtype = np.dtype(dtype)
        ptr = array.ptr + offset * dtype.itemsize
        return DeviceArray(ptr, shape, strides, dtype, owner=array.owner, device_id=array.device_id)

    launch = staticmethod(ct.launch)


CUTILE = CutileBackend()
