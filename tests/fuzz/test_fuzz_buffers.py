"""Mutation fuzzing: corrupted graph buffers raise only SigdnnError, quickly, in bounded memory.

Each case mutates one of several valid buffers (the hand-made seed graphs
below, and one graph per op holding its own ``sample`` node, so that a new
op's attribute table is fuzzed without being listed here) by bit flips,
interesting byte / int16 / int32 / int64 values, truncation, extension,
splices, deleted or duplicated chunks (up to three stacked; a quarter of the
cases first change a field of the decoded graph and re-encode it), then runs
it through ``sigdnn.deserialize`` and, when it parses, through
``Executor.prepare`` and ``execute`` with small random inputs of the declared dtypes. A mutated graph
can legitimately declare big tensors, so every case runs under FUZZ_LIMITS:
the limits, checked before allocation, are what keep it bounded.

Cases are reproducible one by one: case ``i`` draws everything from
``random.Random(f"{seed}-{i}")``. Besides byte mutations and IR-level field
changes (extreme dims, overlapping strides, uids, dtypes, attributes), a few
cases point vector entries at a table an earlier entry uses. Each case is
bounded in time (SIGDNN_FUZZ_CASE_SECONDS, default 2) and in how much it
raises the process's peak resident memory (512 MiB). The CI test runs a
10,000-case slice; the ``fuzz``-marked test runs ``SIGDNN_FUZZ_CASES``
(default 1,000,000) from SIGDNN_FUZZ_START (default 10,000, after the slice):

    SIGDNN_FUZZ_CASES=1000000 python -m pytest tests/fuzz -m fuzz -s

The coverage-guided harness (atheris, the ``fuzz`` extra) is
tests/fuzz/coverage_harness.py. Other knob: SIGDNN_FUZZ_SEED (default 0).
"""

from __future__ import annotations

import math
import os
import random
import resource
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sigdnn
import sigdnn.schemas.Graph as fb_graph
from sigdnn import DataType, ExecutionError, Limits, SigdnnError
from sigdnn.accuracy.inputs import constrained_draws
from sigdnn.graph.ops import OP_CLASSES, Op
from sigdnn.graph.wire_reader import Buffer, slots_of

_GRAPH_SLOTS = slots_of(fb_graph)

FUZZ_LIMITS = Limits(max_total_bytes=16 << 20)  # declared bytes; the reference's float64 scratch is <= 8x
CASE_SECONDS = float(os.environ.get("SIGDNN_FUZZ_CASE_SECONDS", "2.0"))
SEED = int(os.environ.get("SIGDNN_FUZZ_SEED", "0"))
CI_CASES = 10_000  # the CI slice of the dedicated run
RSS_GROWTH_LIMIT = 1 << 30  # bytes the fuzz run may add to the process's peak resident memory
CASE_RSS_LIMIT = 512 << 20  # bytes one case may raise the peak resident memory by


# -- valid buffers to mutate ---------------------------------------------------------------


def conv_bias_relu() -> sigdnn.Graph:
    g = sigdnn.Graph("conv_bias_relu", io_dtype="float16", compute_dtype="float32")
    x = g.tensor("x", dims=(1, 4, 5, 5), layout="NHWC")
    w = g.tensor("w", dims=(4, 4, 3, 3), layout="NHWC")
    b = g.tensor("b", dims=(1, 4, 1, 1))
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(1, 1), dilation=(1, 1))
    g.pointwise("relu_fwd", g.pointwise("add", y, b)).set_output(True).set_name("z")
    return g


def mlp() -> sigdnn.Graph:
    g = sigdnn.Graph("mlp", io_dtype="bfloat16", intermediate_dtype="float32", compute_dtype="float32")
    a = g.tensor("a", dims=(2, 3, 4))
    w = g.tensor("w", dims=(4, 5))
    s = g.scalar("alpha", 0.5, dtype="float32")
    h = g.pointwise("mul", g.matmul(a, w), s)
    h = g.pointwise("relu_fwd", h, relu_lower_clip=-0.1, relu_upper_clip=6.0, relu_lower_clip_slope=0.01)
    g.pointwise("gelu_approx_tanh_fwd", h).set_output(True).set_name("out")
    return g


def integer_select() -> sigdnn.Graph:
    g = sigdnn.Graph("ints", io_dtype="int32", intermediate_dtype="int32", compute_dtype="int32")
    a = g.tensor("a", dims=(3, 4))
    b = g.tensor("b", dims=(1, 4))
    q = g.pointwise("div", a, b)
    r = g.pointwise("mod", a, b)
    mask = g.pointwise("cmp_ge", q, r).set_data_type("bool")
    g.pointwise("binary_select", q, r, mask).set_output(True).set_name("sel")
    mask.set_output(True).set_name("mask")
    return g


def grouped_conv1d() -> sigdnn.Graph:
    g = sigdnn.Graph("conv1d", io_dtype="float32")
    x = g.tensor("x", dims=(2, 4, 9), layout="NWC")
    w = g.tensor("w", dims=(6, 2, 3))
    y = g.conv_fprop(x, w, pre_padding=(2,), post_padding=(1,), stride=(2,), dilation=(2,))
    g.pointwise("erf", g.pointwise("sigmoid_fwd", y)).set_output(True).set_name("y")
    return g


def strided_index() -> sigdnn.Graph:
    g = sigdnn.Graph("strided", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", dims=(3, 4), strides=(6, 1))  # padded rows
    idx = g.pointwise("gen_index", x, axis=1)
    lt = g.pointwise("cmp_lt", x, idx)
    g.pointwise("logical_not", lt).set_output(True).set_name("not_lt").set_data_type("uint8")
    g.pointwise("add", x, idx).set_output(True).set_name("sum").set_data_type("fp8_e4m3")
    return g


def conv3d_batched_matmul() -> sigdnn.Graph:
    g = sigdnn.Graph("mix", io_dtype="float64")
    x = g.tensor("x", dims=(1, 2, 3, 3, 3), layout="NDHWC")
    w = g.tensor("w", dims=(2, 2, 2, 2, 2))
    y = g.conv_fprop(x, w, padding=(0, 1, 0))
    m = g.tensor("m", dims=(2, 1, 2, 3))
    g.matmul(y, m).set_output(True).set_name("c")
    return g


def fan_out_in() -> sigdnn.Graph:
    g = sigdnn.Graph("dag", io_dtype="float16", intermediate_dtype="float32")
    x = g.tensor("x", dims=(4, 4))
    a = g.pointwise("exp", x)
    b = g.pointwise("neg", a)
    c = g.pointwise("tanh_fwd", b)
    d = g.pointwise("add", a, c)
    e = g.pointwise("swish_bwd", d, b, swish_beta=1.5)
    g.pointwise("max", e, g.pointwise("softplus_fwd", c, softplus_beta=2.0)).set_output(True).set_name("y")
    return g


def training_step() -> sigdnn.Graph:
    """Multi-output nodes with optional ports: batchnorm with running statistics, its backward, conv grads, pooling."""
    g = sigdnn.Graph("train", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", dims=(2, 3, 6, 6), layout="NHWC")
    w = g.tensor("w", dims=(4, 3, 3, 3))
    p = {n: g.tensor(n, dims=(1, 4, 1, 1)) for n in ("s", "b", "rm", "rv")}
    y = g.conv_fprop(x, w, padding=(1, 1))
    n, mean, inv, nrm, _ = g.batchnorm(y, p["s"], p["b"], p["rm"], p["rv"], 1e-5, 0.1)
    nrm.set_output(True).set_name("running_mean")
    pooled = g.pooling(n, "average_count_exclude_pad", (2, 2), padding=(1, 1))
    d = g.pooling_backward(pooled, n, "max", (2, 2), padding=(1, 1))
    dy, dscale, _ = g.batchnorm_backward(d, y, p["s"], mean, inv)
    dscale.set_output(True).set_name("dscale")
    g.conv_dgrad(dy, w, padding=(1, 1)).set_output(True).set_name("dx")
    g.conv_wgrad(x, dy, padding=(1, 1)).set_output(True).set_name("dw")
    return g


def attention_block() -> sigdnn.Graph:
    """Norms, attention forward and backward, softmax, reduction, resample and the data movement ops."""
    g = sigdnn.Graph("attn", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", dims=(1, 4, 8))
    y, mean, inv = g.layernorm("training", x, g.tensor("s", (1, 1, 8)), g.tensor("b", (1, 1, 8)))
    r, _ = g.rmsnorm("inference", y, g.tensor("rs", (1, 1, 8)))
    qkv = g.reshape(g.concatenate([r, y, r], axis=2), (1, 4, 6, 4))
    heads = g.transpose(qkv, (0, 2, 1, 3))
    q, k, v = (g.slice(heads, [slice(None), slice(2 * i, 2 * i + 2)]) for i in range(3))
    o, stats = g.sdpa(q, k, v, 0.5, use_causal_mask=True, generate_stats=True)
    dq, _, _ = g.sdpa_backward(q, k, v, o, o, stats, 0.5, use_causal_mask=True)
    sm, _ = g.softmax(dq, axes=(2, 3), log=True, generate_stats=True)
    g.reduction(sm, "norm2", axes=(1,)).set_output(True).set_name("norm")
    g.resample(o, "bilinear", scales=(2.0, 0.5)).set_output(True).set_name("resampled")
    dx, _, _ = g.layernorm_backward(y, x, g.tensor("s2", (1, 1, 8)), mean, inv)
    g.rmsnorm_backward(dx, x, g.tensor("s3", (1, 1, 8)), inv, has_dbias=True)[2].set_output(True).set_name("db")
    return g


def varlen_attention() -> sigdnn.Graph:
    """sdpa forward and backward with padding masks, every ragged offset (THD q, k, v, o) and a bottom-right
    sliding window (the band's fields)."""
    g = sigdnn.Graph("varlen", io_dtype="float32", intermediate_dtype="float32")
    dims, strides = (2, 2, 3, 4), (24, 4, 8, 1)
    q, k, v = (g.tensor(n, dims, strides=strides) for n in ("q", "k", "v"))
    lengths = {"seq_len_q": g.tensor("lq", (2,), dtype="int32"), "seq_len_kv": g.tensor("lkv", (2,), dtype="int64")}
    offsets = {p: g.tensor(f"{p}_off", (3, 1, 1, 1), dtype="int32") for p in "qkvo"}
    band = {"diagonal_bottom_right": True, "left_bound": 2}
    o, stats = g.sdpa(q, k, v, 0.5, None, True, True, **lengths, ragged_offsets=offsets, **band)
    dq, _, _ = g.sdpa_backward(q, k, v, o, o, stats, 0.5, None, True, **lengths, ragged_offsets=offsets, **band)
    dq.set_output(True).set_name("dq")
    return g


def op_sample(op: type[Op]) -> Callable[[], sigdnn.Graph]:
    """A seed of one op's own sample node: every op's attribute table gets fuzzed, a new op by existing."""

    def make() -> sigdnn.Graph:
        g = sigdnn.Graph(f"{op.kind}_sample", io_dtype="float32", compute_dtype="float32")
        op.sample(g)
        return g

    make.__name__ = f"sample_{op.kind}"
    return make


SEED_GRAPHS: list[Callable[[], sigdnn.Graph]] = [
    conv_bias_relu,
    mlp,
    integer_select,
    grouped_conv1d,
    strided_index,
    conv3d_batched_matmul,
    fan_out_in,
    training_step,
    attention_block,
    varlen_attention,
    *(op_sample(op) for kind, op in sorted(OP_CLASSES.items()) if op.__module__.startswith("sigdnn.graph.ops.")),
]
SEEDS: list[bytes] = [make().serialize() for make in SEED_GRAPHS]


# -- mutations ----------------------------------------------------------------------------

BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE)
INT16 = (0, 1, 4, 0x7FFF, 0x8000, 0xFFFF)
INT32 = (0, 1, 4, 8, -1, -4, 2**31 - 1, -(2**31), 2**16)
INT64 = (0, 1, 2, 3, 7, -1, 2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1, -(2**63))


def _offset(rng: random.Random, data: bytearray, width: int) -> int:
    """Mostly aligned (where FlatBuffers puts fields), sometimes not."""
    at = rng.randrange(max(len(data) - width + 1, 1))
    return at - at % width if rng.random() < 0.8 else at


def _word(rng: random.Random, data: bytearray, width: int, interesting: tuple[int, ...], label: str) -> str:
    if len(data) < width:
        return f"{label}: too short"
    at = _offset(rng, data, width)
    old = int.from_bytes(data[at : at + width], "little", signed=True)
    kind = rng.random()
    value = (
        rng.choice(interesting)
        if kind < 0.6
        else old + rng.randint(-8, 8)
        if kind < 0.85
        else rng.getrandbits(width * 8)
    )
    value &= (1 << (width * 8)) - 1
    data[at : at + width] = value.to_bytes(width, "little")
    return f"{label}@{at}={value:#x}"


def _int64(rng: random.Random, old: int) -> int:
    value = rng.choice(INT64) if rng.random() < 0.6 else old + rng.randint(-3, 3)
    return max(-(2**63), min(2**63 - 1, value))


def mutate_ir(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Change one field of the decoded graph and re-encode it: valid bytes, garbage graph.

    Byte mutations mostly break the FlatBuffers structure; these reach the
    graph checks, the planner and the reference kernels with well-formed
    buffers declaring odd dims, strides, dtypes, ports and attributes.
    """
    g = sigdnn.deserialize(data, check=False)
    done = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        uids = list(g.tensors)
        if rng.random() < 0.5:
            uid = rng.choice(uids)
            t = g.tensors[uid]
            field = rng.choice(["dims", "strides", "dtype", "is_virtual", "uid", "value", "overlap"])
            if field == "overlap":  # a broadcast-like view: tiny span, large logical size
                field, new = "strides", tuple(rng.choice((0, 1)) for _ in t.dims)
            elif field in ("dims", "strides"):
                vals = list(getattr(t, field))
                if vals and rng.random() < 0.8:
                    i = rng.randrange(len(vals))
                    vals[i] = _int64(rng, vals[i])
                elif vals and rng.random() < 0.5:
                    vals.pop()
                else:
                    vals.append(rng.choice((1, 2, 3)))
                new: object = tuple(vals)
            elif field == "dtype":
                new = rng.choice(list(DataType))
            elif field == "is_virtual":
                new = not t.is_virtual
            elif field == "uid":
                new = rng.choice([*uids, _int64(rng, uid)])
            else:
                new = None if t.value is not None else bytes(rng.choice((1, 2, 4, 8)))
            g.tensors[uid] = attrs.evolve(t, **{field: new})
        else:
            i = rng.randrange(len(g.nodes))
            node = g.nodes[i]
            field = rng.choice([f.name for f in attrs.fields(type(node.op))])
            old = getattr(node.op, field)
            kind = dict(type(node.op).wire_fields)[field]
            if kind == "enum":
                new = rng.choice(type(node.op).enums[field])
            elif isinstance(old, tuple):
                vals = list(old)
                if vals and rng.random() < 0.8:
                    j = rng.randrange(len(vals))
                    vals[j] = _int64(rng, vals[j])
                elif vals and rng.random() < 0.5:
                    vals.pop()
                else:
                    vals.append(rng.choice([1, 2, *uids]))
                new = tuple(vals)
            elif kind in ("f64", "f64?"):
                new = rng.choice([None if kind == "f64?" else 1.0, 0.0, -1.0, 0.5, math.nan, math.inf, 1e308])
            elif kind == "bool":
                new = not old
            elif rng.random() < 0.8:
                new = rng.choice([*uids, None] if kind.endswith("?") else uids)
            else:
                new = _int64(rng, old or 0)
            g.nodes[i] = sigdnn.Node(
                node.name,
                attrs.evolve(node.op, **{field: new}),
                rng.choice([node.compute_dtype, *DataType]) if rng.random() < 0.2 else node.compute_dtype,
            )
        done.append(f"{field}={new!r}")
    if rng.random() < 0.1:
        rng.shuffle(g.nodes)
        done.append("shuffled nodes")
    return g.serialize(), "ir: " + ", ".join(done)


def share_offsets(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Point entries of the tensor or node vector at a table an earlier entry uses (a table parsed twice)."""
    buf = Buffer(data)
    root = buf.root()
    slot = rng.choice((_GRAPH_SLOTS["Tensors"], _GRAPH_SLOTS["Nodes"]))
    start, n = root._vector(slot, 4)
    if n < 2:
        return data, "share: vector too short"
    out = bytearray(data)
    source = rng.randrange(n - 1)
    target = start + 4 * source + int.from_bytes(data[start + 4 * source : start + 4 * source + 4], "little")
    copies = rng.sample(range(source + 1, n), rng.randint(1, n - 1 - source))
    for j in copies:
        out[start + 4 * j : start + 4 * j + 4] = (target - (start + 4 * j)).to_bytes(4, "little")
    return bytes(out), f"share: entries {copies} -> entry {source} of slot {slot}"


def mutate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """1 to 3 stacked mutations of ``data``; returns the bytes and what was done."""
    if rng.random() < 0.05:
        return share_offsets(rng, data)
    if rng.random() < 0.25:
        data, what = mutate_ir(rng, data)
        if rng.random() < 0.7:
            return data, what
    out = bytearray(data)
    done = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        kind = rng.randrange(11)
        n = len(out)
        if kind == 0 and n:
            bits = [rng.randrange(n * 8) for _ in range(rng.randint(1, 8))]
            for bit in bits:
                out[bit // 8] ^= 1 << (bit % 8)
            done.append(f"flip{bits}")
        elif kind == 1 and n:
            at, value = rng.randrange(n), rng.choice(BYTES)
            out[at] = value
            done.append(f"byte@{at}={value:#x}")
        elif kind == 2 and n:
            edits = [(rng.randrange(n), rng.getrandbits(8)) for _ in range(rng.randint(1, 8))]
            for at, value in edits:
                out[at] = value
            done.append(f"random_bytes{edits}")
        elif kind == 3:
            done.append(_word(rng, out, 2, INT16, "int16"))
        elif kind == 4:
            done.append(_word(rng, out, 4, INT32, "int32"))
        elif kind == 5:
            done.append(_word(rng, out, 8, INT64, "int64"))
        elif kind == 6 and n:
            cut = rng.randrange(n)
            del out[cut:]
            done.append(f"truncate@{cut}")
        elif kind == 7:
            tail = (
                bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
                if rng.random() < 0.5
                else bytes(rng.randint(1, 64))
            )
            out.extend(tail)
            done.append(f"extend+{len(tail)}")
        elif kind == 8:
            donor = rng.choice(SEEDS)
            start = rng.randrange(len(donor))
            chunk = donor[start : start + rng.randint(1, 64)]
            at = rng.randrange(n + 1)
            if rng.random() < 0.5:
                out[at:at] = chunk
                done.append(f"splice_insert@{at}<-{start}+{len(chunk)}")
            else:
                out[at : at + len(chunk)] = chunk
                done.append(f"splice_over@{at}<-{start}+{len(chunk)}")
        elif kind == 9 and n:
            at = rng.randrange(n)
            length = rng.randint(1, 32)
            del out[at : at + length]
            done.append(f"delete@{at}+{length}")
        elif kind == 10 and n:
            at = rng.randrange(n)
            chunk = out[at : at + rng.randint(1, 32)]
            out[at:at] = chunk
            done.append(f"duplicate@{at}+{len(chunk)}")
    return bytes(out), ", ".join(done)


# -- running one case -----------------------------------------------------------------------


class CaseTimeout(AssertionError):
    """A case ran far past its time bound (a hang)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt a hung case (main thread, POSIX); elsewhere the elapsed-time check still applies."""
    if not hasattr(signal, "setitimer") or sys.platform == "win32":
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise CaseTimeout(f"case still running after {seconds} s")

    try:
        previous = signal.signal(signal.SIGALRM, expire)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def random_inputs(graph: sigdnn.Graph, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Small random values in each input's dtype, valid where an op constrains them; sometimes caller-owned
    outputs too. (Hostile lengths and offsets, ExecutionErrors by design, have their own tests.)"""
    pack = {}
    for t in graph.inputs:
        dtype = graph.dtype_of(t).numpy
        if dtype.kind == "b":
            a = rng.random(t.dims) < 0.5
        elif dtype.kind in "iu":
            a = rng.integers(0 if dtype.kind == "u" else -5, 6, t.dims)
        else:
            a = rng.standard_normal(t.dims, dtype=np.float32) * 4
        pack[t.uid] = a.astype(dtype)
    pack.update(constrained_draws(graph, rng, set(pack)))  # sequence lengths, offsets: the ops' own draws
    if rng.random() < 0.3:
        for t in graph.outputs:
            pack[t.uid] = np.empty(t.dims, graph.dtype_of(t).numpy)
    return pack


def run_case(data: bytes, executor: sigdnn.Executor, seed: int) -> str:
    """deserialize -> prepare -> execute; the outcome's name.

    Non-Sigdnn errors propagate, and so does ExecutionError: a graph that
    passed every check and got a plan must run on the reference, so a node
    failing is a builder bug, not a refusal.
    """
    try:
        graph = sigdnn.deserialize(data, limits=FUZZ_LIMITS)
        plan = executor.prepare(data)
        executor.execute(plan, random_inputs(graph, np.random.default_rng(seed)))
    except ExecutionError:
        raise
    except SigdnnError as e:
        assert str(e), f"{type(e).__name__} without a message"
        return type(e).__name__
    return "ran"


def fuzz(cases: int, seed: int = SEED, start: int = 0) -> Counter[str]:
    """Run ``cases`` mutation cases; fail on a non-Sigdnn error, a slow case or runaway memory."""
    executor = sigdnn.Executor(limits=FUZZ_LIMITS, cache_size=8)
    for data in SEEDS:  # warm up: registry, imports, first-call costs stay out of the timings
        run_case(data, executor, 0)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    outcomes: Counter[str] = Counter()
    slowest = (0.0, -1)
    for i in range(start, start + cases):
        rng = random.Random(f"{seed}-{i}")
        source = rng.randrange(len(SEEDS))
        data, what = mutate(rng, SEEDS[source])
        where = f"case {i} (SIGDNN_FUZZ_SEED={seed}), seed graph {SEED_GRAPHS[source].__name__}, {what}"
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        t0 = time.perf_counter()
        try:
            with deadline(max(10 * CASE_SECONDS, 5.0)):
                outcome = run_case(data, executor, i)
        except Exception as e:
            raise AssertionError(f"{where}: {type(e).__name__}: {e}\nbuffer: {data.hex()}") from e
        elapsed = time.perf_counter() - t0
        assert elapsed < CASE_SECONDS, f"{where}: took {elapsed:.2f} s (bound {CASE_SECONDS} s)\nbuffer: {data.hex()}"
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak_before
        assert grew < CASE_RSS_LIMIT, f"{where}: raised peak resident memory by {grew >> 20} MiB\nbuffer: {data.hex()}"
        slowest = max(slowest, (elapsed, i))
        outcomes[outcome] += 1
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    assert rss_growth < RSS_GROWTH_LIMIT, f"peak resident memory grew by {rss_growth >> 20} MiB"
    print(
        f"\nfuzz: {cases} cases (seed {seed}): {dict(outcomes.most_common())}; "
        f"slowest case {slowest[1]} at {slowest[0] * 1000:.1f} ms; peak RSS growth {rss_growth >> 20} MiB"
    )
    return outcomes


# -- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", SEED_GRAPHS, ids=lambda f: f.__name__)
def test_seed_graphs_are_valid_and_run(make: Callable[[], sigdnn.Graph]) -> None:
    """A seed that does not run would only ever fuzz the error paths."""
    data = make().serialize()
    assert run_case(data, sigdnn.Executor(limits=FUZZ_LIMITS), 0) == "ran"


def test_mutations_are_reproducible() -> None:
    a = [mutate(random.Random(f"7-{i}"), SEEDS[i % len(SEEDS)]) for i in range(50)]
    b = [mutate(random.Random(f"7-{i}"), SEEDS[i % len(SEEDS)]) for i in range(50)]
    assert a == b
    assert len({data for data, _ in a}) > 40


def test_fuzz_ci() -> None:
    """A few hundred cases on every run; the long run is test_fuzz_long."""
    outcomes = fuzz(CI_CASES)
    assert outcomes["SchemaError"] and outcomes["GraphError"] and outcomes["ran"], outcomes


@pytest.mark.fuzz
def test_fuzz_long() -> None:
    cases = int(os.environ.get("SIGDNN_FUZZ_CASES", "1000000"))
    start = int(os.environ.get("SIGDNN_FUZZ_START", str(CI_CASES)))  # distinct from the CI cases by default
    outcomes = fuzz(cases, start=start)
    assert sum(outcomes.values()) == cases
    assert outcomes["ran"] > cases // 50, outcomes


# -- hypothesis-driven bytes -----------------------------------------------------------------

_EXECUTOR = sigdnn.Executor(limits=FUZZ_LIMITS, cache_size=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=1024))
def test_hypothesis_random_bytes(data: bytes) -> None:
    assert run_case(data, _EXECUTOR, 0) in ("SchemaError", "GraphError")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.binary(min_size=4, max_size=1024))
def test_hypothesis_bytes_behind_a_valid_header(root: int, body: bytes) -> None:
    run_case(root.to_bytes(4, "little") + b"SDG1" + body, _EXECUTOR, 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(range(len(SEEDS))),
    st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, 2**16),
)
def test_hypothesis_byte_edits_of_seeds(source: int, edits: list[tuple[int, int]], seed: int) -> None:
    data = bytearray(SEEDS[source])
    for at, value in edits:
        data[at % len(data)] = value
    run_case(bytes(data), _EXECUTOR, seed)
