"""Install tests/campaign/broken_plugin_builders.py as a plugin package: a site folder with a .dist-info."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

PLUGIN = Path(__file__).with_name("broken_plugin_builders.py")
BROKEN, GOOD = "broken.pointwise", "good.pointwise"
ENTRY_POINTS = "[sigdnn.plan_builders]\nbroken = broken_plugin_builders:builders\n"


def make_plugin_site(site: Path) -> Path:
    """``site`` holds the plugin module and its dist-info (entry point in the sigdnn.plan_builders group)."""
    info = site / "sigdnn_broken_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sigdnn-broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    shutil.copy(PLUGIN, site / PLUGIN.name)
    return site


def spec_text(engines: list[str], shapes: str, modes: str = '["add", "mul"]', shrink: int = 8) -> str:
    """A reference-backend campaign over the plugin's pointwise modes and three float dtypes."""
    return f"""
name = "broken-plugin"
backend = "reference"
engines = {engines!r}
seeds = 1
shrink = {shrink}

[[generate]]
op = "pointwise"
modes = {modes}
dtypes = ["float32", "float16", "bfloat16"]
shapes = {shapes}
""".replace("'", '"')


def planted_failure(row: dict[str, Any]) -> bool:
    """The plugin's planted rules, restated from its docstring (not imported from it): add fails past 8 columns,
    mul on odd sizes from 3, on the broken engine only."""
    if row["engine"] != BROKEN:
        return False
    shape = tuple(row["shapes"]["out"])
    if row["family"] == "pointwise[add]":
        return shape[-1] > 8
    size = math.prod(shape)
    return size % 2 == 1 and size >= 3
