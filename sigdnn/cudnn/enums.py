"""cuDNN-frontend's Python enums by their names and members, and the data types they mean to sigdnn.

The members are those ``cudnn`` exposes (``cudnn.data_type.HALF``,
``cudnn.heur_mode.A`` ...) so code written against cuDNN-frontend uses them
unchanged. Data types sigdnn has no counterpart for (INT8x4, FP4_E2M1 ...)
exist as members and are refused, naming the member, when a tensor uses one.
"""

from __future__ import annotations

import enum

from sigdnn.dtypes import DataType
from sigdnn.errors import UsageError


class data_type(enum.Enum):
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    HALF = "HALF"
    INT8 = "INT8"
    INT32 = "INT32"
    INT8x4 = "INT8x4"
    UINT8 = "UINT8"
    UINT8x4 = "UINT8x4"
    INT8x32 = "INT8x32"
    BFLOAT16 = "BFLOAT16"
    INT64 = "INT64"
    BOOLEAN = "BOOLEAN"
    FP8_E4M3 = "FP8_E4M3"
    FP8_E5M2 = "FP8_E5M2"
    FAST_FLOAT_FOR_FP8 = "FAST_FLOAT_FOR_FP8"
    FP8_E8M0 = "FP8_E8M0"
    FP4_E2M1 = "FP4_E2M1"
    INT4 = "INT4"
    NOT_SET = "NOT_SET"


_SIGDNN = {
    data_type.FLOAT: DataType.FLOAT32,
    data_type.DOUBLE: DataType.FLOAT64,
    data_type.HALF: DataType.FLOAT16,
    data_type.BFLOAT16: DataType.BFLOAT16,
    data_type.INT8: DataType.INT8,
    data_type.UINT8: DataType.UINT8,
    data_type.INT32: DataType.INT32,
    data_type.INT64: DataType.INT64,
    data_type.BOOLEAN: DataType.BOOL,
    data_type.FP8_E4M3: DataType.FP8_E4M3,
    data_type.FP8_E5M2: DataType.FP8_E5M2,
}
_CUDNN = {v: k for k, v in _SIGDNN.items()}


def to_sigdnn(value: data_type | DataType | str | None, where: str) -> DataType | None:
    """A cuDNN data type (or anything ``sigdnn.dtypes.as_data_type`` reads, e.g. a torch dtype) as sigdnn's; NOT_SET -> None."""
    if value is None or value is data_type.NOT_SET:
        return None
    if isinstance(value, data_type):
        found = _SIGDNN.get(value)
        if found is None:
            raise NotImplementedError(f"{where}: cudnn.data_type.{value.name} has no sigdnn counterpart")
        return found
    from sigdnn.dtypes import as_data_type

    try:
        return as_data_type(value)
    except (KeyError, ValueError, TypeError) as e:
        raise UsageError(f"{where}: {value!r} is not a data type: {e}") from None


def to_cudnn(value: DataType | None) -> data_type:
    """sigdnn's data type as cuDNN's (None -> NOT_SET)."""
    return data_type.NOT_SET if value is None else _CUDNN[value]


class heur_mode(enum.Enum):
    A = "A"
    B = "B"
    FALLBACK = "FALLBACK"
    OPENSOURCE = "OPENSOURCE"


class norm_forward_phase(enum.Enum):
    INFERENCE = "INFERENCE"
    TRAINING = "TRAINING"
    NOT_SET = "NOT_SET"


class reduction_mode(enum.Enum):
    ADD = "add"
    MUL = "mul"
    MIN = "min"
    MAX = "max"
    AMAX = "amax"
    AVG = "avg"
    NORM1 = "norm1"
    NORM2 = "norm2"
    MUL_NO_ZEROS = "mul_no_zeros"
    NOT_SET = "NOT_SET"


class build_plan_policy(enum.Enum):
    HEURISTICS_CHOICE = "HEURISTICS_CHOICE"
    ALL = "ALL"


class convolution_mode(enum.Enum):
    CONVOLUTION = "CONVOLUTION"
    CROSS_CORRELATION = "CROSS_CORRELATION"


class tensor_reordering(enum.Enum):
    NONE = "NONE"
    INT8x32 = "INT8x32"
    F16x16 = "F16x16"
    F8_128x4 = "F8_128x4"


class numerical_note(enum.Enum):
    TENSOR_CORE = "TENSOR_CORE"
    DOWN_CONVERT_INPUTS = "DOWN_CONVERT_INPUTS"
    REDUCED_PRECISION_REDUCTION = "REDUCED_PRECISION_REDUCTION"
    FFT = "FFT"
    NONDETERMINISTIC = "NONDETERMINISTIC"
    WINOGRAD = "WINOGRAD"
    WINOGRAD_TILE_4x4 = "WINOGRAD_TILE_4x4"
    WINOGRAD_TILE_6x6 = "WINOGRAD_TILE_6x6"
    WINOGRAD_TILE_13x13 = "WINOGRAD_TILE_13x13"
    STRICT_NAN_PROP = "STRICT_NAN_PROP"


class behavior_note(enum.Enum):
    RUNTIME_COMPILATION = "RUNTIME_COMPILATION"
    REQUIRES_FILTER_INT8x32_REORDER = "REQUIRES_FILTER_INT8x32_REORDER"
    REQUIRES_BIAS_INT8x32_REORDER = "REQUIRES_BIAS_INT8x32_REORDER"
    SUPPORTS_CUDA_GRAPH_NATIVE_API = "SUPPORTS_CUDA_GRAPH_NATIVE_API"
    CUBLASLT_DEPENDENCY = "CUBLASLT_DEPENDENCY"


class diagonal_alignment(enum.Enum):
    TOP_LEFT = "TOP_LEFT"
    BOTTOM_RIGHT = "BOTTOM_RIGHT"


class attention_implementation(enum.Enum):
    AUTO = "AUTO"
    COMPOSITE = "COMPOSITE"
    UNIFIED = "UNIFIED"


class scalar_type(enum.Enum):
    RUNTIME_PARAM = "RUNTIME_PARAM"
    COMPILE_TIME_CONST = "COMPILE_TIME_CONST"


class reshape_mode(enum.Enum):
    VIEW_ONLY = "VIEW_ONLY"
    LOGICAL = "LOGICAL"
