"""Every example in the README runs as shown, and its tables say what the code does.

What is checked, block by block:

- ``bash`` blocks: each ``make X`` names a Makefile target (``make demo`` itself runs in
  tests/test_demo.py, ``make test`` is CI); each ``python -m harness_magic.evals ...`` line runs, in
  order, in a scratch folder. Any other command fails the test until it is given a check here.
- ``python`` blocks without magics run in a fresh interpreter (README and docs/reference.md).
- Magic cells (the intro, "Use your own model", "Connectors") and the example of every row of the
  magics table run in one real kernel, in the README's order, with the context the README states
  (a notebook with a ``sales`` frame; ``offline/quickstart`` as the model since CI has no key; a
  ``data`` and a docs folder for the connectors). ``<run>`` is replaced by the latest run's id.
- The local-server recipe runs against tests/scripted_server.py on a free port with no key in the
  kernel's environment. Cloud cells need a key and the network: their model ids must route.
- The magics table and the registered magics match both ways, options included; every
  ``AgentMagics.<name>`` in the README and docs/ is a real setting, and docs/reference.md's settings
  table lists each setting exactly once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REFERENCE = ROOT / "docs" / "reference.md"
GUARANTEES = ROOT / "docs" / "guarantees.md"
PYTHON = sys.executable

SCREEN_LINES = 30
"""Lines before the set-up commands: one screen, so a newcomer reaches them without scrolling."""
EXAMPLE_TIMEOUT_S = 180
"""A python example or evals command that takes longer hangs: every model in them is offline."""
LOCAL_URL = "http://127.0.0.1:8000/v1"
"""The local-server URL the README's recipe shows; the test substitutes a scripted server's."""

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def blocks(path: Path) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(path.read_text(encoding="utf-8"))]


def section(path: Path, heading: str) -> str:
    """The text of the ``## heading`` section (up to the next ``## ``)."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def is_magic_cell(code: str) -> bool:
    return any(line.lstrip().startswith("%") for line in code.splitlines())


def table_rows(text: str) -> list[list[str]]:
    """The cells of each body row of the first Markdown table in ``text``."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows[1:]  # the header row


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# -- the shape of the guide ---------------------------------------------------------------------


def test_setup_commands_come_within_one_screen_and_are_what_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    head, _, rest = text.partition("\n## Set-up: two commands\n")
    assert rest, "the README has a 'Set-up: two commands' section"
    assert len(head.splitlines()) <= SCREEN_LINES, f"{len(head.splitlines())} lines before the set-up commands"
    commands = [line.split("#")[0].strip() for line in blocks_of(rest)[0][1].splitlines()]
    assert [c for c in commands if c] == ["make demo", "make test"]
    targets = makefile_targets()
    assert {"demo", "test"} <= targets
    ci = (ROOT / ".ci" / "run").read_text()
    assert [line for line in ci.splitlines() if line and not line.startswith(("#", "set ", "cd "))] == ["make test"]


def blocks_of(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def test_readme_links_point_at_files_and_headings_that_exist() -> None:
    for path in (README, REFERENCE, GUARANTEES):
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            assert linked.exists(), f"{path.name} links to {target!r}, which does not exist"
            if anchor and linked.suffix == ".md":
                assert anchor in anchors(linked), f"{path.name} links to {target!r}: no such heading"


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


# -- shell and python blocks --------------------------------------------------------------------


def shell_lines(path: Path) -> list[str]:
    lines = []
    for language, code in blocks(path):
        if language in ("bash", "sh", "shell"):
            for line in code.splitlines():
                command = line.split("  #")[0].split(" # ")[0].strip()
                if command and not command.startswith("#"):
                    lines.append(command)
    return lines


def test_every_shell_command_in_the_readme_runs_or_names_a_real_target(tmp_path: Path) -> None:
    lines = shell_lines(README)
    assert lines
    targets = makefile_targets()
    for command in lines:
        argv = shlex.split(command)
        if argv[0] == "make":
            assert argv[1] in targets, f"README runs {command!r}: the Makefile has no target {argv[1]!r}"
        elif argv[:3] == ["python", "-m", "harness_magic.evals"]:
            done = subprocess.run([PYTHON, *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                                  timeout=EXAMPLE_TIMEOUT_S, env=offline_env())
            assert done.returncode == 0, f"{command!r} failed:\n{done.stdout}\n{done.stderr}"
        else:
            pytest.fail(f"README shell command {command!r} has no check in this test")
    assert (tmp_path / "a.html").is_file(), "the report command writes the HTML report next to the results"


def test_reference_evaluation_commands_parse_with_the_real_command_line() -> None:
    from harness_magic.evals.__main__ import _parser

    lines = shell_lines(REFERENCE)
    assert lines
    for command in lines:
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "harness_magic.evals"], command
        _parser().parse_args(argv[3:])  # SystemExit on an unknown subcommand or option


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


@pytest.mark.parametrize("path", [README, REFERENCE], ids=lambda p: p.name)
def test_python_examples_run_as_shown(path: Path, tmp_path: Path) -> None:
    examples = [code for language, code in blocks(path) if language == "python" and not is_magic_cell(code)]
    assert examples, f"{path.name} has a plain python example"
    for code in examples:
        done = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              timeout=EXAMPLE_TIMEOUT_S, env=offline_env())
        assert done.returncode == 0, f"example failed:\n{code}\n{done.stderr}"
        assert "completed" in done.stdout, done.stdout
        assert "no scripted turn left" not in done.stdout + done.stderr


# -- settings, model ids, the magics table --------------------------------------------------------


def configurable_settings() -> set[str]:
    from harness_magic.notebook.agent_magics import AgentMagics

    return set(AgentMagics.class_own_traits(config=True))


def test_every_setting_named_in_the_docs_exists() -> None:
    settings = configurable_settings()
    for path in (README, REFERENCE, GUARANTEES):
        named = set(re.findall(r"AgentMagics\.([a-z_]+)", path.read_text(encoding="utf-8")))
        assert named, path
        assert named <= settings, f"{path.name} names settings that do not exist: {sorted(named - settings)}"


def test_reference_settings_table_lists_every_setting_once() -> None:
    rows = table_rows(section(REFERENCE, "Settings"))
    listed = [code_spans(row[0])[0] for row in rows]
    assert sorted(listed) == sorted(configurable_settings()), "docs/reference.md's settings table is out of date"
    assert len(listed) == len(set(listed))


def readme_model_ids() -> list[str]:
    text = README.read_text(encoding="utf-8")
    ids = re.findall(r'AgentMagics\.model = "([^"]+)"', text)
    ids += re.findall(r"%%agent -m (\S+)", text)
    ids += [span.removeprefix("-m ").strip() for row in table_rows(section(README, "Use your own model"))
            for span in code_spans(row[-1]) if "/" in span]
    return [i.replace("<any name>", "local-model") for i in ids if i not in ("MODEL", "scripted/FILE")]


def test_every_model_id_in_the_readme_routes() -> None:
    from harness_magic.core.providers.transport import check_model_route

    ids = readme_model_ids()
    assert {"anthropic/claude-sonnet-4-5", "openai/qwen2.5:7b", "openai/Qwen/Qwen2.5-7B-Instruct"} <= set(ids)
    for model in ids:
        if "<" in model:
            continue  # an offline model's file placeholder, e.g. scripted/<file.json>
        check_model_route(model)


def magic_table() -> dict[str, tuple[str, str]]:
    """magic name (``agent``, ``agent_vars``, ...) -> (signature, example) from the README's magics table."""
    table = {}
    for row in table_rows(section(README, "The magics")):
        signature, example = code_spans(row[0])[0], row[2]
        name = signature.split()[0].lstrip("%")
        assert name not in table, f"two rows for %{name}"
        table[name] = (signature, example)
    return table


def registered_magics() -> dict[str, Any]:
    """magic name -> function, for every magic the extension registers."""
    from harness_magic.notebook.extension import magics_classes

    found: dict[str, Any] = {}
    for cls in magics_classes():
        for kind in ("line", "cell"):
            for name, method in cls.magics[kind].items():
                found[name] = getattr(cls, method)
    return found


def test_magics_table_lists_every_registered_magic_and_nothing_else() -> None:
    table, registered = magic_table(), registered_magics()
    assert sorted(table) == sorted(registered), (
        f"in the README only: {sorted(set(table) - set(registered))}; "
        f"registered only: {sorted(set(registered) - set(table))}")


def test_magics_table_shows_each_magics_options() -> None:
    registered = registered_magics()
    for name, (signature, _) in magic_table().items():
        parser = getattr(registered[name], "parser", None)
        actions = [a for a in (parser._actions if parser else []) if a.option_strings and "--help" not in a.option_strings]
        options = {s for a in actions for s in a.option_strings}
        shown = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", signature))
        assert shown <= options, f"%{name}: the README shows options it does not have: {sorted(shown - options)}"
        missing = [a.option_strings[-1] for a in actions if not shown & set(a.option_strings)]
        assert not missing, f"%{name}: options missing from the README row: {missing}"


# -- real kernels ---------------------------------------------------------------------------------


jupyter_client = pytest.importorskip("jupyter_client")
from kernel_helpers import Kernel  # noqa: E402

SALES = textwrap.dedent("""\
    import pandas as pd
    sales = pd.DataFrame({
        "region": ["North", "South", "East", "West"] * 4,
        "quarter": [q for q in ["Q1", "Q2", "Q3", "Q4"] for _ in range(4)],
        "revenue": [120, 80, 100, 60, 118, 86, 104, 70, 117, 94, 108, 83, 113, 101, 114, 97],
    })
""")
"""The notebook the README's examples continue: the quickstart's ``sales`` frame."""
OFFLINE = '%config AgentMagics.model = "offline/quickstart"'
"""The model every kernel example runs with (CI has no key); setting it again plays the script from its start."""


def magic_cells(text: str) -> list[str]:
    return [code for language, code in blocks_of(text) if language == "python" and is_magic_cell(code)]


def run_ok(kernel: Kernel, code: str) -> Any:
    cell = kernel.run(code)
    assert cell.ok, f"{code!r} failed: {cell.errors or cell.stderr or cell.outputs}"
    return cell


def latest_run(folder: Path) -> str:
    logs = sorted((folder / "runs").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    assert logs, "no run log yet"
    return logs[-1].stem


def write_example_folders(cwd: Path) -> None:
    """The folders the connectors examples name: ``data`` with orders, and a small docs folder."""
    import pandas as pd

    (cwd / "data").mkdir()
    pd.DataFrame({"order_id": [1, 2, 3], "amount": [9.5, 20.0, 4.25]}).to_parquet(cwd / "data" / "orders.parquet")
    (cwd / "kb").mkdir()
    (cwd / "kb" / "metrics.md").write_text("# Metrics\n\n## Net revenue\n\nNet revenue is gross revenue minus "
                                           "refunds and partner share.\n")


@pytest.mark.kernel
def test_intro_and_every_magic_example_run_in_a_kernel(tmp_path: Path) -> None:
    write_example_folders(tmp_path)
    kernel = Kernel(tmp_path)
    try:
        intro = magic_cells(README.read_text(encoding="utf-8").partition("\n## Set-up")[0])
        assert len(intro) == 2 and intro[0].startswith("%load_ext harness_magic")
        run_ok(kernel, intro[0])
        run_ok(kernel, SALES + "\n" + OFFLINE + '\n%config AgentMagics.connectors = [{"type": "docs", "roots": ["kb"]}]')
        first = run_ok(kernel, intro[1])
        assert "West grew fastest" in json.dumps(first.result)
        for name, (_, example) in magic_table().items():
            code = example.replace("<br>", "\n")
            code = "\n".join(code_spans(code)) if "`" in code else code
            code = code.replace("<run>", latest_run(tmp_path))
            if name in ("agent", "agent_retry"):
                run_ok(kernel, OFFLINE)  # the offline script plays from its start for this run
            run_ok(kernel, code)
        assert kernel.value("growth.shape") == [3, 4] and kernel.value("growth_table.equals(growth)") is True
        assert (tmp_path / "runs" / "growth.html").is_file()

        connectors = magic_cells(section(README, "Connectors"))
        assert len(connectors) == 1
        run_ok(kernel, connectors[0])
        listing = run_ok(kernel, "%agent_connectors").stdout
        assert "files" in listing and "duckdb" in listing

        for code in magic_cells(section(README, "Use your own model")):
            if code.startswith("%config"):  # settings take without a key; cells that call a cloud model need one
                run_ok(kernel, code)
    finally:
        kernel.close()


@pytest.mark.kernel
def test_local_server_recipe_works_without_a_key(tmp_path: Path) -> None:
    from scripted_server import ScriptedServer

    cells = magic_cells(section(README, "Use your own model"))
    start = next(i for i, c in enumerate(cells) if LOCAL_URL in c)
    cells = cells[start:start + 2]
    assert cells[1].startswith("%%agent -m openai/"), cells
    with ScriptedServer([{"text": "West grew fastest."}]) as server:
        kernel = Kernel(tmp_path)  # the Kernel helper leaves every *_API_KEY out of the environment
        try:
            run_ok(kernel, "%load_ext harness_magic")
            run_ok(kernel, cells[0].replace(LOCAL_URL, server.api_base))
            cell = run_ok(kernel, cells[1])
        finally:
            kernel.close()
    served = re.search(r"-m openai/(\S+)", cells[1]).group(1)
    assert [r["model"] for r in server.requests] == [served]
    assert "West grew fastest." in json.dumps(cell.result)
    assert "placeholder key" in json.dumps(cell.messages, default=str), "the notebook says a placeholder key was sent"
