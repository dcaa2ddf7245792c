"""The pointwise methods of pygraph: cuDNN-frontend's method names and keywords -> sigdnn's pointwise modes.

One table row per method: the sigdnn mode, the tensor keywords in cuDNN's
order (backward modes take ``loss`` (dy) then ``input`` (x), as sigdnn's
(dy, x)), and the keywords that become the mode's parameters. Every sigdnn
pointwise mode has a row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sigdnn.graph.ops.pointwise import MODES

RELU = {"negative_slope": "relu_lower_clip_slope", "lower_clip": "relu_lower_clip", "upper_clip": "relu_upper_clip"}
LEAKY = {"negative_slope": "relu_lower_clip_slope"}
SWISH = {"swish_beta": "swish_beta"}
UNARY, BINARY, PAIR, BACKWARD, COMPARE = (
    ("input",),
    ("a", "b"),
    ("input0", "input1"),
    ("loss", "input"),
    (
        "input",
        "comparison",
    ),
)

# method -> (sigdnn mode, tensor keywords, keyword -> mode parameter)
METHODS: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "add": ("add", BINARY, {}),
    "bias": ("add", ("input", "bias"), {}),
    "sub": ("sub", BINARY, {}),
    "mul": ("mul", BINARY, {}),
    "scale": ("mul", ("input", "scale"), {}),
    "div": ("div", BINARY, {}),
    "add_square": ("add_square", BINARY, {}),
    "max": ("max", PAIR, {}),
    "min": ("min", PAIR, {}),
    "mod": ("mod", PAIR, {}),
    "pow": ("pow", PAIR, {}),
    "logical_and": ("logical_and", BINARY, {}),
    "logical_or": ("logical_or", BINARY, {}),
    "logical_not": ("logical_not", UNARY, {}),
    **{f"cmp_{c}": (f"cmp_{c}", COMPARE, {}) for c in ("eq", "neq", "gt", "ge", "lt", "le")},
    **{m: (m, UNARY, {}) for m in ("abs", "neg", "ceil", "floor", "sqrt", "rsqrt", "reciprocal", "exp", "log")},
    **{m: (m, UNARY, {}) for m in ("sin", "cos", "tan", "erf", "identity")},
    "relu": ("relu_fwd", UNARY, RELU),
    "leaky_relu": ("relu_fwd", UNARY, LEAKY),
    "relu_backward": ("relu_bwd", BACKWARD, RELU),
    "leaky_relu_backward": ("relu_bwd", BACKWARD, LEAKY),
    "swish": ("swish_fwd", UNARY, SWISH),
    "swish_backward": ("swish_bwd", BACKWARD, SWISH),
    **{a: (f"{a}_fwd", UNARY, {}) for a in ("tanh", "sigmoid", "elu", "gelu", "gelu_approx_tanh", "softplus")},
    **{f"{a}_backward": (f"{a}_bwd", BACKWARD, {}) for a in ("tanh", "sigmoid", "elu", "gelu", "gelu_approx_tanh")},
    "softplus_backward": ("softplus_bwd", BACKWARD, {}),
    "gen_index": ("gen_index", UNARY, {"axis": "axis"}),
    "binary_select": ("binary_select", ("input0", "input1", "mask"), {}),
}
REQUIRED = {"leaky_relu": ("negative_slope",), "leaky_relu_backward": ("negative_slope",), "gen_index": ("axis",)}

assert {mode for mode, _, _ in METHODS.values()} == set(MODES), "every sigdnn pointwise mode needs a pygraph method"


def pointwise_method(method: str) -> Callable[..., Any]:
    """The pygraph method ``method``: its tensors and parameters by position or keyword, as cuDNN takes them."""
    mode, ports, params = METHODS[method]
    order = (*ports, *params)
    required = (*ports, *REQUIRED.get(method, ()))

    def call(self: Any, *args: Any, compute_data_type: Any = None, name: str = "", **kwargs: Any) -> Any:
        if len(args) > len(order):
            raise TypeError(f"{method}() takes at most {len(order)} positional arguments ({', '.join(order)})")
        given = dict(zip(order, args))
        for key, value in kwargs.items():
            if key not in order:
                raise TypeError(f"{method}() got an unexpected keyword argument '{key}'; it takes {', '.join(order)}")
            if key in given:
                raise TypeError(f"{method}() got multiple values for argument '{key}'")
            given[key] = value
        missing = [k for k in required if given.get(k) is None]
        if missing:
            raise TypeError(f"{method}() missing required argument(s): {', '.join(missing)}")
        tensors = [given[p] for p in ports]
        values = {params[k]: given[k] for k in params if given.get(k) is not None}
        return self._pointwise(method, mode, tensors, values, compute_data_type, name)

    call.__name__ = method
    call.__doc__ = f"cuDNN's {method}({', '.join(order)}): sigdnn's pointwise '{mode}'."
    return call
