"""A spec's graph files: glob patterns matched inside the spec's own folder tree, with bounded walks.

A pattern is relative to the spec's folder and cannot leave it: absolute
patterns and ``..`` are refused, symbolic links to folders are not walked
into, a matched link that points outside the tree is refused, and a walk
that visits more than ``MAX_GLOB_ENTRIES`` folder entries (``/**`` over a
whole disk) stops with a :class:`SpecError` instead of running for hours.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from sigdnn.errors import UsageError

MAX_GLOB_ENTRIES = 200_000  # folder entries the patterns of one spec may visit
MAX_GRAPH_FILES = 10_000  # graph files one spec may name
_MAGIC = re.compile(r"[*?[]")


class SpecError(UsageError):
    """The campaign spec is not valid; the message names the key."""


class _Walk:
    """Counts the folder entries a spec's patterns visit, across all of them."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.visited = 0

    def entries(self, directory: str, pattern: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as found:
                entries = []
                for entry in found:
                    self.visited += 1
                    if self.visited > MAX_GLOB_ENTRIES:
                        raise SpecError(
                            f"{self.where}: files: {pattern!r} visits more than {MAX_GLOB_ENTRIES:,} folder entries; "
                            "name the folders to search (e.g. models/*.onnx) rather than a whole tree"
                        )
                    entries.append(entry)
                return entries
        except OSError:
            return []


def graph_files(patterns: Sequence[str], base: Path, where: str) -> list[Path]:
    """The files the patterns match under ``base``, each pattern's matches sorted, in pattern order."""
    walk = _Walk(where)
    root = os.path.realpath(base)
    found: list[Path] = []
    for pattern in patterns:
        parts = _parts(pattern, base, where)
        matches = sorted(dict.fromkeys(_match(str(base), parts, walk, pattern)))
        if not matches:
            raise SpecError(f"{where}: files: {pattern!r} matches no file (relative to {base})")
        for match in matches:
            if os.path.commonpath([root, os.path.realpath(match)]) != root:
                raise SpecError(
                    f"{where}: files: {match!r} is a link to a file outside the spec's folder {base}; "
                    "copy the file into the folder"
                )
        found.extend(Path(m) for m in matches)
        if len(found) > MAX_GRAPH_FILES:
            raise SpecError(f"{where}: files: more than {MAX_GRAPH_FILES:,} graph files; split the spec")
    return found


def _parts(pattern: str, base: Path, where: str) -> list[str]:
    """The pattern's components; absolute patterns and ``..`` are refused (they leave the spec's folder)."""
    if os.path.isabs(pattern) or pattern.startswith(("/", "\\", "~")) or os.path.splitdrive(pattern)[0]:
        raise SpecError(
            f"{where}: files: {pattern!r} is an absolute path; patterns are relative to the spec's folder {base}"
        )
    parts = [p for p in re.split(r"[/\\]", pattern) if p not in ("", ".")]
    if ".." in parts:
        raise SpecError(
            f"{where}: files: {pattern!r} climbs out with '..'; patterns stay inside the spec's folder {base} "
            "(move the spec up, or the graphs down)"
        )
    if not parts:
        raise SpecError(f"{where}: files: {pattern!r} names no file")
    return parts


def _match(directory: str, parts: Sequence[str], walk: _Walk, pattern: str) -> Iterator[str]:
    """Files under ``directory`` matching ``parts`` (glob's rules: ``**`` any folders, hidden names only if named)."""
    head, rest = parts[0], parts[1:]
    if head == "**":
        if rest:
            yield from _match(directory, rest, walk, pattern)
        for entry in walk.entries(directory, pattern):
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from _match(entry.path, parts, walk, pattern)
            elif not rest:
                yield entry.path
        return
    if not _MAGIC.search(head):
        path = os.path.join(directory, head)
        if rest and os.path.isdir(path) and not os.path.islink(path):
            yield from _match(path, rest, walk, pattern)
        elif not rest and os.path.lexists(path) and not os.path.isdir(path):
            yield path
        return
    for entry in walk.entries(directory, pattern):
        if entry.name.startswith(".") and not head.startswith("."):
            continue
        if not fnmatch.fnmatchcase(entry.name, head):
            continue
        if rest:
            if entry.is_dir(follow_symlinks=False):
                yield from _match(entry.path, rest, walk, pattern)
        elif not entry.is_dir():
            yield entry.path
