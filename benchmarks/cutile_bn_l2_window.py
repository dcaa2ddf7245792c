"""Batchnorm training forward and the L2: access-policy windows around sigdnn's own cuTile launches.

sigdnn's elementwise pass reads x last tile first, so it finds in L2 the
bands the partial pass read last (gpu_cutile_2026-12-02b.md: about 5.7 us
of the node's 86 us). But that pass also writes y, and y's lines take L2
places as fast as x's are read, so about half of the x left in L2 is
evicted before the pass reaches it. A CUDA access-policy window (a stream
attribute, set on the host around a launch; the kernels are unchanged)
can mark y's lines streaming (evicted first) or keep x's tail persisting in
a set-aside part of the L2. ``gpu_cutile.py --bn-y-streaming`` and
``--bn-l2-windows`` hold one window over all three launches
(gpu_cutile_2026-12-01f.md, 01h.md); here each variant runs sigdnn's three
launches with its own windows (``gpu_cutile.access_window``) set before a
launch and cleared after it:

* ``y-streaming``: y streaming during the elementwise pass;
* ``x-head+y``: the head of x (all but its last ``keep`` MB) streaming
  during the partial pass as well;
* ``x-persisting``: the last ``keep`` MB of x persisting (a set-aside L2
  of that size) during the partial pass, y streaming after;
* ``normal``: a window over y with normal properties (what setting and
  clearing a window costs).

Each variant's y is checked against sigdnn's, then the node is timed
interleaved with sigdnn's (median of 15 samples of 10 runs), and once more
as CUDA graphs captured with the windows. On the H200:

    python3 benchmarks/cutile_bn_l2_window.py [--keep MB,MB]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import gpu_cutile as gc
import torch
from cutile_bn_stats_pass import NODE_BYTES, X_BYTES, Node, timed

from sigdnn.plan_builders.cutile.kernels import CUTILE

MB = 1 << 20


def device_facts() -> str:
    """The L2's size, the most it can set aside for persisting lines, the widest access-policy window."""
    from cuda.bindings import runtime as rt

    names = ("L2CacheSize", "MaxPersistingL2CacheSize", "MaxAccessPolicyWindowSize")
    got = {n: rt.cudaDeviceGetAttribute(getattr(rt.cudaDeviceAttr, f"cudaDevAttr{n}"), 0)[1] for n in names}
    return ", ".join(f"{n} {v / MB:.1f} MiB" for n, v in got.items())


class Runs:
    """The node's launches with the windows of one variant, on the node's stream or another."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.stream, _, _, args = node.calls[0]
        self.x_ptr = args[0].ptr
        self.y_ptr = node.y.data_ptr()

    def sequence(self, windows: tuple, stream: int | None = None) -> Callable[[], None]:
        """Launch partial, finalize, elementwise; ``windows[i]`` (kwargs of ``access_window`` or None) around
        launch i."""
        on = self.stream if stream is None else stream
        handle = int(getattr(on, "handle", on))
        calls = [(on, *call[1:]) for call in self.node.calls]

        def run() -> None:
            for call, w in zip(calls, windows, strict=True):
                if w:
                    gc.access_window(handle, **w)
                CUTILE.launch(*call)
                if w:
                    gc.access_window(handle)

        return run

    def variants(self, keep_mb: int) -> dict[str, tuple]:
        x, keep = self.x_ptr, keep_mb * MB
        y = {"base": self.y_ptr, "num_bytes": X_BYTES, "hit": "Streaming", "miss": "Streaming"}
        head = {"base": x, "num_bytes": X_BYTES - keep, "hit": "Streaming", "miss": "Streaming"}
        tail = {"base": x + X_BYTES - keep, "num_bytes": keep, "hit": "Persisting", "miss": "Streaming"}
        return {
            "y-streaming": (None, None, y),
            f"x-head{keep_mb}+y": (head, None, y),
            f"x-persisting{keep_mb}": (tail, None, y),
            "normal": (None, None, {**y, "hit": "Normal", "miss": "Normal"}),
        }


def checked(node: Node, table: dict[str, Callable[[], None]]) -> dict[str, Callable[[], None]]:
    """The variants whose y matches sigdnn's after one run (each reported)."""
    kept = {}
    for name, run in table.items():
        node.y.zero_()
        try:
            run()
            torch.cuda.synchronize()
        except Exception as e:  # report every variant
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        dy = (node.y.float() - node.want_y.float()).abs().max().item()
        print(f"{name}: largest |y| difference from sigdnn's {dy}", flush=True)
        kept[name] = run
    return kept


def graphed(make: Callable[[int], Callable[[], None]]) -> Callable[[], None]:
    """A CUDA graph of ``make(stream)``'s launches, captured on a side stream."""
    side = torch.cuda.Stream()
    run = make(side.cuda_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        run()
    return graph.replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", default="24,36", help="MB of x's tail kept (comma-separated)")
    args = parser.parse_args()
    node = Node()
    runs = Runs(node)
    print(device_facts(), f"stream {runs.stream!r}", flush=True)
    plain = (None, None, None)
    ways = {"sigdnn": plain}
    for keep in map(int, args.keep.split(",")):
        ways.update(runs.variants(keep))
    persisting = {n: w for n, w in ways.items() if "persisting" in n}
    table = {n: runs.sequence(w) for n, w in ways.items() if n not in persisting}
    with node.stream():
        timed(checked(node, table), "node in sequence (rate: x read + y written)", NODE_BYTES)
        graphs = {}
        for name in [n for n in ways if n not in persisting and n != "normal"]:
            try:
                graphs[f"graph {name}"] = graphed(lambda s, w=ways[name]: runs.sequence(w, stream=s))
            except Exception as e:  # report every variant
                print(f"graph {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
        timed(checked(node, graphs), "node as a CUDA graph", NODE_BYTES)
        gc.persisting_set_aside(max(int(k) for k in args.keep.split(",")) * MB)
        table = {n: runs.sequence(ways[n]) for n in ("sigdnn", "y-streaming", *persisting)}
        timed(checked(node, table), "with a persisting L2 set aside", NODE_BYTES)


if __name__ == "__main__":
    main()
