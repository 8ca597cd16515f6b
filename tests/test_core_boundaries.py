"""Layering: the core never imports the notebook stack, and litellm loads lazily."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "harness_magic"
NOTEBOOK_STACK = ("IPython", "ipywidgets", "traitlets", "ipykernel")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_core_does_not_import_ipython_widgets_or_traitlets():
    code = "\n".join(f"import {p.with_suffix('').relative_to(PACKAGE.parent).as_posix().replace('/', '.')}"
                     for p in sorted((PACKAGE / "core").rglob("*.py")) if p.name != "__main__.py")
    loaded = _modules_after(code + "\nimport harness_magic\nharness_magic.Harness")
    leaked = sorted(m for m in loaded if m.split(".")[0] in NOTEBOOK_STACK)
    assert leaked == []


def test_core_sources_never_import_the_notebook_layer():
    pattern = re.compile(r"^\s*(from|import)\s+(IPython|ipywidgets|traitlets|ipykernel|harness_magic\.notebook)\b",
                         re.M)
    offenders = [str(p) for p in (PACKAGE / "core").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_litellm_is_not_imported_until_the_first_model_call():
    loaded = _modules_after("import harness_magic\nfrom harness_magic import Harness, ProviderAdapter, AgentSession")
    assert "litellm" not in loaded


def test_offline_models_never_import_litellm(tmp_path):
    code = (
        "from harness_magic import ProviderAdapter, Harness, ScriptedModel\n"
        "a = ProviderAdapter('offline/x', transport=ScriptedModel([{'text': 'hi'}]))\n"
        f"assert Harness(a, 'sys', [], run_dir={str(tmp_path)!r}).run('q') == 'hi'"
    )
    assert "litellm" not in _modules_after(code)


def test_every_public_name_resolves():
    import harness_magic

    missing = [name for name in harness_magic.__all__ if getattr(harness_magic, name, None) is None]
    assert missing == []
