"""Install tests/campaign/broken_plugin_builders.py as a plugin package: a site folder with a .dist-info."""

from __future__ import annotations

import shutil
from pathlib import Path

PLUGIN = Path(__file__).with_name("broken_plugin_builders.py")
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
