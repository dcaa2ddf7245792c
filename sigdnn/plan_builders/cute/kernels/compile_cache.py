"""Compiled CuTe specializations kept in this process and on disk, one cache per kernel family.

Every family (GEMM, conv, SDPA forward and backward) looks a specialization
up the same way: in this process, then as an exported object file under
``cache_dir()`` (``SIGDNN_CUTE_CACHE``; "0" turns the disk off), else
compiles it and stores it for the next process. Unlike its siblings this
module does not import ``cutlass`` at the top: the DSL is imported only to
load a stored object.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any


def cache_dir() -> Path | None:
    """Where compiled specializations are kept between processes (None: disk cache off)."""
    raw = os.environ.get("SIGDNN_CUTE_CACHE", "")
    if raw == "0":
        return None
    return Path(raw) if raw else Path.home() / ".cache" / "sigdnn" / "cute"


def _load(path: Path, name: str) -> Any:
    from cutlass.base_dsl.export import ExternalBinaryModule

    return getattr(ExternalBinaryModule(str(path)), name)


def _store(fn: Any, root: Path, name: str) -> None:
    """Export next to a temporary name, then rename: readers never see half a file."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = f"{name}.{os.getpid()}.{threading.get_ident()}"
        fn.export_to_c(str(root), tmp, name)
        os.replace(root / f"{tmp}.o", root / f"{name}.o")
        (root / f"{tmp}.h").unlink(missing_ok=True)
    except OSError:
        pass  # an unwritable cache only costs the next process a compile


class CompileCache:
    """One kernel family's compiled functions; ``stats`` says how each arrived in this process."""

    def __init__(self, stats: dict[str, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._compiled: dict[Hashable, Any] = {}
        self.stats = {"compiled": 0, "loaded": 0} if stats is None else stats

    def get(self, key: Hashable, name: str | None, compile_fn: Callable[[], Any]) -> Any:
        """The function ``name`` (unique per specialization, sources included) for ``key``; a ``name`` of None
        keeps it in this process only (the small conv helper kernels, compiled in about a second)."""
        with self._lock:
            fn = self._compiled.get(key)
            if fn is not None:
                return fn
            root = cache_dir() if name is not None else None
            path = root / f"{name}.o" if root else None
            if path is not None and path.exists():
                try:
                    fn = _load(path, name)
                    self.stats["loaded"] += 1
                except Exception:  # a stale or truncated file: compile again and overwrite it
                    fn = None
            if fn is None:
                fn = compile_fn()
                self.stats["compiled"] += 1
                if root is not None:
                    _store(fn, root, name)
            self._compiled[key] = fn
            return fn
