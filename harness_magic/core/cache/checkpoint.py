"""The checkpoint directory's manifest: its versions, validation before any file is touched, writing it.

Contract: :func:`read_manifest` and :func:`validated_rows` accept only a
manifest of a version in :data:`READABLE_CHECKPOINT_VERSIONS` whose every
entry is a valid, unique handle with either a plain file inside the
checkpoint (a regular file, not a link, whose suffix matches a known spill
format, with a digest of 64 hex characters) or an engine definition of short
strings; anything else raises :class:`CheckpointError` naming the first bad
entry. Nothing here decodes a value: :class:`SessionCache` reads the files,
each checked by the digest its row names (:func:`digest_algorithm`).
:func:`write_manifest` writes atomically (temporary file, then ``os.replace``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from harness_magic.core.cache.digest import DIGEST_ALGORITHMS, DIGEST_SIZE
from harness_magic.core.cache.engine_value import DEFINITION_MAX_CHARS
from harness_magic.core.cache.errors import CheckpointError
from harness_magic.core.cache.names import sanitize_identifier
from harness_magic.core.cache.spill import SPILL_FORMATS, format_for_path

__all__ = [
    "CHECKPOINT_MANIFEST",
    "CHECKPOINT_VERSION",
    "READABLE_CHECKPOINT_VERSIONS",
    "MANIFEST_MAX_BYTES",
    "MANIFEST_KIND",
    "read_manifest",
    "validated_rows",
    "digest_algorithm",
    "write_manifest",
    "link_or_copy",
]

CHECKPOINT_MANIFEST = "manifest.json"
"""File in a checkpoint directory listing handles, formats, snapshots and provenance."""
CHECKPOINT_VERSION = 4
"""Bumped when the manifest layout changes; :meth:`SessionCache.load` refuses versions outside
:data:`READABLE_CHECKPOINT_VERSIONS`.

Version 2: no pickle format, JSON metadata in every file, a BLAKE2b digest per file (``"blake2b"``).
Version 3: a SHA-256 digest per file (``"sha256"``), hashed 2.5x faster on CPUs with SHA extensions.
Version 4: striped SHA-256 digests (``"sha256-stripes"``, checked on parallel threads while the file is
read); frames are Arrow IPC files. A row carried over from an older checkpoint keeps its digest."""
READABLE_CHECKPOINT_VERSIONS = (2, 3, 4)
"""Versions :meth:`SessionCache.load` reads: each row is checked by the digest it names (``"blake2b"`` in
version 2, ``"sha256"`` in version 3)."""
MANIFEST_MAX_BYTES = 64 * 1024**2
"""A manifest larger than this is refused: snapshots are small, so it is not a real checkpoint."""
MANIFEST_KIND = "harness_magic.session_cache"
"""The manifest's ``kind``: a JSON file of another kind is not a checkpoint."""
_DIGEST_CHARS = frozenset("0123456789abcdef")


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the checkpoint in ``root`` (not a link), if it is one of a readable version."""
    path = root / CHECKPOINT_MANIFEST
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MANIFEST_MAX_BYTES + 1)
        if len(data) > MANIFEST_MAX_BYTES:
            raise ValueError(f"over {MANIFEST_MAX_BYTES} bytes")
        manifest = json.loads(data.decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"no readable checkpoint manifest in {root}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("kind") != MANIFEST_KIND \
            or manifest.get("version") not in READABLE_CHECKPOINT_VERSIONS \
            or not isinstance(manifest.get("entries"), list):
        *rest, last = (str(v) for v in READABLE_CHECKPOINT_VERSIONS)
        versions = f"{', '.join(rest)} or {last}" if rest else last
        raise CheckpointError(f"{path} is not a version {versions} cache checkpoint")
    for key in ("hot_count", "memory_budget_bytes"):
        if type(manifest.get(key)) is not int or manifest[key] < 0:
            raise CheckpointError(f"{path}: {key} must be a non-negative integer, got {manifest.get(key)!r}")
    return manifest


def digest_algorithm(row: dict[str, Any]) -> str:
    """The digest a manifest row carries: the first of :data:`DIGEST_ALGORITHMS` it names (striped SHA-256 first)."""
    return next((algorithm for algorithm in DIGEST_ALGORITHMS if algorithm in row), DIGEST_ALGORITHMS[0])


def validated_rows(root: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every manifest entry checked before any file is touched: an error names the first bad entry.

    Names must be valid handles; files plain basenames of regular files (no
    links) inside ``root`` whose suffix matches a known format; each with a
    striped SHA-256 (version 3: SHA-256; version 2: BLAKE2b) digest. Snapshots must be JSON objects.
    """
    rows, seen = [], set()
    for position, row in enumerate(manifest["entries"]):
        label = f"entry {position}"
        if not isinstance(row, dict):
            raise CheckpointError(f"checkpoint {root}: {label} is not an object")
        name = row.get("name")
        if not isinstance(name, str) or sanitize_identifier(name) != name or name in seen:
            raise CheckpointError(f"checkpoint {root}: {label} has name {name!r}, which is not a valid, unique "
                                  "handle (letters, digits and _ only)", handle=str(name))
        label = f"handle {name!r}"
        if "engine" in row:
            rows.append(_validated_engine_row(root, row, label))
            seen.add(name)
            continue
        file = row.get("file")
        if not isinstance(file, str) or not file or os.path.basename(file) != file or file in (".", "..") \
                or "\x00" in file or os.sep in file:
            raise CheckpointError(f"checkpoint {root}: {label} names file {file!r}; only plain file names inside "
                                  "the checkpoint directory are allowed", handle=name)
        fmt = row.get("format")
        if fmt not in SPILL_FORMATS:
            raise CheckpointError(f"checkpoint {root}: {label} has format {fmt!r}; allowed: {', '.join(SPILL_FORMATS)}"
                                  " (pickle files are never read)", handle=name)
        try:
            if format_for_path(Path(file)) != fmt:
                raise ValueError
        except ValueError:
            raise CheckpointError(f"checkpoint {root}: {label}: file {file!r} does not match format {fmt}",
                                  handle=name) from None
        digest = row.get(digest_algorithm(row))
        if not isinstance(digest, str) or len(digest) != 2 * DIGEST_SIZE or not set(digest) <= _DIGEST_CHARS:
            raise CheckpointError(f"checkpoint {root}: {label} lacks a digest ({' or '.join(DIGEST_ALGORITHMS)}: "
                                  f"{2 * DIGEST_SIZE} hex characters)", handle=name)
        try:
            info = os.lstat(root / file)
        except OSError:
            raise CheckpointError(f"checkpoint {root} lacks the file of {label} ({file})", handle=name) from None
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"checkpoint {root}: the file of {label} ({file}) is a link or not a plain file",
                                  handle=name)
        if not isinstance(row.get("snapshot"), dict) or type(row.get("size_bytes")) is not int:
            raise CheckpointError(f"checkpoint {root}: {label} has a malformed snapshot or size", handle=name)
        for key in ("turn", "tool"):
            if row.get(key) is not None and type(row[key]) is not (int if key == "turn" else str):
                raise CheckpointError(f"checkpoint {root}: {label} has a malformed {key}", handle=name)
        seen.add(name)
        rows.append(row)
    return rows


_ENGINE_ROW_KEYS = frozenset({"name", "engine", "definition", "snapshot", "size_bytes", "turn", "tool"})


def _validated_engine_row(root: Path, row: dict[str, Any], label: str) -> dict[str, Any]:
    """An engine handle's manifest entry: a definition of short strings and nothing else (no file, no code)."""
    extra = set(row) - _ENGINE_ROW_KEYS
    if extra:
        raise CheckpointError(f"checkpoint {root}: {label} is an engine handle with unexpected fields "
                              f"{sorted(extra)!r}", handle=row["name"])
    engine, definition = row.get("engine"), row.get("definition")
    if not isinstance(engine, str) or sanitize_identifier(engine) != engine:
        raise CheckpointError(f"checkpoint {root}: {label} names engine {engine!r}; an identifier is required",
                              handle=row["name"])
    if not isinstance(definition, dict) or not definition or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= DEFINITION_MAX_CHARS
            for k, v in definition.items()):
        raise CheckpointError(f"checkpoint {root}: {label} has a malformed definition (an object of strings up to "
                              f"{DEFINITION_MAX_CHARS:,} characters is required)", handle=row["name"])
    if not isinstance(row.get("snapshot"), dict) or type(row.get("size_bytes")) is not int:
        raise CheckpointError(f"checkpoint {root}: {label} has a malformed snapshot or size", handle=row["name"])
    for key in ("turn", "tool"):
        if row.get(key) is not None and type(row[key]) is not (int if key == "turn" else str):
            raise CheckpointError(f"checkpoint {root}: {label} has a malformed {key}", handle=row["name"])
    return row


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (O(1); files are never modified), else copy it."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copyfile(source, target, follow_symlinks=False)


def write_manifest(root: Path, *, hot_count: int, memory_budget_bytes: int, recency: list[str],
                   rows: list[dict[str, Any]]) -> Path:
    """Write the manifest of a checkpoint whose files are already in ``root``; return its path."""
    manifest = {
        "kind": MANIFEST_KIND, "version": CHECKPOINT_VERSION,
        "hot_count": hot_count, "memory_budget_bytes": memory_budget_bytes,
        "recency": recency, "entries": rows,
    }
    path = root / CHECKPOINT_MANIFEST
    tmp = root / f"{CHECKPOINT_MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, allow_nan=False), encoding="utf-8")
    os.replace(tmp, path)
    return path
