"""``make demo``: run notebooks/quickstart.ipynb headlessly with the offline model.

    python -m harness_magic.demo [--notebook PATH]

Executes every cell in a fresh kernel (no API key needed), then prints the
agent's final answer and where the exported transcript was written. The
notebook file itself is not modified.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

CELL_TIMEOUT_S = 120
"""The quickstart is offline and takes seconds; longer means a hang."""
_FOOTER_LOG = re.compile(r'class="agent-footer"[^>]*>[^<]*· log ([^<·]+\.jsonl)</div>')
"""The run log a settled %%agent cell's footer names (relative to the notebook's directory)."""
DEFAULT_NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"


def run(notebook_path: Path) -> int:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(notebook_path, as_version=4)
    # The kernel's own log stays at errors: its warning about unencrypted local TCP is not the demo's business.
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name=notebook.metadata.kernelspec.name,
                            extra_arguments=["--IPKernelApp.log_level=ERROR"],
                            resources={"metadata": {"path": str(notebook_path.parent)}}, store_widget_state=False)
    client.execute()
    log, exported = None, None
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if cell.cell_type == "code" and cell.source.lstrip().startswith("%%agent"):
                found = _FOOTER_LOG.search(output.get("data", {}).get("text/html", ""))
                log = notebook_path.parent / html.unescape(found.group(1)) if found else log
            found = re.search(r"exported .* to (\S+)", output.get("text", ""))
            if found:
                exported = (notebook_path.parent / found.group(1)).resolve()
    if log is None:
        print("the notebook ran, but no %%agent cell showed a finished run (its footer names the run log)",
              file=sys.stderr)
        return 1
    from harness_magic.core.control.recorded import load_run

    end = load_run(log).end
    if end is None or not end.get("text"):
        print(f"the agent's run did not finish with an answer (see {log})", file=sys.stderr)
        return 1
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console(highlight=False)
    console.print("Agent's answer:\n")
    console.print(Markdown(end["text"].strip()))
    print()
    print(f"Run: {end.get('status')}, {end.get('turns')} turns, {end.get('tool_calls')} tool calls; log {log.resolve()}")
    print(f"Transcript exported to: {exported}" if exported else "No transcript was exported.")
    return 0 if end.get("status") == "completed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=DEFAULT_NOTEBOOK)
    args = parser.parse_args(argv)
    return run(args.notebook.resolve())


if __name__ == "__main__":
    raise SystemExit(main())
