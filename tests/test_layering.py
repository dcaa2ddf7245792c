"""The import graph points one way: graph -> keys -> registry -> builders -> executor -> validation -> campaign -> CLI.

Each layer is imported in a fresh interpreter; the sigdnn modules it pulls
in must all belong to it or to the layers below it (the runtime layer sits
under the builders; nothing imports the CLI).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

BASE = {"sigdnn", "sigdnn.dtypes", "sigdnn.errors", "sigdnn.schemas", "sigdnn.io"}
LAYERS: dict[str, set[str]] = {
    "sigdnn.graph": {"sigdnn.graph"},
    "sigdnn.signature_keys": {"sigdnn.graph", "sigdnn.signature_keys"},
    "sigdnn.runtime": {"sigdnn.graph", "sigdnn.runtime"},
    "sigdnn.registry": {"sigdnn.graph", "sigdnn.signature_keys", "sigdnn.runtime", "sigdnn.registry"},
    "sigdnn.plan_builders.reference": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.plan_builders",
    },
    "sigdnn.executor": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.executor",
    },
    "sigdnn.validation": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.executor",
        "sigdnn.validation",
    },
    "sigdnn.models": {"sigdnn.graph", "sigdnn.models"},
    "sigdnn.campaign": {
        "sigdnn.graph",
        "sigdnn.signature_keys",
        "sigdnn.runtime",
        "sigdnn.registry",
        "sigdnn.executor",
        "sigdnn.validation",
        "sigdnn.campaign",
    },
}


def imported_by(module: str) -> list[str]:
    code = (
        f"import json, sys, importlib; importlib.import_module({module!r}); "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'sigdnn' or m.startswith('sigdnn.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _layer_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in BASE or any(prefix == allowed for layer in LAYERS.values() for allowed in layer):
            return prefix
    return module


@pytest.mark.parametrize("layer", list(LAYERS))
def test_a_layer_imports_only_itself_and_what_lies_below(layer: str) -> None:
    allowed = LAYERS[layer] | BASE
    strays = [m for m in imported_by(layer) if _layer_of(m) not in allowed]
    assert not strays, f"{layer} pulled in {strays}"


def test_campaigns_import_ray_only_when_one_runs() -> None:
    code = (
        "import sys, sigdnn.campaign, sigdnn.campaign.runner, sigdnn.campaign.command; "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_builders_never_import_the_executor_and_import_sigdnn_imports_no_layer() -> None:
    assert not [m for m in imported_by("sigdnn.plan_builders.cutile.pointwise") if m.startswith("sigdnn.executor")]
    assert imported_by("sigdnn") == ["sigdnn"]
