"""A campaign spec: what to validate, read from TOML and checked before anything runs.

```toml
name = "pointwise-nightly"
backend = "gpu"                      # "gpu" (default) or "reference" (CPU plugin builders)
engines = ["cutile.pointwise"]       # builders to pin, by name or id; omit: the backend's best builder
seeds = 4                            # seeds 0..3, or a list [0, 7]
output = "campaign-results/nightly"  # relative to the spec's folder (default: campaign-results/<spec file's stem>)
retries = 3                          # re-runs of a case whose worker died
shrink = 8                           # failing generated cases to shrink (one per op / dtype / engine group)

[tolerance]                          # optional: replaces every computed tolerance
rtol = 1e-3
atol = 0.0

[[generate]]                         # op x modes x dtypes x shapes x layouts x attribute sweeps
op = "pointwise"
modes = ["add", "relu_fwd"]
dtypes = ["float16", "float32"]
shapes = [["1..4", "1..64/8"], [2, 3, 5, 7]]   # a dim: n, [n, m], "a..b", "a..b/step", "a..b*factor"
layouts = ["packed", "NHWC"]
attributes = { relu_lower_clip = [0.0, 0.5] }

[[graphs]]                           # graph files: .sdg, or any format sigdnn imports (.onnx, ...)
files = ["models/*.onnx", "block.sdg"]
```

Every mistake is a :class:`SpecError` naming the key, so a nightly job fails
at once rather than after an hour of cases.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.campaign.spec_files import SpecError, graph_files

BACKENDS = ("gpu", "reference")
DEFAULT_OUTPUT = "campaign-results"
DEFAULT_RETRIES = 3
DEFAULT_SHRINKS = 8
MAX_DIM_VALUES = 4096  # one dim's range may list at most this many values
MAX_CASES = 100_000  # cases one spec may ask for, counted before anything is expanded
_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*(?:([/*])\s*(\d+))?\s*$")
_TOP_KEYS = {"name", "backend", "engines", "seeds", "output", "retries", "shrink", "tolerance", "generate", "graphs"}
_GENERATOR_KEYS = {"op", "modes", "dtypes", "shapes", "layouts", "attributes", "compute_dtype"}


@attrs.frozen
class Generator:
    """One [[generate]] table: the cartesian product of its lists."""

    op: str
    modes: tuple[str, ...]  # empty: the op has no mode, or every mode (the recipe decides)
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    layouts: tuple[str, ...]
    attributes: tuple[tuple[str, tuple[Any, ...]], ...]
    compute_dtype: str | None = None


@attrs.frozen
class Spec:
    name: str
    backend: str
    engines: tuple[int | str | None, ...]  # None: the backend's best builder, unpinned
    seeds: tuple[int, ...]
    output: Path
    retries: int
    shrink: int
    tolerance: Tolerance | None
    generators: tuple[Generator, ...]
    files: tuple[Path, ...]


def load_spec(path: str | Path) -> Spec:
    """Read and check a spec file (paths in it are relative to its folder)."""
    from sigdnn.io import read_regular_file

    path = Path(path)
    text = bytes(read_regular_file(path, what="campaign spec", max_bytes=1 << 20)).decode("utf-8", "replace")
    return parse_spec(text, path.parent, where=str(path), default_output=f"{DEFAULT_OUTPUT}/{path.stem}")


def parse_spec(text: str, base: Path, where: str = "campaign spec", default_output: str = DEFAULT_OUTPUT) -> Spec:
    """A spec from TOML text; ``default_output`` (a file's: campaign-results/<its stem>, so two specs of one
    folder keep apart) unless it names its own."""
    toml = _toml_module()
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError as e:
        raise SpecError(f"{where}: not valid TOML: {e}") from None
    _no_unknown(data, _TOP_KEYS, where)
    backend = _choice(data.get("backend", "gpu"), BACKENDS, f"{where}: backend")
    generators = tuple(_generator(g, f"{where}: generate[{i}]") for i, g in enumerate(_tables(data, "generate", where)))
    files = tuple(
        f for i, g in enumerate(_tables(data, "graphs", where)) for f in _files(g, base, f"{where}: graphs[{i}]")
    )
    if not generators and not files:
        raise SpecError(f"{where}: no cases: add a [[generate]] table or a [[graphs]] table with files")
    return Spec(
        name=_text(data.get("name", Path(where).stem), f"{where}: name"),
        backend=backend,
        engines=_engines(data.get("engines"), f"{where}: engines"),
        seeds=_seeds(data.get("seeds", 1), f"{where}: seeds"),
        output=base / _text(data.get("output", default_output), f"{where}: output"),
        retries=_natural(data.get("retries", DEFAULT_RETRIES), f"{where}: retries"),
        shrink=_natural(data.get("shrink", DEFAULT_SHRINKS), f"{where}: shrink"),
        tolerance=_tolerance(data.get("tolerance"), f"{where}: tolerance"),
        generators=generators,
        files=files,
    )


def _toml_module() -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise SpecError("reading a campaign spec on Python 3.10 needs tomli: pip install tomli") from None
    return tomllib


# -- values ---------------------------------------------------------------------------------------
def parse_dim(value: Any, where: str) -> tuple[int, ...]:
    """The values one dim takes: n, [n, m, ...], "a..b" (inclusive), "a..b/step" or "a..b*factor"."""
    if isinstance(value, bool):
        raise SpecError(f"{where}: {value!r} is not a dim")
    if isinstance(value, int):
        values: Sequence[int] = [value]
    elif isinstance(value, list):
        values = [v for item in value for v in parse_dim(item, where)]
    elif isinstance(value, str):
        values = _range(value, where)
    else:
        raise SpecError(f"{where}: {value!r} is not a dim (give n, a list, or a range 'a..b')")
    if not values or any(v < 1 for v in values):
        raise SpecError(f"{where}: dims must be >= 1, got {value!r}")
    return tuple(dict.fromkeys(values))


def _range(text: str, where: str) -> list[int]:
    match = _RANGE.match(text)
    if match is None:
        raise SpecError(f"{where}: {text!r} is not a range; write 'a..b', 'a..b/step' or 'a..b*factor'")
    low, high, how, by = int(match[1]), int(match[2]), match[3], int(match[4] or 1)
    if low > high or by < 1 or (how == "*" and (by < 2 or low < 1)):
        raise SpecError(f"{where}: {text!r} is empty or does not grow (need a <= b, step >= 1, factor >= 2)")
    if how == "*":
        values = [low * by**i for i in range(int(math.log(high / low, by) + 1e-9) + 1)]
    else:
        values = list(range(low, high + 1, by))
    if len(values) > MAX_DIM_VALUES:
        raise SpecError(f"{where}: {text!r} lists {len(values)} values; at most {MAX_DIM_VALUES}")
    return values


def expand_shape(template: Any, where: str) -> list[tuple[int, ...]]:
    """Every shape a template gives: the cartesian product of its dims' values (counted first, see MAX_CASES)."""
    if not isinstance(template, list) or not template:
        raise SpecError(f"{where}: a shape is a non-empty list of dims, got {template!r}")
    dims = [parse_dim(dim, f"{where}[{i}]") for i, dim in enumerate(template)]
    check_case_count(math.prod(map(len, dims)), where, "shapes")
    return list(itertools.product(*dims))


def check_case_count(count: int, where: str, what: str = "cases") -> None:
    """SpecError naming the count when it is over MAX_CASES (called before anything that size is built)."""
    if count > MAX_CASES:
        raise SpecError(
            f"{where}: asks for {count:,} {what}, over the limit of {MAX_CASES:,} cases a spec may run; "
            "narrow the ranges or seeds, or split the campaign into several specs"
        )


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise SpecError(f"{where}: give a count >= 1 or a list of seeds, got {value}")
        check_case_count(value, where, "seeds")
        return tuple(range(value))
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if min(value) < 0:
            raise SpecError(f"{where}: seeds are integers >= 0, got {value}")
        return tuple(dict.fromkeys(value))
    raise SpecError(f"{where}: give a count (seeds = 4) or a non-empty list of integers, got {value!r}")


def _engines(value: Any, where: str) -> tuple[int | str | None, ...]:
    if value is None:
        return (None,)
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where}: a non-empty list of builder names or engine ids, got {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, str)) or v == "":
            raise SpecError(f"{where}: {v!r} is not a builder name or engine id")
    return tuple(dict.fromkeys(value))


def _tolerance(value: Any, where: str) -> Tolerance | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError(f"{where}: a table with atol and / or rtol")
    _no_unknown(value, {"atol", "rtol"}, where)
    if not value:
        raise SpecError(f"{where}: give atol, rtol or both")
    atol, rtol = (_number(value.get(k, 0.0), f"{where}.{k}") for k in ("atol", "rtol"))
    return Tolerance(atol, rtol)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
        raise SpecError(f"{where}: a finite number >= 0, got {value!r}")
    return float(value)


def _generator(table: Mapping[str, Any], where: str) -> Generator:
    _no_unknown(table, _GENERATOR_KEYS, where)
    if "op" not in table:
        raise SpecError(f'{where}: says no op (op = "pointwise", ...)')
    shapes = table.get("shapes")
    if shapes is None:
        raise SpecError(f'{where}: says no shapes (shapes = [["1..8", 64]])')
    if not isinstance(shapes, list) or not shapes:
        raise SpecError(f"{where}: shapes is a non-empty list of shapes")
    attributes = table.get("attributes", {})
    if not isinstance(attributes, dict):
        raise SpecError(f"{where}: attributes is a table of lists (name = [values])")
    sweeps = tuple((k, tuple(v) if isinstance(v, list) else (v,)) for k, v in attributes.items())
    if any(not values for _, values in sweeps):
        raise SpecError(f"{where}: attributes: every sweep needs at least one value")
    compute = table.get("compute_dtype")
    return Generator(
        op=_text(table["op"], f"{where}: op"),
        modes=_texts(table.get("modes", []), f"{where}: modes"),
        dtypes=_texts(table.get("dtypes", ["float32"]), f"{where}: dtypes") or ("float32",),
        shapes=_shapes(shapes, where),
        layouts=_texts(table.get("layouts", ["packed"]), f"{where}: layouts") or ("packed",),
        attributes=sweeps,
        compute_dtype=None if compute is None else _text(compute, f"{where}: compute_dtype"),
    )


def _shapes(templates: list[Any], where: str) -> tuple[tuple[int, ...], ...]:
    shapes: dict[tuple[int, ...], None] = {}
    for i, template in enumerate(templates):
        shapes.update(dict.fromkeys(expand_shape(template, f"{where}: shapes[{i}]")))
        check_case_count(len(shapes), f"{where}: shapes", "shapes")
    return tuple(shapes)


def _files(table: Mapping[str, Any], base: Path, where: str) -> list[Path]:
    _no_unknown(table, {"files"}, where)
    return graph_files(_texts(table.get("files", []), f"{where}: files"), base, where)


def _tables(data: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise SpecError(f"{where}: {key} must be an array of tables ([[{key}]])")
    return value


def _no_unknown(table: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


def _choice(value: Any, choices: Sequence[str], where: str) -> str:
    if value not in choices:
        raise SpecError(f"{where}: {value!r}; expected one of {', '.join(choices)}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(f"{where}: a non-empty string, got {value!r}")
    return value


def _texts(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise SpecError(f"{where}: a list of strings, got {value!r}")
    return tuple(dict.fromkeys(_text(v, where) for v in value))


def _natural(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{where}: an integer >= 0, got {value!r}")
    return value
