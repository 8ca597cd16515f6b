"""Workspace memory: definitions the user approved, kept in a YAML file next to the notebook.

File format (written by :func:`write_definitions`; a person may edit it)::

    version: 1
    definitions:
      active_user: A user with at least one event in the week, weeks starting Monday.

Reading is strict, because the file outlives the session and anyone with the
folder can edit it: a regular file opened without blocking or following a link
(a FIFO planted in its place cannot hang the session), owned by the current
user and not writable by group or others (another user's file is not "what the
user approved"); ``yaml.safe_load`` (no object construction; a tag such as
``!!python/object`` is refused), no anchors or aliases, nesting bounded
(:func:`~harness_magic.core.text.safe_yaml.load_plain_yaml`), at most
:data:`WORKSPACE_MEMORY_MAX_BYTES`, at most :data:`MAX_DEFINITIONS` entries,
names as glossary names, text only. Anything else raises
:class:`WorkspaceMemoryError` naming the file and the entry at fault; callers
keep working without the file's definitions. Writes are atomic (a temporary
file in the same folder, flushed, then renamed over the old one).

The glossary connector reads these definitions as terms whose source is
:data:`WORKSPACE_SOURCE` (:func:`with_workspace_terms`).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness_magic.core.confinement.safe_open import LinkRefused, NotOwned, NotRegularFile, TooLarge, read_regular
from harness_magic.core.knowledge.glossary import WORKSPACE_SOURCE, Glossary, Term, normalize_term
from harness_magic.core.text.safe_yaml import PlainYAMLError, load_plain_yaml

__all__ = ["Definition", "WorkspaceMemoryError", "read_definitions", "write_definitions", "definition_name",
           "with_workspace_terms", "WORKSPACE_MEMORY_MAX_BYTES", "MAX_DEFINITIONS", "DEFINITION_MAX_CHARS",
           "FORMAT_VERSION"]

WORKSPACE_MEMORY_MAX_BYTES = 256 * 1024
"""A larger file is refused: a few hundred short definitions, not a data store."""
MAX_DEFINITIONS = 200
"""Definitions kept; beyond this an approval is refused (a glossary file is the place for more)."""
DEFINITION_MAX_CHARS = 1_000
"""Characters of one definition: a definition is a sentence or two."""
FORMAT_VERSION = 1
"""Written into the file; a file of another version is refused."""

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_]{0,99}")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


class WorkspaceMemoryError(ValueError):
    """The workspace memory file is unreadable or malformed (the message names the file and entry)."""


@dataclass(frozen=True)
class Definition:
    """One approved definition: a glossary-style name and its text."""

    name: str
    text: str


def definition_name(text: str) -> str:
    """The glossary name for ``text`` (``"Active user"`` -> ``"active_user"``); ValueError when none fits."""
    name = normalize_term(text)[:100]
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"a definition needs a name of letters and digits (at most 100), got {text!r}")
    return name


def _clean(text: str) -> str:
    return " ".join(_CONTROL_RE.sub(" ", text).split())


def read_definitions(path: str | os.PathLike[str]) -> list[Definition]:
    """The definitions in ``path`` (none when it does not exist); WorkspaceMemoryError when malformed."""
    where = str(path)
    try:
        data = read_regular(path, WORKSPACE_MEMORY_MAX_BYTES, owned=True)
    except FileNotFoundError:
        return []
    except TooLarge:
        raise WorkspaceMemoryError(f"workspace memory {where!r} is over {WORKSPACE_MEMORY_MAX_BYTES} bytes") from None
    except NotOwned as exc:
        raise WorkspaceMemoryError(f"workspace memory {where!r} is {exc.strerror}: ignored (whoever can write it "
                                   "could plant definitions the user never approved)") from None
    except LinkRefused:
        raise WorkspaceMemoryError(f"workspace memory {where!r} is a symbolic link: ignored") from None
    except NotRegularFile as exc:
        raise WorkspaceMemoryError(f"workspace memory {where!r} is {exc.strerror}: ignored") from None
    except OSError as exc:
        raise WorkspaceMemoryError(f"workspace memory {where!r} cannot be read: {exc.strerror or exc}") from None
    try:
        loaded = load_plain_yaml(data)
    except PlainYAMLError as exc:
        raise WorkspaceMemoryError(f"workspace memory {where!r} is not plain YAML ({exc})") from None
    if loaded is None:
        return []
    if not isinstance(loaded, dict) or set(map(str, loaded)) - {"version", "definitions"}:
        raise WorkspaceMemoryError(f"workspace memory {where!r}: the top level must be a mapping with "
                                   "'version' and 'definitions'")
    if loaded.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        raise WorkspaceMemoryError(f"workspace memory {where!r}: version {loaded.get('version')!r} is not "
                                   f"{FORMAT_VERSION}")
    entries = loaded.get("definitions") or {}
    if not isinstance(entries, dict):
        raise WorkspaceMemoryError(f"workspace memory {where!r}: 'definitions' must map names to text, got "
                                   f"{type(entries).__name__}")
    if len(entries) > MAX_DEFINITIONS:
        raise WorkspaceMemoryError(f"workspace memory {where!r} has {len(entries)} definitions; the limit is "
                                   f"{MAX_DEFINITIONS}")
    out = []
    for name, text in entries.items():
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise WorkspaceMemoryError(f"workspace memory {where!r}: name {name!r} is not lower-case letters, "
                                       "digits and '_' (at most 100)")
        if not isinstance(text, str) or not _clean(text):
            raise WorkspaceMemoryError(f"workspace memory {where!r}: definition {name!r} must be text, got "
                                       f"{type(text).__name__}")
        if len(text) > DEFINITION_MAX_CHARS:
            raise WorkspaceMemoryError(f"workspace memory {where!r}: definition {name!r} is over "
                                       f"{DEFINITION_MAX_CHARS} characters")
        out.append(Definition(name, _clean(text)))
    return out


def write_definitions(path: str | os.PathLike[str], definitions: list[Definition]) -> None:
    """Write ``definitions`` to ``path`` atomically (readers see the old file or the new one, never half)."""
    import yaml

    if len(definitions) > MAX_DEFINITIONS:
        raise WorkspaceMemoryError(f"workspace memory holds at most {MAX_DEFINITIONS} definitions")
    body = {"version": FORMAT_VERSION, "definitions": {d.name: d.text for d in definitions}}
    text = ("# harness_magic workspace memory: definitions the user approved (%agent_memory shows them)\n"
            + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100))
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def with_workspace_terms(glossary: Glossary, definitions: list[Definition]) -> Glossary:
    """``glossary`` plus one term per definition (source :data:`WORKSPACE_SOURCE`); a glossary file's own term
    of the same name wins (the files are the curated source)."""
    if not definitions:
        return glossary
    known = {normalize_term(t.name) for t in glossary.terms.values()}
    terms = dict(glossary.terms)
    for definition in definitions:
        if normalize_term(definition.name) not in known:
            terms[definition.name] = Term(name=definition.name, kind="term", source=WORKSPACE_SOURCE,
                                          definition=definition.text)
    return Glossary(terms=terms, owners=dict(glossary.owners), files=list(glossary.files), digest=glossary.digest)
