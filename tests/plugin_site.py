"""Install packages the way an installer lays them out, without a network or a build backend.

A distribution is a ``NAME-VERSION.dist-info/`` folder (``METADATA`` and
``entry_points.txt``) beside its modules in a directory on ``sys.path``;
``importlib.metadata.entry_points`` reads exactly that. :func:`install_example`
installs ``tests/plugin_example`` from its own ``pyproject.toml``, so the
example's declared entry points are the ones the tests use.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Mapping

EXAMPLE = Path(__file__).resolve().parent / "plugin_example"
EXAMPLE_PACKAGE = "harness_magic_example"
EXAMPLE_TASK = """\
id: fiscal_year_start
prompt: |
  When does our fiscal year start? End your reply with a line `ANSWER: <month>`.
graders:
- keywords:
    all: [April]
scripts:
  reference:
  - text: 'The fiscal year starts in April.

      ANSWER: April'
  wrong:
  - name: says_january
    expect: wrong_answer
    turns:
    - text: 'ANSWER: January'
"""
"""An eval task graded by the example's ``keywords`` grader: its reference script passes, its wrong one fails."""


def install_distribution(site: Path, name: str, entry_points: Mapping[str, Mapping[str, str]],
                         modules: Mapping[str, str] = (), version: str = "0.1.0") -> Path:
    """Write distribution ``name`` into ``site``: its entry points (group -> name -> ``module:attr``) and
    ``modules`` (file name -> source). Returns its dist-info folder."""
    site.mkdir(parents=True, exist_ok=True)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    sections = [f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items())
                for group, points in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(sections))
    for file_name, source in dict(modules).items():
        (site / file_name).write_text(source)
    return info


def install_example(site: Path) -> dict[str, dict[str, str]]:
    """Install ``tests/plugin_example`` into ``site``; returns its entry points by group."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    shutil.copytree(EXAMPLE / EXAMPLE_PACKAGE, site / EXAMPLE_PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__"))
    points = project["entry-points"]
    install_distribution(site, project["name"], points, version=project["version"])
    return points
