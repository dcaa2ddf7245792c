"""Compile the benchmark's norm kernels for sm_90 on a CPU and read their cubins: registers, stack, SASS mix.

GPU time is scarce; tileiras runs anywhere. Each launch of ``gpu_cutile.py``'s
norm shapes (16384 x 4096 bf16 rows, NHWC batchnorm) is exported at the
default configuration and at each ``norm_variants`` label given, with the
array constraints cuTile's launch derives from the views (stride 1 where
the stride is 1, 16-divisible extents and strides, 16-byte aligned bases).
Per kernel: registers and stack frame from ``.nv.info``, shared memory, and
(with ``nvdisasm`` on PATH) counts of the instructions that matter for a
memory-bound row kernel. With the ``.gpu/tile`` payload unpacked in DIR
(``tar xJf .gpu/tile/payload.tar.xz -C DIR``) and a Python 3.12 with numpy,
ml_dtypes, attrs, flatbuffers and typing_extensions:

    PATH=DIR/nvidia/cu13/bin:$PATH PYTHONPATH=$PWD:DIR python3.12 benchmarks/cutile_offline_norms.py \\
        layernorm default,8192o4chan --out /tmp/cubins

Not run on the device: it needs the compiler, not a GPU (torch is stubbed).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import importlib.util
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import types

sys.modules.setdefault("torch", types.ModuleType("torch"))  # gpu_cutile imports torch; only its graphs are used
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cuda.tile as ct  # noqa: E402
import gpu_cutile as gc  # noqa: E402
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, export_kernel  # noqa: E402

from sigdnn.plan_builders.cutile import batchnorm, norms, softmax  # noqa: E402

CT = {"float32": ct.float32, "float16": ct.float16, "bfloat16": ct.bfloat16, "float64": ct.float64}
BUILDERS = {"softmax": softmax.CutileSoftmaxBuilder, "layernorm": norms.CutileLayernormBuilder,
            "rmsnorm": norms.CutileRmsnormBuilder, "layernorm_backward": norms.CutileLayernormBackwardBuilder,
            "rmsnorm_backward": norms.CutileRmsnormBackwardBuilder, "batchnorm": batchnorm.CutileBatchnormBuilder}  # fmt: skip
COUNTED = ("LDG", "STG", "UTMALDG", "UTMASTG", "LDL", "STL", "LDS", "STS", "BAR", "SHFL", "MUFU", "FADD", "FMUL",
           "FFMA", "FSETP", "FSEL", "FMNMX", "BRA")  # fmt: skip


def elf_info(blob: bytes) -> dict[str, int]:
    """Registers (EIATTR_REGCOUNT) and stack frame (EIATTR_FRAME_SIZE) from .nv.info, shared memory bytes."""
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx][4]
    out: dict[str, int] = {}
    for name_at, _, _, _, off, size, *_ in sections:
        name = blob[names + name_at : blob.index(b"\0", names + name_at)].decode()
        if name.startswith(".nv.info"):
            p = off
            while p < off + size:
                fmt, attr = blob[p], blob[p + 1]
                if fmt == 4:
                    length = struct.unpack_from("<H", blob, p + 2)[0]
                    if attr in (0x11, 0x2F) and length >= 8:
                        key = "frame" if attr == 0x11 else "regs"
                        out[key] = max(out.get(key, 0), struct.unpack_from("<I", blob, p + 8)[0])
                    p += 4 + length
                else:
                    p += 4 if fmt in (2, 3) else 2
        elif name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved"):
            out["smem"] = size
    return out


def constraint(shape: tuple[int, ...], strides: tuple[int, ...], dtype: str) -> ArrayConstraint:
    """What cuTile's launch derives for a view of this shape and strides with a 16-byte aligned base."""
    return ArrayConstraint(CT[dtype], len(shape), index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                           may_alias_internally=False, base_addr_divisible_by=16,
                           stride_constant=tuple(1 if s == 1 else None for s in strides),
                           shape_divisible_by=tuple(16 if d % 16 == 0 else 1 for d in shape),
                           stride_divisible_by=tuple(16 if s % 16 == 0 else 1 for s in strides))  # fmt: skip


def compile_one(label: str, text: str, views: list[tuple[tuple[int, ...], tuple[int, ...], str]], folder: str) -> str:
    """Export one kernel to a cubin under ``folder`` (beside its source and SASS) and describe it in one line."""
    stem = os.path.join(folder, re.sub("[^A-Za-z0-9_]", "_", label))
    with open(stem + ".py", "w") as f:
        f.write("import cuda.tile as ct\n" + text)
    spec = importlib.util.spec_from_file_location(os.path.basename(stem), stem + ".py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sig = KernelSignature([constraint(*v) for v in views], CallingConvention.cutile_python_v1())
    out = io.BytesIO()
    export_kernel(module.kernel, [sig], out, gpu_code="sm_90", output_format="cubin")
    blob = out.getvalue()
    with open(stem + ".cubin", "wb") as f:
        f.write(blob)
    line = f"{label}: " + " ".join(f"{k}={v}" for k, v in sorted(elf_info(blob).items()))
    if shutil.which("nvdisasm"):
        sass = subprocess.run(["nvdisasm", "-c", stem + ".cubin"], capture_output=True, text=True, check=True).stdout
        with open(stem + ".sass", "w") as f:
            f.write(sass)
        ops = collections.Counter(
            m.split(".")[0] for m in re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", sass)
        )
        line += " " + " ".join(f"{k}={ops[k]}" for k in COUNTED if ops[k]) + f" total={sum(ops.values())}"
    return line


def launches_of(kind: str) -> list[tuple[str, list[tuple[tuple[int, ...], tuple[int, ...], str]]]]:
    """(kernel text, [(shape, strides, dtype) of each argument]) of every launch of the benchmark's node."""
    g = gc._norm_graph(kind)
    node = g.nodes[0]
    ports = node.op.ports()
    launches, _ = BUILDERS[kind]().launches(node, g)
    found = []
    for launch in launches:
        views = [(a.shape, a.strides, a.dtype if a.buffer.startswith("@") else g.dtype_of(g.tensors[ports[a.buffer]]).name.lower())
                 for a in launch.args]  # fmt: skip
        found.append((launch.source.text, views))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", help="comma-separated ops of gpu_cutile.NORM_KINDS")
    parser.add_argument("variants", nargs="?", default="default", help="'default' and norm_variants labels")
    parser.add_argument("--out", required=True, help="folder for the sources, cubins and SASS")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cols", type=int, default=gc.NORM_COLS, help="row width of the row ops (rows: 16384)")
    args = parser.parse_args()
    gc.NORM_COLS = args.cols
    kinds = args.kinds.split(",")
    table = gc.norm_variants()
    saved = gc.saved_configs()
    todo = []
    try:
        for label in args.variants.split(","):
            for direction, configs in table.items():
                if label != "default":
                    if label not in configs:
                        continue
                    gc._set_config(direction, configs[label])
                for kind in gc.NORM_KINDS[direction]:
                    if kind in kinds:
                        todo += [(f"{kind}[{label}]#{i}", *la) for i, la in enumerate(launches_of(kind))]
                gc.restore_configs(saved)
    finally:
        gc.restore_configs(saved)
    os.makedirs(args.out, exist_ok=True)
    return compile_all(todo, args.jobs, args.out)


def compile_all(todo: list[tuple[str, str, object]], jobs: int, out: str) -> int:
    """Compile every (label, kernel text, views) in parallel and print each report; 1 if any failed."""
    failures = 0
    with cf.ProcessPoolExecutor(jobs) as pool:
        futures = {pool.submit(compile_one, label, text, views, out): label for label, text, views in todo}
        for future in cf.as_completed(futures):
            try:
                print(future.result(), flush=True)
            except Exception as e:  # report every kernel, then exit non-zero
                failures += 1
                print(f"FAIL {futures[future]}: {type(e).__name__}: {str(e)[:3000]}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
