"""Engine ids: one flat space, stable across releases, partitioned by backend."""

from __future__ import annotations

from sigdnn.errors import RegistryError

RANGES: dict[str, range] = {
    "reference": range(1000, 2000),
    "cutile": range(2000, 3000),
    "cute": range(3000, 4000),
}
OUT_OF_TREE_START = 30000


def check_engine_id(backend: str, engine_id: int, name: str) -> None:
    """In-tree backends keep to their range; plugins start at 30000."""
    allowed = RANGES.get(backend)
    if allowed is not None and engine_id not in allowed:
        raise RegistryError(
            f"builder '{name}': engine id {engine_id} is outside {backend}'s range {allowed.start}-{allowed.stop - 1}"
        )
    if allowed is None and engine_id < OUT_OF_TREE_START:
        raise RegistryError(f"builder '{name}': out-of-tree engine ids start at {OUT_OF_TREE_START}, got {engine_id}")
