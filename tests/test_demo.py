"""`make demo` (python -m harness_magic.demo): the README's main job, on the embedded offline model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"


def _demo(notebook: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(notebook.parent), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "harness_magic.demo", "--notebook", str(notebook)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


def test_the_demo_prints_the_agents_answer_the_run_and_the_export(tmp_path) -> None:
    notebook = tmp_path / "quickstart.ipynb"
    shutil.copy(QUICKSTART, notebook)
    before = notebook.read_bytes()
    done = _demo(notebook)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("Agent's answer:")
    assert "West grew fastest" in out and "17.4 %" in out
    assert "**" not in out  # the Markdown is rendered for the terminal, not shown raw
    assert "Run: completed, 3 turns, 2 tool calls; log " in out
    log = Path(out.split("; log ")[1].splitlines()[0])
    assert log.parent == tmp_path / "runs" and log.suffix == ".jsonl"
    end = [json.loads(line) for line in log.read_text().splitlines()][-1]
    assert end["type"] == "run_end" and "West grew fastest" in end["text"]
    assert f"Transcript exported to: {tmp_path / 'runs' / 'quickstart.html'}" in out
    assert (tmp_path / "runs" / "quickstart.html").is_file()
    assert "Traceback" not in done.stderr and "WARNING" not in done.stderr
    assert notebook.read_bytes() == before  # the notebook file itself is not modified


def test_the_demo_says_so_when_no_agent_cell_finished(tmp_path) -> None:
    notebook = tmp_path / "plain.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('no agent here')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, notebook)
    done = _demo(notebook)
    assert done.returncode == 1
    assert "no %%agent cell showed a finished run" in done.stderr
    assert "Traceback" not in done.stderr
