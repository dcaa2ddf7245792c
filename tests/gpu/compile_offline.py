"""Compile kernels for sm_90 without a GPU (cuda-tile and tileiras only): pointwise, matmul, attention, conv.

GPU time is scarce; cuTile's compiler is not. With the ``.gpu/tile`` payload
unpacked somewhere (``tar xJf .gpu/tile/payload.tar.xz -C DIR``) and a Python
3.12 that has numpy, ml_dtypes, attrs, flatbuffers and typing_extensions:

    PATH=DIR/nvidia/cu13/bin:$PATH PYTHONPATH=$PWD:DIR python3.12 tests/gpu/compile_offline.py [WORD ...]   # WORDs: only kernels whose name holds one

compiles one kernel per mode and io dtype (and a few layouts and a fused
region) with the array constraints cuTile's launch gives contiguous arrays
(16-byte aligned, stride 1, whole-tile parts divisible), the literal attention
kernels with variable lengths (forward, dq, dk / dv), the ragged pack /
unpack, the implicit-GEMM convs (fprop, dgrad, wgrad; float32, exact and
TF32), the pooling kernels, the gated delta rules (gdn, kda, forward and backward, at each compute dtype, flat and as launched) and the
GPU reference's GEMMs, row sums, gather and scatter, and reports every failure. Not a pytest module: it needs the
compiler, not a GPU.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import importlib.util
import io
import itertools
import sys
import tempfile
import time
import uuid

import attrs
import cuda.tile as ct
from cuda.tile.compilation import (
    ArrayConstraint,
    CallingConvention,
    ConstantConstraint,
    KernelSignature,
    ScalarConstraint,
    export_kernel,
)

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.plan_builders.cutile.attention import RAGGED_ROWS, kernel_source, ragged_kernel
from sigdnn.plan_builders.cutile.backend import source_of
from sigdnn.plan_builders.cutile.codegen import AS_BYTES, KernelSpec
from sigdnn.plan_builders.cutile.conv_1x1 import CutileConv1x1Builder
from sigdnn.plan_builders.cutile.conv_gemm import kernel_source as conv_source
from sigdnn.plan_builders.cutile.conv_im2col import CutileConvIm2colBuilder
from sigdnn.plan_builders.cutile.matmul import CONFIGS, FLOAT32_CONFIGS, default_config, parse_config
from sigdnn.plan_builders.cutile.matmul_codegen import EpilogueStep, MatmulSpec, Operand
from sigdnn.plan_builders.cutile.matmul_layout import GemmViews
from sigdnn.plan_builders.cutile.pointwise import node_spec
from sigdnn.plan_builders.cutile.pooling import kernel_source as pooling_source
from sigdnn.plan_builders.cutile.spec import kernel_spec
from sigdnn.plan_builders.gpu_reference import backend as reference_backend
from sigdnn.registry.regions import Dataflow, make_region
from sigdnn.registry.registry import DEFAULT_REGISTRY

CT = {"float32": ct.float32, "float16": ct.float16, "bfloat16": ct.bfloat16, "int8": ct.int8, "uint8": ct.uint8,
      "int32": ct.int32, "int64": ct.int64}  # fmt: skip


def array(dtype: str, whole_tiles: bool) -> ArrayConstraint:
    dt = ct.uint8 if dtype in AS_BYTES else CT[dtype]
    extra = {"stride_constant": (1,), "shape_divisible_by": 16} if whole_tiles else {}
    return ArrayConstraint(dt, 1, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                           may_alias_internally=False, base_addr_divisible_by=16, **extra)  # fmt: skip


def signature(spec: KernelSpec) -> KernelSignature:
    main, tail = spec.split
    args = []
    for access, dtype in zip(spec.space.inputs, spec.inputs):
        args += (
            [array(dtype, True)] * main + [array(dtype, False)] * tail
            if access.kind == "flat"
            else [array(dtype, False)]
        )
    for value in spec.outputs:
        dtype = spec.value_dtype(value)
        args += [array(dtype, True)] * main + [array(dtype, False)] * tail
    return KernelSignature(args, CallingConvention.cutile_python_v1())


def matmul_signature(spec: MatmulSpec) -> KernelSignature:
    """Row-contiguous views (stride 1 last), 16-byte aligned, extents multiples of 16: a large GEMM's launch."""

    def view(operand: Operand, ndim: int) -> ArrayConstraint:
        return ArrayConstraint(CT[operand.dtype], ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                               alias_groups=(), may_alias_internally=False, base_addr_divisible_by=16,
                               stride_constant=(None,) * (ndim - 1) + (1,), shape_divisible_by=16)  # fmt: skip

    partials = view(Operand("float32", False, True), 3)  # split-K's (splits, M, N) float32 workspace view
    args = [view(o, 2 + o.batched) for o in (spec.a, spec.b, spec.c)]
    if spec.stage == "split":
        return KernelSignature([*args[:2], partials], CallingConvention.cutile_python_v1())
    if spec.stage == "sum":
        args = [partials, args[2]]
    for step in spec.epilogue:
        if step.operand is not None:
            args.append(view(step.operand, 1 if step.kind == "bias" else 2 + step.operand.batched))
    return KernelSignature(args, CallingConvention.cutile_python_v1())


def strided(dtype: object, ndim: int, rows: bool = False) -> ArrayConstraint:
    """Any strides, 16-byte aligned: what a literal kernel's views may be (``rows``: the last one 1, as the pooling
    row kernels' channels)."""
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                           may_alias_internally=False, base_addr_divisible_by=16,
                           stride_constant=(*(None,) * (ndim - 1), 1) if rows else None)  # fmt: skip


LITERALS = ("attention", "attention_dq", "attention_dkdv", "ragged_unpack", "ragged_pack")


def literal_kernels() -> list[tuple[str, str, str, bool]]:
    """The attention kernels with lengths on (as ragged and padded nodes launch them) and the ragged pack /
    unpack, in bf16 and float32 with int32 and int64 lengths, with no band and with every bound of one (left,
    right, bottom-right: each branch of the band's code; the pack / unpack take no mask)."""
    return [(kernel, dtype, index, banded)
            for kernel, dtype, index, banded in itertools.product(LITERALS, ("bfloat16", "float32"), ("int32", "int64"),
                                                                  (False, True))
            if not (banded and kernel.startswith("ragged"))]  # fmt: skip


def literal_signature(kernel: str, dtype: str, index: str, banded: bool) -> KernelSignature:
    """The kernel's launch arguments: any strides, 16-byte aligned, D = Dv = 128 (made in the worker: a
    signature does not pickle)."""
    c, i32 = ConstantConstraint, ScalarConstraint(ct.int32)
    t, stats, lengths, flat = (
        strided(CT[dtype], 4),
        strided(ct.float32, 4),
        strided(CT[index], 1),
        strided(CT[dtype], 1),
    )
    band = [c(banded)] * 3  # LEFT, RIGHT, BOTTOM_RIGHT
    sizes = [i32, i32, i32, i32, ScalarConstraint(ct.float32), i32, i32, c(64), c(64), c(128), c(128), *band]
    moves = [i32] * 7 + [c(RAGGED_ROWS), c(128)]
    narrow = dtype != "float32"  # bf16 q / k / v / d_o go to the MMAs as they are
    args = {
        "attention": [t, t, t, t, stats, lengths, lengths, *sizes, c(True), c(narrow), c(True), c(not narrow)],
        "attention_dq": [t, t, t, t, t, stats, lengths, lengths, t, *sizes, c(True), c(not narrow)],
        "attention_dkdv": [t, t, t, t, t, stats, lengths, lengths, t, t, *sizes, c(True), c(not narrow)],
        "ragged_unpack": [flat, t, lengths, lengths, t, *moves],  # the buffer flat and as rows, ..., the copy
        "ragged_pack": [t, lengths, lengths, flat, t, *moves],
    }[kernel]
    return KernelSignature(args, CallingConvention.cutile_python_v1())


def compile_literal(kernel: str, dtype: str, index: str, banded: bool, folder: str) -> int:
    source = ragged_kernel(kernel) if kernel.startswith("ragged") else kernel_source(kernel)
    return export(source.name, source.text, literal_signature(kernel, dtype, index, banded), folder)


CONVS = {  # job: (kernel, each array's ndim, the split count where the kernel takes one, filter tiles)
    "conv_gemm": ("conv_gemm", (1, 5, 5), 1, False),
    "conv_gemm tiles": ("conv_gemm", (1, 3, 5), 1, True),  # w: the (groups, K/G, reduction) view
    "conv_gemm split": ("conv_gemm", (1, 3, 3), 4, True),  # out: the (groups x splits, pixels, K/G) partial sums
    "conv_gemm_sum": ("conv_gemm_sum", (3, 5), 4, False),
    "conv_im2col": ("conv_im2col", (1, 2), 1, False),  # a_out: the (pixels, reduction) matrix A
    "conv_dgrad_gemm": ("conv_dgrad_gemm", (1, 5, 5), 1, False),
    "conv_wgrad_gemm": ("conv_wgrad_gemm", (1, 1, 5), 1, False),
}


def conv_signature(job: str, tf32: bool) -> KernelSignature:
    """float32 operands (widened; TF32 or exact), channels fastest, any strides; the parameters between the
    arrays and the constants are int32 sizes and strides (read from the kernel's own parameter list)."""
    kernel, ndims, split, tiles = CONVS[job]
    tree = ast.parse(conv_source(kernel).text)
    names = [a.arg for a in next(f for f in tree.body if getattr(f, "name", None) == kernel).args.args]
    constants = {"TM": 64, "TN": 64, "TK": 32, "CHANNELS_FASTEST": True, "WIDEN": True, "TF32": tf32, "SPLITS": split,
                 "W_TILES": tiles}  # fmt: skip
    arrays = [strided(ct.float32, ndim) for ndim in ndims]
    scalars = [ScalarConstraint(ct.int32)] * (len(names) - len(arrays) - sum(n in constants for n in names))
    fixed = [ConstantConstraint(constants[n]) for n in names if n in constants]
    return KernelSignature([*arrays, *scalars, *fixed], CallingConvention.cutile_python_v1())


def compile_conv(job: str, tf32: bool, folder: str) -> int:
    source = conv_source(CONVS[job][0])
    return export(source.name, source.text, conv_signature(job, tf32), folder)


WINDOWS = {  # the pooling kernels by mode (max, average excluding padding, argmax): each array
    # argument's (ndim, dtype: "io" or int32)
    ("pool_forward_rows", 0): ((2, "io"), (2, "io")),
    ("pool_forward_rows", 2): ((2, "io"), (2, "io")),
    ("pool_forward_rows", 3): ((2, "io"), (2, "int32")),
    ("pool_backward_rows", 0): ((2, "io"), (2, "int32"), (2, "io")),
    ("pool_backward_rows", 2): ((2, "io"), (2, "int32"), (2, "io")),
    ("pool_backward_phases", 0): ((3, "io"), (3, "int32"), (3, "io")),
    ("pool_backward_phases", 2): ((3, "io"), (3, "io"), (3, "io")),
    ("pool_forward", 0): ((5, "io"), (5, "io")),
    ("pool_forward", 3): ((5, "io"), (5, "int32")),
    ("pool_backward", 0): ((5, "io"), (5, "int32"), (5, "io")),
}


def compile_window(kernel: str, dtype: str, mode: int, folder: str) -> int:
    """A pooling kernel as pooling.py launches it (the row kernels at [8, 64] tiles of 2-D views, the phase kernel's
    of 3-D ones, the flat ones 5-D), int32 sizes and strides (read from the kernel's parameter list)."""
    source = pooling_source(kernel)
    tree = ast.parse(source.text)
    names = [a.arg for a in next(f for f in tree.body if getattr(f, "name", None) == kernel).args.args]
    constants = {"MODE": mode, "PIXELS": 8, "CHANNELS": 64, "TILE": 256}
    arrays = [strided(CT[dtype] if kind == "io" else ct.int32, ndim, rows=ndim in (2, 3)) for ndim, kind in
              WINDOWS[kernel, mode]]  # fmt: skip
    scalars = [ScalarConstraint(ct.int32)] * (len(names) - len(arrays) - sum(n in constants for n in names))
    fixed = [ConstantConstraint(constants[n]) for n in names if n in constants]
    signature = KernelSignature([*arrays, *scalars, *fixed], CallingConvention.cutile_python_v1())
    return export(source.name, source.text, signature, folder)


def compile_delta_rule(kind: str, backward: bool, compute: str, folder: str) -> int:
    """gdn / kda (or their backward) as the builder launches them at K = V = 128, bf16 io, at a ``compute`` dtype
    (float16: TF32 products; bfloat16: bf16 ones; float32: split TF32), each kernel under two signatures: every
    argument a flat view, 16-byte aligned; and as cuTile's launch specializes a large batch's (stride 1, sizes
    divisible by 16 but cu_seqlens'), which tileiras compiles to other code (it once failed on one and not the
    other)."""
    lengths, dims = (1, 63, 64, 65, 300), 128
    g = sigdnn.Graph(kind, io_dtype="bfloat16", compute_dtype=compute)
    t = {n: g.tensor(n, (sum(lengths), 4, dims)) for n in ("q", "k", "v", "d_o")}
    gate = g.tensor("g", (sum(lengths), 4, dims) if kind == "kda" else (sum(lengths), 4), dtype="float32")
    beta, cu = g.tensor("beta", (sum(lengths), 4)), g.tensor("cu", (len(lengths) + 1,), dtype="int32")
    h0 = g.tensor("h0", (len(lengths), 4, dims, dims), dtype="float32")
    first = (t["q"], t["k"], t["v"], gate, beta, cu, h0)
    if backward:
        outs = getattr(g, f"{kind}_bwd")(*first, t["d_o"], None, use_qk_l2norm=True, name="n")
    else:
        outs = getattr(g, kind)(*first, use_qk_l2norm=True, output_final_state=True, name="n")
    for out in outs:
        out.set_output(True)
    node = g.nodes[-1]
    launches, _ = next(b for b in DEFAULT_REGISTRY.builders() if b.name == f"cutile.{node.op.kind}").launches(node, g)
    ports = node.op.ports()
    size = 0
    for launch in launches:
        dtypes = [str(g.dtype_of(g.tensors[ports[a.buffer]])) if a.buffer in ports else a.dtype for a in launch.args]
        flat = KernelSignature([strided(CT[d], 1) for d in dtypes], CallingConvention.cutile_python_v1())
        launched = [array(d, a.buffer != "cu_seqlens") for d, a in zip(dtypes, launch.args)]
        for sig in (flat, KernelSignature(launched, CallingConvention.cutile_python_v1())):
            size += export(launch.source.name, launch.source.text, sig, folder)
    return size


def export(name: str, text: str, sig: KernelSignature, folder: str) -> int:
    """The kernel's cubin size; each job writes its own file (kernels of one text under two signatures, compiled
    at once, would otherwise read each other's half-written file: cuTile's "could not get source code")."""
    name = f"{name}_{uuid.uuid4().hex}"
    path = f"{folder}/{name}.py"
    with open(path, "w") as f:
        f.write("import cuda.tile as ct\n" + text)
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    out = io.BytesIO()
    export_kernel(module.kernel, [sig], out, gpu_code="sm_90", output_format="cubin")
    return len(out.getvalue())


def compile_spec(spec: KernelSpec | MatmulSpec, folder: str) -> int:
    name, text = source_of(spec)
    return export(name, text, matmul_signature(spec) if isinstance(spec, MatmulSpec) else signature(spec), folder)


def gemm_stages(name: str, spec: MatmulSpec, views: GemmViews) -> list[tuple[str, MatmulSpec]]:
    """The GEMM kernels a builder on cutile.matmul's kernel launches for ``views`` by default (split-K: two)."""
    spec = attrs.evolve(spec, config=default_config(spec.mma, views, 132))
    stages = ("split", "sum") if spec.config.split_k > 1 else ("gemm",)
    return [(f"{name} {stage}", attrs.evolve(spec, stage=stage)) for stage in stages]


# the GPU reference's kernels (tiles.py)
REFERENCE = ("gemm", "integer_gemm", "sum_rows_in_order", "reduce_rows", "gather", "scatter", "gather_outer")
REFERENCE += ("gather_rows",)  # a channels-last conv's im2col, as many channels a block as ROWS_TILE allows
REFERENCE += ("elementwise", "elementwise_int64")
# validation's bookkeeping modes (device_arrays.py), each its own specialization of the float64 kernel
BOOKKEEPING_MODES = ("FINITE", "MAGNITUDE", "FINITE_OR_ZERO", "FMAX", "NEXT_UP", "ABS_ERROR", "FAILING")
REFERENCE += tuple(f"elementwise {mode}" for mode in BOOKKEEPING_MODES)
# the random draws' hash steps: int64 with one-element constants, and the signs (int64 in, float64 out)
REFERENCE += ("elementwise_int64 ADD_MOD", "elementwise_int64 SQUARE_ADD_MOD", "elementwise PARITY_SIGN")


def compile_reference(name: str, folder: str) -> int:
    """A GPU reference kernel of gpu_reference/kernels/tiles.py as its Array methods launch it (packed arrays)."""
    module_spec = importlib.util.spec_from_file_location(f"tiles_{uuid.uuid4().hex}", reference_backend.KERNEL_FILE)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    c, i32, f64 = ConstantConstraint, ScalarConstraint(ct.int32), ct.float64
    (tm, tn, tk), (im, jn) = reference_backend.GEMM_TILE, reference_backend.INTEGER_GEMM_TILE
    kernel, _, mode = name.partition(" ")
    args = (
        {
            "gemm": [strided(f64, 3)] * 3 + [i32, c(tm), c(tn), c(tk)],
            "integer_gemm": [strided(ct.int64, 3)] * 3 + [i32, c(im), c(jn)],
            "sum_rows_in_order": [strided(f64, 2)] * 2 + [i32, c(reference_backend.ORDERED_ROWS)],
            "reduce_rows": [
                strided(f64, 2),
                strided(f64, 1),
                i32,
                c(0.0),
                c(reference_backend.ROW_TILE),
                c(module.R_SUM),
            ],
            # an outer-sum map (rows, cols, C), as tensors.read / write give a strided tensor
            "gather": [
                strided(ct.float16, 1),
                *[strided(ct.int64, 1)] * 2,
                i32,
                strided(f64, 1),
                ScalarConstraint(ct.float64),
                c(reference_backend.TILE),
                c(module.DECODE_CAST),
                c(0),
            ],
            "gather_rows": [
                strided(f64, 1),
                *[strided(ct.int64, 1)] * 2,
                *[i32] * 4,
                strided(f64, 4),
                ScalarConstraint(ct.float64),
                c(reference_backend.ROWS_TILE[0] // reference_backend.ROWS_TILE[1]),
                c(reference_backend.ROWS_TILE[1]),
            ],
            "gather_outer": [
                strided(f64, 1),
                *[strided(ct.int64, 1)] * 2,
                i32,
                i32,
                i32,
                strided(f64, 2),
                ScalarConstraint(ct.float64),
                *(c(t) for t in reference_backend.OUTER_TILE),
            ],
            # a * b with b a one-element constant (read in place), c unread; an int64 index plus a constant
            "elementwise": [
                *[strided(f64, 1)] * 3,
                *[ScalarConstraint(ct.float32)] * 3,
                strided(f64, 1),
                c(reference_backend.TILE),
                c(module.MUL),
                c(module.OPERAND_ARRAY),
                c(module.OPERAND_ELEMENT),
                c(module.OPERAND_SCALAR),
            ],
            "elementwise_int64": [
                *[strided(ct.int64, 1)] * 3,
                *[ScalarConstraint(ct.int32)] * 3,
                strided(ct.int64, 1),
                c(reference_backend.TILE),
                c(module.PYMOD),
                c(module.OPERAND_ELEMENT),
                c(module.OPERAND_ELEMENT),
                c(module.OPERAND_SCALAR),
            ],
            "scatter": [
                strided(f64, 1),
                *[strided(ct.int64, 1)] * 2,
                i32,
                strided(ct.bfloat16, 1),
                i32,
                c(reference_backend.TILE),
                c(module.ENCODE_BF16),
                c(0),
            ],
        }[name]
        if not mode
        else [
            *[strided(ct.int64, 1)] * 3,
            *[ScalarConstraint(ct.int32)] * 3,
            strided(ct.int64, 1),
            c(reference_backend.TILE),
            c(getattr(module, mode)),
            c(module.OPERAND_ARRAY),
            c(module.OPERAND_ELEMENT),
            c(module.OPERAND_ELEMENT),
        ]
        if kernel == "elementwise_int64"
        else [
            strided(ct.int64, 1),
            *[strided(f64, 1)] * 2,
            *[ScalarConstraint(ct.float32)] * 3,
            strided(f64, 1),
            c(reference_backend.TILE),
            c(module.PARITY_SIGN),
            c(module.OPERAND_ARRAY),
            c(module.OPERAND_SCALAR),
            c(module.OPERAND_SCALAR),
        ]
        if mode == "PARITY_SIGN"
        else [
            *[strided(f64, 1)] * 3,
            *[ScalarConstraint(ct.float32)] * 3,
            strided(f64, 1),
            c(reference_backend.TILE),
            c(getattr(module, mode)),
            c(module.OPERAND_ARRAY),
            c(module.OPERAND_ARRAY),
            c(module.OPERAND_ARRAY),
        ]
    )
    out = io.BytesIO()
    export_kernel(getattr(module, kernel.removesuffix("_int64")), [KernelSignature(args, CallingConvention.cutile_python_v1())], out,
                  gpu_code="sm_90", output_format="cubin")  # fmt: skip
    return len(out.getvalue())


def specs() -> list[tuple[str, KernelSpec]]:
    found = []
    for mode, info in MODES.items():
        for io_dtype in ("float32", "bfloat16", "fp8_e4m3", "int8"):
            g = sigdnn.Graph(mode, io_dtype=io_dtype, compute_dtype="int32" if io_dtype == "int8" else "float32")
            x = g.tensor("x", dims=(4, 8, 33) if io_dtype != "float32" else (4, 8, 1024))
            rest = [g.tensor(f"b{k}", dims=(1, 8, 1)) for k in range(info.arity - 1)]
            g.pointwise(mode, x, *rest, **({"axis": 1} if mode == "gen_index" else {})).set_output(True)
            try:
                found.append((f"{mode}/{io_dtype}", node_spec(g.nodes[0], g)[0]))
            except NotSupported:
                continue
    for x_dims, b_dims in (((3, 2048), (1, 2048)), ((2, 3, 32, 32), (1, 3, 1, 1)), ((2, 3, 5, 7), (1, 3, 1, 1))):
        g = sigdnn.Graph("bias", io_dtype="bfloat16", compute_dtype="float32")
        g.pointwise("mul", g.tensor("x0", dims=x_dims), g.tensor("x1", dims=b_dims)).set_output(True)
        found.append((f"bias{x_dims}", node_spec(g.nodes[0], g)[0]))
    g = sigdnn.Graph("region", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", dims=(2, 16, 5, 7), layout="NHWC")
    b = g.tensor("b", dims=(1, 16, 1, 1))
    mask = g.pointwise("cmp_gt", x, g.scalar("s", 0.5)).set_data_type("bool")
    y = g.pointwise("binary_select", g.pointwise("gelu_fwd", x), g.pointwise("mul", x, b), mask)
    g.pointwise("add", y, x).set_output(True)
    g.pointwise("exp", y).set_output(True)
    region = make_region(Dataflow(g, list(range(len(g.nodes)))), range(len(g.nodes)))
    found.append(("region", kernel_spec(g, region.node_list(g), region.entries, region.exits)))
    bf, f32 = Operand("bfloat16"), Operand("float32")
    gelu = (EpilogueStep("bias", "add", "float32", (), bf), EpilogueStep("unary", "gelu_fwd", "bfloat16"),
            EpilogueStep("residual", "add", "bfloat16", (), Operand("bfloat16", True, True)))  # fmt: skip
    for config in (*CONFIGS, *FLOAT32_CONFIGS):
        found.append((f"matmul {config.label}", MatmulSpec(bf, bf, bf, "bfloat16", "native", (), config)))
    found.append(("matmul transposed batched", MatmulSpec(Operand("float16", True, True), Operand("float16", True),
                                                          Operand("float32", True, True), "float32", "native")))  # fmt: skip
    found.append(("matmul epilogue", MatmulSpec(Operand("bfloat16", False, True), bf, Operand("bfloat16", False, True),
                                                "bfloat16", "native", gelu)))  # fmt: skip
    found.append(("matmul tf32", MatmulSpec(f32, f32, f32, "float32", "tf32")))
    found.append(("matmul float32", MatmulSpec(f32, f32, f32, "float32", "float32", (), FLOAT32_CONFIGS[0])))
    for dims, layout, dtype in (((1, 256, 14, 14), "NCHW", "float32"), ((4, 2048, 7, 7), "NCHW", "float32"),
                                ((1, 1024, 7, 7), "NCHW", "float32"), ((8, 64, 56, 56), "NHWC", "bfloat16")):  # fmt: skip
        g = sigdnn.Graph("c1x1", io_dtype=dtype, compute_dtype="bfloat16")  # float32 as TF32
        x, w = g.tensor("x", dims, layout=layout), g.tensor("w", (4 * dims[1], dims[1], 1, 1), layout=layout)
        g.conv_fprop(x, w, padding=(0, 0), name="conv").set_output(True)
        spec, views = CutileConv1x1Builder().plan(g.nodes[0], g)
        found += gemm_stages(f"conv 1x1 {dims} {layout}", spec, views)
    for dims, layout in (((1, 512, 14, 14), "NCHW"), ((4, 64, 56, 56), "NCHW"), ((1, 64, 56, 56), "NHWC")):
        g = sigdnn.Graph("c3x3", io_dtype="float32", compute_dtype="bfloat16")  # TF32
        x, w = g.tensor("x", dims, layout=layout), g.tensor("w", (dims[1], dims[1], 3, 3), layout=layout)
        g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True)
        spec, views, _, _ = CutileConvIm2colBuilder().plan(g.nodes[0], g)
        found += gemm_stages(f"conv im2col {dims} {layout}", spec, views)
    flat = (*gelu[:2], EpilogueStep("residual", "add", "bfloat16", (), bf))
    for label, mma, operand in (("64x128x64g8s5", "tf32", f32), ("128x128x64g8s11", "native", bf)):
        for stage in ("split", "sum"):
            spec = MatmulSpec(operand, operand, bf, "bfloat16", mma, flat, parse_config(label), stage)
            found.append((f"matmul {label} {stage}", spec))
    return found


def message(error: Exception) -> str:
    """``error``'s text; cuTile's CompilerExecutionError from tileiras has no location, and its str() raises."""
    try:
        return str(error)
    except AttributeError:
        return " ".join(map(str, error.args))


def main(words: list[str]) -> int:
    """Compile every kernel listed, or those whose name holds one of ``words``; non-zero on any failure."""
    jobs = [(name, compile_spec, (spec,)) for name, spec in specs()]
    jobs += [(" ".join(map(str, k)), compile_literal, k) for k in literal_kernels()]
    jobs += [(f"{k} tf32={tf32}", compile_conv, (k, tf32)) for k, tf32 in itertools.product(CONVS, (False, True))]
    jobs += [(f"gpu_reference {k}", compile_reference, (k,)) for k in REFERENCE]
    windows = itertools.product(WINDOWS, ("bfloat16", "float32"))
    jobs += [(f"{k} {dtype} mode={m}", compile_window, (k, dtype, m)) for (k, m), dtype in windows]
    rules = itertools.product(("gdn", "kda"), (False, True), ("float16", "bfloat16", "float32"))
    jobs += [(f"{k} backward={b} compute={c}", compile_delta_rule, (k, b, c)) for k, b, c in rules]
    jobs = [job for job in jobs if not words or any(w in job[0] for w in words)]
    start, failures = time.perf_counter(), 0
    with tempfile.TemporaryDirectory() as folder, cf.ProcessPoolExecutor() as pool:
        futures = {pool.submit(fn, *args, folder): name for name, fn, args in jobs}
        for future in cf.as_completed(futures):
            try:
                future.result()
            except Exception as e:  # report every failure, then exit non-zero
                failures += 1
                print(f"FAIL {futures[future]}: {type(e).__name__}: {message(e)[:2000]}")
    print(f"{len(futures)} kernels, {failures} failures, {time.perf_counter() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
