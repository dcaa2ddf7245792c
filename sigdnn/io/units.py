"""Byte counts in human units, both ways: "1.5 GiB" out, "4GiB" / "512M" / "1e9" in."""

from __future__ import annotations

import re

_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_FACTORS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1000**4,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?(?:e\d+)?)\s*([a-z]*)\s*")


def format_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``; exact counts below 1 KiB ("12 bytes")."""
    if n < 1024:
        return f"{n} byte" if n == 1 else f"{n} bytes"
    value, unit = float(n), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{value:.3g} {_UNITS[unit]}"


def parse_bytes(text: str) -> int:
    """A size as users type it: ``"4GiB"``, ``"4G"`` (binary), ``"4GB"`` (decimal), ``"1e9"``.

    Raises ValueError with the accepted forms for anything else.
    """
    match = _SIZE.fullmatch(text.lower())
    if match is None or match.group(2) not in _FACTORS:
        raise ValueError(f"{text!r} is not a size; write e.g. 4096, 512M, 4GiB or 1.5GB")
    number = float(match.group(1)) if any(c in match.group(1) for c in ".e") else int(match.group(1))
    return int(number * _FACTORS[match.group(2)])
