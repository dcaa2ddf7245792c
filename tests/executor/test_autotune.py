"""Measured builder choice on the CPU: fake plugin builders, an injected deterministic timer, a real cache file.

The tuner must time every candidate builder and configuration, never pick
one that fails the reference check however fast, remember the pick on disk
so that another process (a subprocess here) starts with it without timing,
and measure again when a library version or the device changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import autotune_plugins as plugins
import numpy as np
import pytest

import sigdnn
from sigdnn.executor.autotune import Candidate, Choice, Trial, Tuner, TuningCache, library_versions
from sigdnn.executor.host import HostMemory
from sigdnn.validation import random_inputs

HERE = Path(__file__).parent


def tuner(tmp_path, **kw) -> Tuner:
    kw.setdefault("timer", plugins.timer)
    return Tuner(cache=TuningCache(tmp_path / "autotune.json"), device_name=lambda d: "test-cpu", **kw)


def executor(t: Tuner, **kw) -> sigdnn.Executor:
    return sigdnn.Executor("reference", registry=plugins.registry(), autotune=t, **kw)


def test_picks_the_fastest_configuration_that_validates(tmp_path):
    plugins.BINDS.clear()
    t = tuner(tmp_path)
    ex = executor(t)
    plan = ex.prepare(plugins.graph())
    step = plan.steps[0]
    assert (step.builder.name, step.builder.built) == ("plugin.tiles", ["small", "large", "large"])
    assert len(plugins.BINDS) == 2 and step.plan not in plugins.BINDS  # the two timed plans ran through bind
    assert step.choice.startswith("measured: plugin.tiles[large] 2000.0 us, 2.00x faster than plugin.tiles[small]")
    assert "plugin.wrong: failed validation" in step.choice
    assert "chosen by measured: plugin.tiles[large]" in plan.describe()
    assert plan.as_dict()["steps"][0]["choice"] == step.choice
    assert t.measured == 1
    data = random_inputs(plugins.graph(), seed=1)
    got = ex.execute(plan, data)["c"]
    np.testing.assert_allclose(got, data["a"].astype(np.float64) @ data["b"], rtol=1e-6)
    record = json.loads((tmp_path / "autotune.json").read_text())
    (entry,) = record.values()
    assert (entry["label"], entry["graph"], entry["nodes"]) == ("plugin.tiles[large]", "mm", ["mm"])
    assert {tuple(x[:2]) for x in entry["trials"]} >= {("reference.matmul", 9e-3), ("plugin.slow", 5e-3)}


def test_the_same_shape_is_measured_once_and_another_shape_again(tmp_path):
    t = tuner(tmp_path)
    executor(t).prepare(plugins.graph())
    executor(t).prepare(plugins.graph())  # a fresh executor: the cache answers
    assert t.measured == 1
    plan = executor(t).prepare(plugins.graph(m=40))  # new dims: a new identity
    assert t.measured == 2
    assert plan.steps[0].choice.startswith("measured:")


def test_without_autotune_a_cached_choice_is_used_and_else_the_heuristic(tmp_path):
    cold = executor(tuner(tmp_path, measure=False)).prepare(plugins.graph())
    assert cold.steps[0].builder.name == "reference.matmul"  # priority 0 everywhere: the lowest engine id
    assert cold.steps[0].choice == "heuristic: reference.matmul"
    executor(tuner(tmp_path)).prepare(plugins.graph())
    warm = executor(tuner(tmp_path, measure=False, timer=plugins.refuse_to_time)).prepare(plugins.graph())
    assert warm.steps[0].builder.name == "plugin.tiles" and warm.steps[0].builder.built[-1] == "large"
    assert warm.steps[0].choice.startswith("cached: plugin.tiles[large] 2000.0 us")


def test_a_new_library_version_or_device_measures_again(tmp_path):
    executor(tuner(tmp_path)).prepare(plugins.graph())
    bumped = tuner(tmp_path, versions=lambda builders: {**library_versions(builders), "plugin": "2.0"})
    executor(bumped).prepare(plugins.graph())
    assert bumped.measured == 1
    elsewhere = Tuner(cache=TuningCache(tmp_path / "autotune.json"), timer=plugins.timer, device_name=lambda d: "H200")
    executor(elsewhere).prepare(plugins.graph())
    assert elsewhere.measured == 1
    assert len(json.loads((tmp_path / "autotune.json").read_text())) == 3


def test_when_every_candidate_fails_the_heuristic_order_stays(tmp_path):
    t = tuner(tmp_path, check=lambda graph, nodes, writes, inputs: lambda outputs: "planted failure")
    plan = executor(t).prepare(plugins.graph())
    assert plan.steps[0].builder.name == "reference.matmul"
    assert plan.steps[0].choice.startswith("heuristic: reference.matmul; not chosen: reference.matmul: failed")
    assert plan.steps[0].choice.count("failed validation: planted failure") == 5  # every candidate was tried
    assert not (tmp_path / "autotune.json").exists()


def test_pinned_builder_tunes_only_its_own_configurations(tmp_path):
    t = tuner(tmp_path)
    plan = executor(t, pins={"mm": "plugin.slow"}).prepare(plugins.graph())
    assert plan.steps[0].builder.name == "plugin.slow" and plan.steps[0].choice is None
    plan = executor(t, pins={"mm": "plugin.tiles"}).prepare(plugins.graph())
    assert plan.steps[0].choice.startswith("measured: plugin.tiles[large]")
    assert plan.steps[0].choice.count("faster than plugin.tiles[small]") == 1


def test_a_second_process_starts_with_the_choice_and_times_nothing(tmp_path):
    env = {
        **os.environ,
        "SIGDNN_CACHE_DIR": str(tmp_path),
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    script = textwrap.dedent(
        """
        import sys, sigdnn, autotune_plugins as plugins
        from sigdnn.executor.autotune import Tuner
        timer = plugins.timer if sys.argv[1] == "measure" else plugins.refuse_to_time
        t = Tuner(timer=timer, measure=sys.argv[1] == "measure")
        plan = sigdnn.Executor("reference", registry=plugins.registry(), autotune=t).prepare(plugins.graph())
        print(plan.steps[0].builder.name, plan.steps[0].builder.built[-1], t.measured, plan.steps[0].choice)
        """
    )
    runs = [subprocess.run([sys.executable, "-c", script, mode], env=env, capture_output=True, text=True, check=False)
            for mode in ("measure", "reuse")]  # fmt: skip
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    first, second = (r.stdout.split(" ", 3) for r in runs)
    assert first[:3] == ["plugin.tiles", "large", "1"] and first[3].startswith("measured:")
    assert second[:3] == ["plugin.tiles", "large", "0"] and second[3].startswith("cached:")
    assert (tmp_path / "autotune.json").exists()


def test_cache_survives_a_damaged_file_and_merges_writers(tmp_path):
    path = tmp_path / "autotune.json"
    path.write_text("{not json")
    one, two = TuningCache(path), TuningCache(path)
    assert one.get("x") is None
    one.put("x", {"label": "a"})
    two.put("y", {"label": "b"})  # two had not seen x: it merges with the file, not its own memory
    assert json.loads(path.read_text()) == {"x": {"label": "a"}, "y": {"label": "b"}}
    path.write_text("[1, 2]")
    assert TuningCache(path).get("x") is None
    blocked = TuningCache(tmp_path / "file" / "autotune.json")
    (tmp_path / "file").write_text("a file where a folder should be")
    blocked.put("z", {"label": "c"})  # cannot be written: remembered in memory only
    assert blocked.get("z") == {"label": "c"}


def test_choice_summary_reads_well():
    trials = (Trial("fast", 1e-6), Trial("slow", 3e-6), Trial("bad", None, "failed validation: off"))
    assert Choice("fast", "measured", trials).summary() == (
        "measured: fast 1.0 us, 3.00x faster than slow (3.0 us); not chosen: bad: failed validation: off"
    )
    assert Choice("slow", "cached", trials[1:2]).summary() == "cached: slow 3.0 us"
    assert Choice("x", "heuristic").summary() == "heuristic: x"
    assert Choice("zero", "measured", (Trial("half", 0.5), Trial("zero", 0.0))).summary() == (
        "measured: zero 0.0 us, infx faster than half (500000.0 us)"
    )
    assert Candidate(plugins.Slow(), "c1").label == "plugin.slow[c1]"


def test_cache_path_follows_the_environment(monkeypatch, tmp_path):
    from sigdnn.executor.autotune import cache_path

    monkeypatch.setenv("SIGDNN_CACHE_DIR", str(tmp_path))
    assert cache_path() == tmp_path / "autotune.json"
    monkeypatch.delenv("SIGDNN_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path() == tmp_path / "home" / ".cache" / "sigdnn" / "autotune.json"


def test_wall_timer_warms_up_then_takes_the_median_of_batches(monkeypatch):
    from sigdnn.executor import autotune

    clock = {"now": 0.0, "runs": 0, "syncs": 0}
    costs = iter([2e-3, 1e-3] + [1e-3] * 10 + [5e-3] * 10 + [1e-3] * 10 + [3e-3] * 10 + [1e-3] * 10)

    def run():
        clock["runs"] += 1
        clock["now"] += next(costs)

    def synchronize():
        clock["syncs"] += 1

    monkeypatch.setattr(autotune.time, "perf_counter", lambda: clock["now"])
    seconds = autotune.wall_timer("x", run, synchronize)
    # one warm-up run, one timed run (1 ms: 10 per batch for 10 ms), five batches of 10: median of 1, 5, 1, 3, 1 ms
    assert (clock["runs"], clock["syncs"]) == (52, 7)
    assert seconds == pytest.approx(1e-3)


def test_wall_timer_bounds_its_batches(monkeypatch):
    from sigdnn.executor import autotune

    for once, per_batch in ((1.0, 1), (1e-6, 50)):
        clock = {"now": 0.0, "runs": 0}

        def run(once=once, clock=clock):
            clock["runs"] += 1
            clock["now"] += once

        monkeypatch.setattr(autotune.time, "perf_counter", lambda clock=clock: clock["now"])
        assert autotune.wall_timer("x", run, lambda: None) == pytest.approx(once)
        assert clock["runs"] == 2 + 5 * per_batch


def test_device_name_asks_the_driver_for_a_gpu(monkeypatch):
    import types

    from sigdnn.executor.autotune import device_name
    from sigdnn.runtime.device import Device

    driver = types.SimpleNamespace(
        cuDeviceGet=lambda ordinal: (0, f"dev{ordinal}"),
        cuDeviceGetName=lambda size, dev: (0, f"NVIDIA H200 {dev} {size}".encode() + b"\0\0junk"),
    )
    monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
    monkeypatch.setitem(sys.modules, "cuda.bindings", types.SimpleNamespace(driver=driver))
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    gpu = Device("gpu", types.SimpleNamespace(device_id=3))
    assert device_name(gpu) == "NVIDIA H200 dev3 64"
    assert device_name(Device("gpu", None)) == "NVIDIA H200 dev0 64"
    assert device_name(Device("cpu", None)).startswith("cpu:")


def test_identity_covers_every_tensor_the_device_and_the_versions(tmp_path):
    from sigdnn.executor.autotune import node_shape
    from sigdnn.runtime.device import CPU
    from sigdnn.signature_keys import key_for

    def identity(g, **kw):
        t = Tuner(cache=TuningCache(tmp_path / "a.json"), device_name=kw.get("name", lambda d: "x"),
                  versions=kw.get("versions", lambda b: {"v": "1"}))  # fmt: skip
        node = g.nodes[0]
        return t.identity(g, node_shape(node, key_for(node, g)), CPU, [])

    base = identity(plugins.graph())
    assert base == identity(plugins.graph())
    assert base != identity(plugins.graph(m=25))
    assert base != identity(plugins.graph(), name=lambda d: "y")
    assert base != identity(plugins.graph(), versions=lambda b: {"v": "2"})
    strided = plugins.graph()
    strided.tensor_by_name("c").set_stride((1, 24))
    assert base != identity(strided)
    other = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    other.matmul(other.tensor("a", (24, 16)), other.tensor("b", (16, 8)).set_data_type("float16"),
                 name="mm").set_output(True).set_name("c")  # fmt: skip
    assert base != identity(other)


def test_regions_claimed_by_several_fusion_builders_are_measured(tmp_path):
    t = tuner(tmp_path)
    ex = sigdnn.Executor(
        "reference", registry=plugins.registry(plugins.FuseDeclines, plugins.FuseSlow, plugins.FuseFast), autotune=t
    )
    plan = ex.prepare(plugins.graph(relu=True))
    (step,) = plan.steps
    assert step.region is not None and step.builder.name == "fuse.fast"
    assert step.choice.startswith("measured: fuse.fast 2000.0 us, 1.50x faster than fuse.slow[x] (3000.0 us)")
    assert "fuse.declines: declined: not this region" in step.choice
    data = random_inputs(plugins.graph(relu=True), seed=2)
    got = ex.execute(plan, data)["c"]
    np.testing.assert_allclose(got, np.maximum(data["a"].astype(np.float64) @ data["b"], 0), rtol=1e-6)
    again = sigdnn.Executor("reference", registry=plugins.registry(plugins.FuseSlow, plugins.FuseFast), autotune=t)
    # Without the declining builder the record still names a candidate: it is used, nothing is timed again.
    assert again.prepare(plugins.graph(relu=True)).steps[0].choice.startswith("cached: fuse.fast")
    assert t.measured == 1


def test_a_region_claimed_once_with_one_configuration_is_not_measured(tmp_path):
    t = tuner(tmp_path)
    plan = sigdnn.Executor("reference", registry=plugins.registry(plugins.FuseFast), autotune=t).prepare(
        plugins.graph(relu=True)
    )
    assert plan.steps[0].builder.name == "fuse.fast" and plan.steps[0].choice is None and t.measured == 0


def test_the_chosen_candidate_goes_first_and_the_rest_keep_their_order(tmp_path):
    from sigdnn.executor.autotune import node_shape
    from sigdnn.runtime.device import CPU
    from sigdnn.signature_keys import key_for

    g = plugins.graph()
    node = g.nodes[0]
    builders = plugins.registry().candidates(key_for(node, g), "cpu", node, g)
    from sigdnn.executor.autotune import build_node, candidates_of

    candidates = candidates_of(builders, [node], g, CPU)
    speeds = {"reference.matmul": 5e-3, "plugin.slow": 0.0, "plugin.tiles[small]": 1e-3}
    t = tuner(tmp_path, timer=lambda label, run, sync: speeds.get(label, 9e-3))
    ordered, choice = t.choose(candidates, g, node_shape(node, key_for(node, g)), CPU, HostMemory(),
                               build_node(node, g, key_for(node, g), CPU))  # fmt: skip
    labels = [c.label for c in ordered]
    assert labels == ["plugin.slow", "reference.matmul", "plugin.tiles[small]", "plugin.tiles[large]", "plugin.wrong"]
    assert choice.summary().startswith("measured: plugin.slow 0.0 us, infx faster than plugin.tiles[small]")
    ordered, choice = t.choose(candidates, g, node_shape(node, key_for(node, g)), CPU, HostMemory(), None)
    assert [c.label for c in ordered] == labels and choice.source == "cached"


def test_the_candidates_are_measured_on_seeded_inputs_synchronized_before_judging(tmp_path):
    from sigdnn.accuracy.inputs import random_array
    from sigdnn.executor.host import HostMemory as Host

    events = []

    class Memory(Host):
        def synchronize(self):
            events.append("sync")

        def snapshot(self, array):
            events.append("snapshot")
            return super().snapshot(array)

    seen = {}

    def check(graph, nodes, writes, inputs):
        seen.update(inputs)
        return lambda outputs: None

    t = tuner(tmp_path, check=check, seed=7)
    ex = executor(t)
    ex._memory = Memory()
    ex.prepare(plugins.graph())
    rng = np.random.default_rng(7)
    g = plugins.graph()
    for name in ("a", "b"):
        t_ = g.tensor_by_name(name)
        np.testing.assert_array_equal(seen[name], random_array(rng, t_.dims, g.dtype_of(t_)))
    assert events[:2] == ["sync", "snapshot"]


def test_library_versions_name_each_library_by_its_distribution(monkeypatch):
    from importlib import metadata

    from sigdnn.executor import autotune

    known = {"sigdnn": "0.2.0", "numpy": "1.0", "cuda-tile": "1.7.0", "nvidia-cutlass-dsl": "4.8.1"}

    def version(name):
        if name not in known:
            raise metadata.PackageNotFoundError(name)
        return known[name]

    monkeypatch.setattr(metadata, "version", version)
    autotune._version.cache_clear()
    try:
        builders = [type("B", (), {"library": lib})() for lib in ("cute", "reference", "cutile", "plugin")]
        assert library_versions(builders) == {"cute": "4.8.1", "cutile": "1.7.0", "plugin": "unknown",
                                              "reference": "1.0", "sigdnn": "0.2.0"}  # fmt: skip
    finally:
        autotune._version.cache_clear()


def test_identity_is_the_hash_of_its_documented_fields(tmp_path):
    import hashlib

    from sigdnn.executor.autotune import node_shape
    from sigdnn.runtime.device import CPU
    from sigdnn.signature_keys import key_for

    g = plugins.graph()
    node = g.nodes[0]
    shape = node_shape(node, key_for(node, g))
    t = Tuner(cache=TuningCache(tmp_path / "a.json"), device_name=lambda d: "dev", versions=lambda b: {"x": "1"})
    what = {"device": "dev", "pattern": repr(shape.pattern), "versions": {"x": "1"},
            "tensors": [[[24, 16], [16, 1], "float32"], [[16, 8], [8, 1], "float32"], [[24, 8], [8, 1], "float32"]]}  # fmt: skip
    assert t.identity(g, shape, CPU, []) == hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def test_cache_folders_are_made_on_first_write(tmp_path):
    path = tmp_path / "new" / "folder" / "autotune.json"
    TuningCache(path).put("k", {"label": "a"})
    assert json.loads(path.read_text()) == {"k": {"label": "a"}}
