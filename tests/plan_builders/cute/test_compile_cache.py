"""The CuTe compile cache's lookup order, without the DSL: this process, then disk, else compile and store."""

from __future__ import annotations

import pytest

from sigdnn.plan_builders.cute.kernels import compile_cache
from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache


class Compiled:
    """Stands in for a compiled function: export_to_c writes the object file the DSL would."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def export_to_c(self, root: str, file_name: str, function_name: str) -> None:
        from pathlib import Path

        Path(root, f"{file_name}.o").write_text(f"{function_name}:{self.tag}")
        Path(root, f"{file_name}.h").write_text("header")


@pytest.fixture
def disk(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", str(tmp_path))
    loads = []

    def load(path, name):
        loads.append(name)
        text = path.read_text()
        if not text.startswith(f"{name}:"):
            raise RuntimeError("stale object")
        return Compiled("loaded " + text.split(":", 1)[1])

    monkeypatch.setattr(compile_cache, "_load", load)
    return tmp_path, loads


def test_compiles_once_stores_and_serves_from_memory(disk):
    root, loads = disk
    cache = CompileCache()
    compiles = []
    make = lambda: compiles.append(1) or Compiled("fresh")  # noqa: E731
    first = cache.get(("k", 1), "gemm_abc", make)
    assert cache.get(("k", 1), "gemm_abc", make) is first
    assert first.tag == "fresh" and len(compiles) == 1 and loads == []
    assert cache.stats == {"compiled": 1, "loaded": 0}
    assert sorted(p.name for p in root.iterdir()) == ["gemm_abc.o"]  # the header and temporaries are gone


def test_a_second_process_loads_from_disk(disk):
    _, loads = disk
    CompileCache().get("k", "gemm_abc", lambda: Compiled("fresh"))
    later = CompileCache()
    fn = later.get("k", "gemm_abc", lambda: pytest.fail("compiled again"))
    assert fn.tag == "loaded fresh" and loads == ["gemm_abc"]
    assert later.stats == {"compiled": 0, "loaded": 1}


def test_a_stale_object_is_compiled_again_and_overwritten(disk):
    root, _ = disk
    (root / "gemm_abc.o").write_text("something else")
    cache = CompileCache()
    assert cache.get("k", "gemm_abc", lambda: Compiled("fresh")).tag == "fresh"
    assert cache.stats == {"compiled": 1, "loaded": 0}
    assert (root / "gemm_abc.o").read_text() == "gemm_abc:fresh"


def test_zero_turns_the_disk_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", "0")
    monkeypatch.chdir(tmp_path)
    assert compile_cache.cache_dir() is None
    cache = CompileCache()
    cache.get("k", "gemm_abc", lambda: Compiled("fresh"))
    assert list(tmp_path.iterdir()) == [] and cache.stats["compiled"] == 1


def test_default_directory_is_under_the_user_cache(monkeypatch):
    monkeypatch.delenv("SIGDNN_CUTE_CACHE", raising=False)
    assert compile_cache.cache_dir().parts[-3:] == (".cache", "sigdnn", "cute")


def test_families_may_share_one_count(disk):
    shared = {"compiled": 0, "loaded": 0}
    CompileCache(stats=shared).get("a", "gemm_a", lambda: Compiled("a"))
    CompileCache(stats=shared).get("b", "conv_b", lambda: Compiled("b"))
    assert shared == {"compiled": 2, "loaded": 0}


def test_an_unwritable_directory_only_costs_a_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", str(blocker / "cache"))
    assert CompileCache().get("k", "gemm_abc", lambda: Compiled("fresh")).tag == "fresh"


def test_the_cache_directory_is_made_with_its_parents(tmp_path, monkeypatch):
    root = tmp_path / "a" / "b"
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", str(root))
    CompileCache().get("k", "gemm_abc", lambda: Compiled("fresh"))
    assert (root / "gemm_abc.o").read_text() == "gemm_abc:fresh"


def test_load_asks_the_dsl_for_the_named_function(tmp_path, monkeypatch):
    """``_load`` goes through the DSL's ExternalBinaryModule (a stand-in module here: no DSL on CI)."""
    import sys
    import types

    opened = []

    class ExternalBinaryModule:
        def __init__(self, path: str) -> None:
            opened.append(path)

        def __getattr__(self, name: str):
            return f"function {name}"

    export = types.ModuleType("cutlass.base_dsl.export")
    export.ExternalBinaryModule = ExternalBinaryModule
    monkeypatch.setitem(sys.modules, "cutlass", types.ModuleType("cutlass"))
    monkeypatch.setitem(sys.modules, "cutlass.base_dsl", types.ModuleType("cutlass.base_dsl"))
    monkeypatch.setitem(sys.modules, "cutlass.base_dsl.export", export)
    assert compile_cache._load(tmp_path / "gemm_x.o", "gemm_x") == "function gemm_x"
    assert opened == [str(tmp_path / "gemm_x.o")]


def test_a_nameless_function_stays_in_this_process(disk):
    root, loads = disk
    cache = CompileCache()
    compiles = []
    make = lambda: compiles.append(1) or Compiled("fresh")  # noqa: E731
    first = cache.get("bfloat16", None, make)
    assert cache.get("bfloat16", None, make) is first and len(compiles) == 1
    assert list(root.iterdir()) == [] and loads == [] and cache.stats == {"compiled": 1, "loaded": 0}
