"""SignatureKey: what a builder is chosen by — op, dtypes, structural traits.

Never dims or strides: those belong to a builder's applicability check, so
one key covers every shape and the registry stays small.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from sigdnn.dtypes import DataType


def short(dtypes: tuple[DataType, ...]) -> str:
    return ",".join(d.short for d in dtypes)


@attrs.frozen
class SignatureKey:
    family: ClassVar[str]
