"""Limits checked before anything is allocated, so a hostile buffer stays cheap."""

from __future__ import annotations

import attrs


@attrs.frozen
class Limits:
    """Upper bounds on what one graph may declare.

    ``max_total_bytes`` bounds the memory one run can cost: the strided spans
    of every tensor together (inputs, outputs, intermediates before reuse),
    plus, where a reference runs, the largest node's float64 scratch
    (``check_graph``'s ``reference_scratch``). Lower it to run untrusted
    graphs in a small sandbox.

    ``max_kernel_taps`` bounds time where memory does not: a kernel built
    by broadcasting two tiny inputs can have millions of taps, and a direct
    convolution does work per tap. Real kernels stay far below it (31x31,
    7x7x7, a few thousand in 1-D).

    ``max_work`` bounds time for every op: each op declares what one run
    costs (multiply-adds for a matmul or conv, elements touched for the
    rest), and the graph's total is checked at prepare, before anything
    runs. The default is minutes of float64 NumPy on a laptop.
    """

    max_tensors: int = 1 << 20
    max_nodes: int = 1 << 20
    max_rank: int = 8
    max_elements: int = 1 << 40  # per tensor, counting its strided span
    max_name_length: int = 4096
    max_scalar_bytes: int = 64
    max_total_bytes: int = 1 << 36  # all tensors of the graph together (64 GiB)
    max_kernel_taps: int = 1 << 16  # positions of one convolution kernel (product of its spatial dims)
    max_work: int = 1 << 40  # element operations of the whole graph, as each op's ``work`` counts them


DEFAULT_LIMITS = Limits()
# A GPU executor's: its builders do in seconds what the reference's ``max_work`` allows minutes for (a
# Llama decoder layer's backward is ~2^41 operations, one batch of 64 sequences of 8,192 tokens' attention ~2^43).
GPU_LIMITS = attrs.evolve(DEFAULT_LIMITS, max_work=1 << 50)
