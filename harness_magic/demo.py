"""``make demo``: run notebooks/quickstart.ipynb headlessly with the offline model.

    python -m harness_magic.demo [--notebook PATH]

Executes every cell in a fresh kernel (no API key needed), then prints the
agent's final answer and where the exported transcript was written. The
notebook file itself is not modified.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

CELL_TIMEOUT_S = 120
"""The quickstart is offline and takes seconds; longer means a hang."""
DEFAULT_NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"


def run(notebook_path: Path) -> int:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(notebook_path, as_version=4)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name=notebook.metadata.kernelspec.name,
                            resources={"metadata": {"path": str(notebook_path.parent)}}, store_widget_state=False)
    client.execute()
    answer, exported = None, None
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/markdown" in data and cell.source.lstrip().startswith("%%agent"):
                answer = data["text/markdown"]
            text = output.get("text", "")
            found = re.search(r"exported .* to (\S+)", text)
            if found:
                exported = (notebook_path.parent / found.group(1)).resolve()
    if answer is None:
        print("the notebook ran, but no %%agent answer was found", file=sys.stderr)
        return 1
    print("Agent's answer:\n")
    print(answer.strip())
    print()
    print(f"Transcript exported to: {exported}" if exported else "No transcript was exported.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", type=Path, default=DEFAULT_NOTEBOOK)
    args = parser.parse_args(argv)
    return run(args.notebook.resolve())


if __name__ == "__main__":
    raise SystemExit(main())
