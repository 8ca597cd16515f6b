"""Skill files: a folder holding ``SKILL.md`` (YAML front matter + Markdown body), read without running code.

The format is the Agent Skills convention coding agents use: front matter
with ``name`` and ``description`` (required), then the body. We read three
optional fields more: ``triggers`` (phrases or intents), ``verification``
(declarative rules, :mod:`~harness_magic.core.control.skills.rules`) and
``escalation`` (when to ask the user or stop). Other fields (``license``,
``allowed-tools``, ``metadata``...) are ignored, so a skill written for
another agent loads as it is.

Contract of :func:`load_skills`:

* YAML is read with ``yaml.safe_load`` only (:func:`~harness_magic.core.text.safe_yaml.load_plain_yaml`),
  and refused before that when it holds a tag (``!!python/...``, ``!foo``), an
  anchor or an alias (the "billion laughs" bomb needs aliases), or nests deeper
  than :data:`~harness_magic.core.text.safe_yaml.YAML_MAX_DEPTH` levels (the
  parser would recurse into ``RecursionError``).
* Files over :data:`MAX_SKILL_FILE_BYTES` are refused unread; a ``SKILL.md``
  or skill folder that is a symbolic link resolving outside its skills
  directory is refused; the file itself is opened beneath the skills directory
  without following links and without blocking, and only a regular file is
  read (a FIFO or device planted as ``SKILL.md`` is named and skipped); a name
  that is not ``[a-z0-9-]`` (no ``/``, ``..``, spaces) is refused.
* A bad skill never stops the others: it is skipped and one line naming the
  file and the field goes to :attr:`SkillSet.errors`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from harness_magic.core.confinement.safe_open import LinkRefused, open_beneath
from harness_magic.core.plugins import OWN_DISTRIBUTION, PluginGroup
from harness_magic.core.control.skills.rules import SkillRule, SkillRuleError, parse_rules
from harness_magic.core.text.safe_yaml import PlainYAMLError, load_plain_yaml

__all__ = ["Skill", "SkillSet", "SkillFileError", "load_skills", "parse_skill", "BUILTIN_SKILLS_DIR", "SKILL_PLUGINS",
           "SKILL_FILE", "MAX_SKILL_FILE_BYTES", "MAX_FRONT_MATTER_BYTES", "MAX_DESCRIPTION_CHARS",
           "MAX_SKILLS_PER_DIR", "NAME_RE"]

SKILL_FILE = "SKILL.md"
BUILTIN_SKILLS_DIR = str(Path(__file__).resolve().parent / "builtin")
"""The skills shipped with the package (package data), declared as the skills plugin ``builtin``."""
MAX_SKILL_FILE_BYTES = 64 * 1024
"""A workflow template is a page or two; anything larger is not a skill and would flood the context."""
MAX_FRONT_MATTER_BYTES = 8 * 1024
"""Front matter is a handful of fields; the limit bounds what the YAML parser is given."""
MAX_DESCRIPTION_CHARS = 1024
"""The Agent Skills convention's limit; the description is shown before loading, so it stays short."""
MAX_TRIGGERS = 20
"""Triggers are shown in the tool description of every request: a few phrases, not a thesaurus."""
MAX_SKILLS_PER_DIR = 200
"""Every skill costs a line in the ``skills__load`` description; more than this is a misconfigured directory."""
NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
"""The Agent Skills convention: lowercase letters, digits and hyphens, at most 64 characters."""



class SkillFileError(ValueError):
    """A skill file that cannot be used; ``str()`` is one line naming the file and the field."""

    def __init__(self, path: str, field_name: str, why: str) -> None:
        self.path, self.field, self.why = path, field_name, why
        super().__init__(f"{path}: {field_name}: {why}")


@dataclass(frozen=True)
class Skill:
    """One loaded skill."""

    name: str
    description: str
    """One line, shown to the model before the skill is loaded."""
    template: str
    """The Markdown body: the action template (ordered steps naming tools and sub-questions)."""
    directory: str
    """The skill's folder (absolute)."""
    triggers: tuple[str, ...] = ()
    """Phrases or intents that should make the model load the skill."""
    rules: tuple[SkillRule, ...] = ()
    """Verification rules added to the run's verifier when the skill is loaded."""
    escalation: str = ""
    """When to ask the user or stop (shown to the model with the template); empty when none."""
    builtin: bool = False
    """Shipped with the package (:data:`BUILTIN_SKILLS_DIR`)."""
    plugin: str = ""
    """The installed package whose skills plugin shipped it; "" for a folder of ``skill_dirs``."""
    files: tuple[str, ...] = ()
    """Other files beside ``SKILL.md`` (names only; never read or run)."""

    @property
    def rule_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rules)

    @property
    def trigger_line(self) -> str:
        """The one line the model sees before loading: description, then triggers."""
        line = self.description
        if self.triggers:
            line += " (when: " + "; ".join(self.triggers) + ")"
        return line

    def load_text(self) -> str:
        """What ``skills__load`` returns: the template, the rules the answer must pass, the escalation."""
        parts = [f"# Skill: {self.name}", self.template.strip()]
        if self.rules:
            parts.append("## Verification (checked on your results and answer)\n"
                         + "\n".join(f"- {r.name}: {r.explain()}" for r in self.rules))
        if self.escalation:
            parts.append("## Escalation (when to ask the user or stop)\n" + self.escalation.strip())
        return "\n\n".join(p for p in parts if p)


@dataclass
class SkillSet:
    """Skills by name, and a line per skill file that could not be used."""

    skills: dict[str, Skill] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    """One line each: ``path: field: why``."""

    def names(self) -> list[str]:
        return sorted(self.skills)

    def get(self, name: str) -> Skill:
        """The skill called ``name``; KeyError listing the available names when there is none."""
        try:
            return self.skills[name]
        except (KeyError, TypeError):
            raise KeyError(f"no skill named {name!r}; available: {', '.join(self.names()) or '(none)'}") from None

    def __contains__(self, name: object) -> bool:
        return name in self.skills

    def __iter__(self) -> Iterator[Skill]:
        return iter(self.skills[n] for n in self.names())

    def __len__(self) -> int:
        return len(self.skills)


def _check_plugin(obj: object, name: str) -> str:
    if not isinstance(obj, (str, os.PathLike)):
        raise TypeError(f"a skills plugin is the path of a directory of skill folders (a str); {name!r} is a "
                        f"{type(obj).__name__}")
    path = os.fspath(obj)
    if not isinstance(path, str) or not Path(path).is_dir():
        raise ValueError(f"skills plugin {name!r}: {path!r} is not a directory")
    return path


SKILL_PLUGINS: PluginGroup[str] = PluginGroup("harness_magic.skills", _check_plugin, "skills plugin")
"""Directories of skills installed packages ship (entry-point group ``harness_magic.skills``; the
package's own :data:`BUILTIN_SKILLS_DIR` is the plugin ``builtin``)."""


def load_skills(dirs: Sequence[str | os.PathLike[str]] = (), *, builtin: bool = True) -> SkillSet:
    """Skills of every installed skills plugin (when ``builtin``: the built-in set first, then outside
    packages' by plugin name), then of each of ``dirs``; later ones replace same names.

    Never raises for a bad directory, skill file or plugin: each goes to ``errors`` as one line.
    """
    result = SkillSet()
    roots: list[tuple[str, str]] = []  # (directory, distribution of its plugin or "")
    if builtin:
        roots += [(p.obj, p.distribution) for p in SKILL_PLUGINS.load_all().values()]
        result.errors += [f"skills plugin {failure.line}" for failure in SKILL_PLUGINS.failures()]
    roots += [(os.fspath(d), "") for d in dirs]
    for root, plugin in roots:
        for item in _skill_folders(root, result.errors):
            try:
                skill = _read_skill(item, root, plugin)
            except SkillFileError as exc:
                result.errors.append(str(exc))
                continue
            result.skills[skill.name] = skill
    return result


def _skill_folders(root: str, errors: list[str]) -> list[Path]:
    base = Path(root).expanduser()
    if not base.is_dir():
        errors.append(f"{root}: skill_dirs: not a directory")
        return []
    if (base / SKILL_FILE).exists():
        return [base]  # a single skill's folder named directly
    folders = sorted(p for p in base.iterdir() if not p.name.startswith(".") and (p.is_dir() or p.is_symlink()))
    if len(folders) > MAX_SKILLS_PER_DIR:
        errors.append(f"{root}: skill_dirs: {len(folders)} folders, more than {MAX_SKILLS_PER_DIR}; "
                      f"only the first {MAX_SKILLS_PER_DIR} are read")
        folders = folders[:MAX_SKILLS_PER_DIR]
    return [p for p in folders if (p / SKILL_FILE).exists() or (p / SKILL_FILE).is_symlink()]


def _read_skill(folder: Path, root: str, plugin: str) -> Skill:
    path = folder / SKILL_FILE
    shown = str(path)
    base = Path(root).expanduser().resolve()
    real = path.resolve()
    if not real.is_relative_to(base):
        raise SkillFileError(shown, "path", f"a symbolic link to {real}, outside the skills directory {base}")
    try:  # no link on the way, never blocks (a FIFO swapped in after resolve()), regular files only
        fd = open_beneath(str(base), str(real.relative_to(base)), allow_hardlinks=True)
    except LinkRefused:
        raise SkillFileError(shown, "path", "became a symbolic link while it was read") from None
    except IsADirectoryError:
        raise SkillFileError(shown, "path", f"{_kind(real)}, not a regular file") from None
    except OSError as exc:
        raise SkillFileError(shown, "path", f"cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_SKILL_FILE_BYTES:
            raise SkillFileError(shown, "size", f"{size} bytes, more than MAX_SKILL_FILE_BYTES={MAX_SKILL_FILE_BYTES}")
        raw = handle.read(MAX_SKILL_FILE_BYTES + 1)
    if len(raw) > MAX_SKILL_FILE_BYTES:  # grew after the stat
        raise SkillFileError(shown, "size", f"more than MAX_SKILL_FILE_BYTES={MAX_SKILL_FILE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFileError(shown, "encoding", f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    files = tuple(sorted(p.name for p in real.parent.iterdir() if p.name != SKILL_FILE and not p.name.startswith(".")))
    return parse_skill(text, shown, directory=str(real.parent), builtin=plugin == OWN_DISTRIBUTION, plugin=plugin,
                       files=files)


def _kind(path: Path) -> str:
    """What a path that is not a regular file is, in words."""
    checks = (("a FIFO", path.is_fifo), ("a directory", path.is_dir), ("a device", path.is_char_device),
              ("a device", path.is_block_device), ("a socket", path.is_socket))
    return next((name for name, test in checks if test()), "not a regular file")


def parse_skill(text: str, path: str = SKILL_FILE, *, directory: str = "", builtin: bool = False,
                plugin: str = "", files: tuple[str, ...] = ()) -> Skill:
    """A :class:`Skill` from the text of a ``SKILL.md``; :class:`SkillFileError` naming ``path`` and the field."""
    meta, body = _front_matter(text, path)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise SkillFileError(path, "name", "missing (required: a lowercase name such as kpi-discrepancy)")
    if not NAME_RE.fullmatch(name):
        raise SkillFileError(path, "name", f"{name[:80]!r} is not lowercase letters, digits and hyphens "
                                           "(at most 64; no path characters)")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillFileError(path, "description", "missing (required: one line saying what the skill does)")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillFileError(path, "description", f"{len(description)} characters, more than {MAX_DESCRIPTION_CHARS}")
    triggers = _strings(meta.get("triggers"), path, "triggers")
    if len(triggers) > MAX_TRIGGERS:
        raise SkillFileError(path, "triggers", f"{len(triggers)} triggers, more than {MAX_TRIGGERS}")
    escalation = meta.get("escalation") or ""
    if isinstance(escalation, list):
        escalation = "\n".join(f"- {line}" for line in _strings(escalation, path, "escalation"))
    if not isinstance(escalation, str):
        raise SkillFileError(path, "escalation", f"expected text or a list of lines, got {type(escalation).__name__}")
    try:
        rules = parse_rules(meta.get("verification"))
    except SkillRuleError as exc:
        raise SkillFileError(path, "verification", str(exc)) from None
    return Skill(name=name, description=description, template=body.strip(), directory=directory,
                 triggers=triggers, rules=rules, escalation=escalation.strip(), builtin=builtin, plugin=plugin,
                 files=files)


def _front_matter(text: str, path: str) -> tuple[dict[str, Any], str]:
    text = text.lstrip("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillFileError(path, "front matter", "missing: the file must start with a '---' line")
    end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), None)
    if end is None:
        raise SkillFileError(path, "front matter", "no closing '---' line")
    header = "".join(lines[1:end])
    if len(header.encode("utf-8")) > MAX_FRONT_MATTER_BYTES:
        raise SkillFileError(path, "front matter", f"more than MAX_FRONT_MATTER_BYTES={MAX_FRONT_MATTER_BYTES}")
    try:
        meta = load_plain_yaml(header, line_offset=2)
    except PlainYAMLError as exc:
        raise SkillFileError(path, "front matter", str(exc)) from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise SkillFileError(path, "front matter", f"expected key: value fields, got {type(meta).__name__}")
    return meta, "".join(lines[end + 1:])


def _strings(value: Any, path: str, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise SkillFileError(path, field_name, "expected a list of phrases")
    return tuple(" ".join(str(v).split()) for v in value if str(v).strip())
