"""Re-execute the example notebooks in place, storing their outputs (no widget state).

    .venv/bin/python notebooks/execute.py [NOTEBOOK ...]   # default: every notebook here

Run this after changing a notebook or its offline script, then commit the notebooks.
The kernel's working directory is this folder, as under nbval.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
CELL_TIMEOUT_S = 120
"""A cell that runs longer than this is a hang, not a slow model: all models here are offline."""


def execute(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name=notebook.metadata.kernelspec.name,
                            resources={"metadata": {"path": str(path.parent)}}, store_widget_state=False)
    client.execute()
    nbformat.write(notebook, path)
    print(f"executed {path.name}")


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or sorted(HERE.glob("*.ipynb"))
    for path in paths:
        execute(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
