"""MatMul, Gemm and Einsum -> sigdnn matmul (+ transposes, reshapes, scaling and the bias add as pointwise nodes)."""

from __future__ import annotations

import numpy as np

from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op


def matmul(node: OnnxNode, a: Value, b: Value) -> Value:
    """NumPy matmul semantics: 1-D operands get a unit dim that is dropped again, batch dims broadcast."""
    a_dims = tuple(a.shape) if isinstance(a, np.ndarray) else a.dims
    b_dims = tuple(b.shape) if isinstance(b, np.ndarray) else b.dims
    if len(a_dims) == 1:
        a = node.reshape(a, (1, *a_dims), "a_as_row")
    if len(b_dims) == 1:
        b = node.reshape(b, (*b_dims, 1), "b_as_column")
    c = node.graph.matmul(node.materialize(a, "a"), node.materialize(b, "b"), name=node.fresh("matmul"))
    dims = c.dims
    if len(a_dims) == 1:
        dims = (*dims[:-2], dims[-1])
    if len(b_dims) == 1:
        dims = dims[:-1]
    return node.reshape(c, dims, "squeeze") if dims != c.dims else c


@onnx_op("MatMul")
def onnx_matmul(node: OnnxNode) -> list[Value]:
    return [matmul(node, node.value(0), node.value(1))]


@onnx_op("Gemm")
def gemm(node: OnnxNode) -> list[Value]:
    """Y = alpha * A' B' + beta * C; a known transposed weight is transposed at import time."""
    a, b = node.value(0), node.value(1)
    if node.attr("transA", 0):
        a = node.transpose(a, (1, 0), "a_t")
    if node.attr("transB", 0):
        b = node.transpose(b, (1, 0), "b_t")
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = matmul(node, a, b)
    dtype = node.dtype(0).numpy
    if alpha != 1.0:
        y = node.pointwise("mul", y, np.array(alpha, dtype=dtype), what="alpha")
    if node.has(2) and beta != 0.0:
        c = node.value(2)
        if beta != 1.0:
            c = (
                c * np.array(beta, dtype=dtype)
                if isinstance(c, np.ndarray)
                else node.pointwise("mul", c, np.array(beta, dtype=dtype), what="beta")
            )
        y = node.pointwise("add", y, c, what="bias")
    return [y]


def einsum_terms(node: OnnxNode, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' index letters and the output's (implicit output: the letters used once, sorted)."""
    text = equation.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    terms = lhs.split(",")
    if "." in text:
        raise node.refuse(f"equation {equation!r}: an ellipsis is not supported (name every index)")
    if len(terms) != len(ranks) or not all(t.isalpha() or t == "" for t in (*terms, out)):
        raise node.refuse(f"equation {equation!r} does not name one index per dim of its {len(ranks)} operand(s)")
    for term, rank in zip(terms, ranks):
        if len(term) != rank or len(set(term)) != len(term):
            raise node.refuse(f"equation {equation!r}: term {term!r} must name each of {rank} dims once "
                              "(a repeated index, a diagonal, is not supported)")  # fmt: skip
    if not arrow:
        used = "".join(terms)
        out = "".join(sorted(c for c in set(used) if used.count(c) == 1))
    if len(set(out)) != len(out) or not set(out) <= set("".join(terms)):
        raise node.refuse(f"equation {equation!r}: output {out!r} must name input indices, each once")
    return terms, out


def sum_within(node: OnnxNode, v: Value, term: str, alone: list[str]) -> tuple[Value, str]:
    """v summed over the indices ``alone`` (a reduction), those axes dropped; and the term left."""
    axes = tuple(i for i, c in enumerate(term) if c in alone)
    y = node.graph.reduction(node.materialize(v, "summed_in"), "add", axes=axes, name=node.fresh("sum"))
    kept = [d for i, d in enumerate(y.dims) if i not in axes]
    return node.reshape(y, kept or (1,), "drop_summed"), "".join(c for c in term if c not in alone)


@onnx_op("Einsum")
def einsum(node: OnnxNode) -> list[Value]:
    """A transpose (one operand) or a batched matmul (two): operands permuted to (batch, free, summed) and
    (batch, summed, free), flattened to one matmul, and the product reshaped and permuted to the output. An index
    only one operand names and the output drops is summed by a reduction first."""
    equation = str(node.attr("equation", ""))
    count = len(node.proto.input)
    if count not in (1, 2):
        raise node.refuse(f"{count} operands; supported: 1 or 2")
    dims = [node.dims(i) for i in range(count)]
    terms, out = einsum_terms(node, equation, [len(d) for d in dims])
    size: dict[str, int] = {}
    for term, ds in zip(terms, dims):
        for c, d in zip(term, ds):
            if size.setdefault(c, d) != d:
                raise node.refuse(f"equation {equation!r}: index {c!r} is {size[c]} in one operand, {d} in another")
    letters = "".join(terms)
    values = [node.value(i) for i in range(count)]
    for i, term in enumerate(terms):  # an index summed within one operand: a reduction first
        alone = [c for c in term if c not in out and letters.count(c) == 1]
        if alone:
            values[i], terms[i] = sum_within(node, values[i], term, alone)
    if count == 1:
        return [node.transpose(values[0], [terms[0].index(c) for c in out])]
    a_term, b_term = terms
    batch = [c for c in out if c in a_term and c in b_term]
    left = [c for c in out if c in a_term and c not in b_term]
    right = [c for c in out if c in b_term and c not in a_term]
    summed = [c for c in a_term if c in b_term and c not in out]
    a = node.transpose(values[0], [a_term.index(c) for c in (*batch, *left, *summed)], "a_order")
    b = node.transpose(values[1], [b_term.index(c) for c in (*batch, *summed, *right)], "b_order")
    batch_dims = [size[c] for c in batch]
    m, k, n = (int(np.prod([size[c] for c in part])) for part in (left, summed, right))
    a = node.reshape(a, (*batch_dims, m, k), "a_matrix")
    b = node.reshape(b, (*batch_dims, k, n), "b_matrix")
    c = node.reshape(matmul(node, a, b), [size[c] for c in (*batch, *left, *right)] or (1,), "product")
    order = "".join((*batch, *left, *right))
    return [node.transpose(c, [order.index(ch) for ch in out], "out_order")]
