"""Compile the gated delta rule's backward kernels for sm_90 on a CPU and print each cubin's registers and spills.

Needs the `.gpu/tile` payload's cuda-tile and tileiras (Python 3.12) and cuobjdump on PATH; no GPU. The case:
five sequences (1, 63, 64, 65, 300 tokens), 4 heads, K = V = 128, bf16 in / out, l2norm on.

    PATH=<cu13 bin>:$PATH PYTHONPATH=. COMPUTE=float16 python3.12 scripts/delta_rule_cubins.py gdn|kda [KERNEL...]
    PATCH='<python run after importing delta_rule_kernel as K, before building>' ...   # an experiment's change
"""

import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, "tests/gpu")
import compile_offline as co
from cuda.tile.compilation import CallingConvention, KernelSignature, export_kernel

import sigdnn
import sigdnn.plan_builders.cutile.delta_rule_kernel as K  # noqa: F401 (the patch's name)
from sigdnn.registry import DEFAULT_REGISTRY

exec(os.environ.get("PATCH", ""))
kind, which = sys.argv[1], sys.argv[2:]
lengths, dims = (1, 63, 64, 65, 300), 128
g = sigdnn.Graph(kind, io_dtype="bfloat16", compute_dtype=os.environ.get("COMPUTE", "float16"))
t = {n: g.tensor(n, (sum(lengths), 4, dims)) for n in ("q", "k", "v", "d_o")}
gate = g.tensor("g", (sum(lengths), 4, dims) if kind == "kda" else (sum(lengths), 4), dtype="float32")
beta, cu = g.tensor("beta", (sum(lengths), 4)), g.tensor("cu", (len(lengths) + 1,), dtype="int32")
h0 = g.tensor("h0", (len(lengths), 4, dims, dims), dtype="float32")
outs = getattr(g, f"{kind}_bwd")(t["q"], t["k"], t["v"], gate, beta, cu, h0, t["d_o"], None, use_qk_l2norm=True)
for o in outs:
    o.set_output(True)
node = g.nodes[-1]
builder = next(b for b in DEFAULT_REGISTRY.builders() if b.name == f"cutile.{node.op.kind}")
launches, _ = builder.launches(node, g)
ports, folder = node.op.ports(), tempfile.mkdtemp()
for launch in launches:
    if which and launch.source.prefix not in which:
        continue
    dtypes = [str(g.dtype_of(g.tensors[ports[a.buffer]])) if a.buffer in ports else a.dtype for a in launch.args]
    signature = KernelSignature([co.strided(co.CT[d], 1) for d in dtypes], CallingConvention.cutile_python_v1())
    path = f"{folder}/{launch.source.prefix}.py"
    with open(path, "w") as f:
        f.write("import cuda.tile as ct\n" + launch.source.text)
    spec = importlib.util.spec_from_file_location(launch.source.prefix, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    started, cubin = time.time(), io.BytesIO()
    export_kernel(module.kernel, [signature], cubin, gpu_code="sm_90", output_format="cubin")
    with open(f"{path}.cubin", "wb") as f:
        f.write(cubin.getvalue())
    usage = subprocess.run(["cuobjdump", "-res-usage", f"{path}.cubin"], capture_output=True, text=True).stdout
    print(launch.source.prefix, f"{time.time() - started:.0f}s", *(u.strip() for u in usage.splitlines() if "REG" in u))
