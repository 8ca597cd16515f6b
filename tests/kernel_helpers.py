"""Real kernels for tests: start one, run cells, read their outputs, script its model.

- :class:`Kernel` starts a kernel (no ``*_API_KEY`` in its environment) and runs cells;
  :class:`Cell` holds what one cell sent back.
- :func:`agent_kernel` is the setup every kernel test module shares: the extension loaded and its
  ``AgentMagics`` settings made, in one cell that must succeed, the kernel closed after::

      @pytest.fixture(scope="module")
      def kernel(tmp_path_factory):
          with agent_kernel(tmp_path_factory.mktemp("asking"), run_dir="runs", sandbox="inprocess") as k:
              yield k

- :func:`run_unsaved_cell` runs a cell in an nbclient notebook's kernel without keeping it in the notebook.
- :func:`script`, :func:`code_turn` and :func:`answer` write a scripted model for ``-m scripted/<file>``;
  :func:`usage_error` reads the one-line ``UsageError`` of a refused cell.
"""

from __future__ import annotations

import json
import os
import queue
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import jupyter_client

CELL_TIMEOUT_S = 60
"""A cell that takes longer is a hang: every model here is offline."""


class Kernel:
    """A started kernel and a client that collects each cell's outputs."""

    def __init__(self, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        self.km = jupyter_client.KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.cwd = cwd

    def run(self, code: str, *, wait: bool = True) -> "Cell":
        msg_id = self.kc.execute(code, store_history=True)
        cell = Cell(msg_id)
        if wait:
            self.collect(cell)
        return cell

    def collect(self, cell: "Cell", timeout: float = CELL_TIMEOUT_S) -> "Cell":
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"cell did not finish: {cell.outputs}") from None
            if msg["parent_header"].get("msg_id") != cell.msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "status" and msg["content"]["execution_state"] == "idle":
                break
            cell.messages.append(msg)
        reply = self.kc.get_shell_msg(timeout=10)
        while reply["parent_header"].get("msg_id") != cell.msg_id:
            reply = self.kc.get_shell_msg(timeout=10)
        cell.reply = reply["content"]
        return cell

    def wait_for(self, cell: "Cell", shows: str, timeout: float = CELL_TIMEOUT_S) -> dict[str, Any]:
        """Read the kernel's messages until one carries ``shows`` (a tool's name in the live view, a printed
        word) and return it: a test acts when the kernel is there, never after a guessed sleep. The cell's own
        messages are kept in ``cell.messages`` (:meth:`collect` reads the rest); AssertionError when the cell
        ends first, TimeoutError past ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no message showed {shows!r}: {cell.outputs}") from None
            mine = msg["parent_header"].get("msg_id") == cell.msg_id
            if mine and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                raise AssertionError(f"the cell ended before anything showed {shows!r}: {cell.outputs}")
            if mine:
                cell.messages.append(msg)
            if shows in json.dumps(msg["content"], default=str):
                return msg

    def value(self, expression: str) -> Any:
        """Evaluate ``expression`` in the kernel and return it (through JSON)."""
        cell = self.run(f"import json as _j; print(_j.dumps({expression}, default=str))")
        assert cell.ok, cell.errors
        return json.loads(cell.stdout.strip().splitlines()[-1])

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


class Cell:
    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        self.messages: list[dict[str, Any]] = []
        self.reply: dict[str, Any] = {}

    def _of(self, *kinds: str) -> list[dict[str, Any]]:
        return [m["content"] for m in self.messages if m["msg_type"] in kinds]

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self._of("stream", "display_data", "execute_result", "error")

    @property
    def stdout(self) -> str:
        return "".join(c["text"] for c in self._of("stream") if c["name"] == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(c["text"] for c in self._of("stream") if c["name"] == "stderr")

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self._of("error")

    @property
    def ok(self) -> bool:
        return self.reply.get("status") == "ok" and not self.errors and "UsageError" not in self.stderr

    def data(self, mime: str) -> list[Any]:
        return [c["data"][mime] for c in self._of("display_data", "execute_result") if mime in c["data"]]

    @property
    def result(self) -> dict[str, Any]:
        results = self._of("execute_result")
        assert results, f"no execute_result in {self.outputs}"
        return results[-1]["data"]

    def comm_models(self) -> list[str]:
        return [m["content"]["data"]["state"].get("_model_name") for m in self.messages
                if m["msg_type"] == "comm_open"]


def usage_error(cell: Cell) -> str:
    """The one-line UsageError a cell printed (asserting it is one line and no traceback)."""
    assert not cell.errors, f"expected a UsageError, got a traceback: {cell.errors}"
    lines = [line for line in cell.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError: "), cell.stderr
    return lines[0]


def setup_cell(settings: dict[str, Any], setup: str = "") -> str:
    """The cell that loads the extension, sets each of ``settings`` (in order) and then runs ``setup``.

    A setting's value is written as its Python ``repr`` (what ``%config`` evaluates); a name that is not
    an identifier is refused here, so a typo cannot become a different line of the cell.
    """
    lines = ["%load_ext harness_magic"]
    for name, value in settings.items():
        if not name.isidentifier():
            raise ValueError(f"setting name {name!r} is not an identifier, as every AgentMagics setting is")
        lines.append(f"%config AgentMagics.{name} = {value!r}")
    return "\n".join(lines) + ("\n" + setup if setup else "")


@contextmanager
def agent_kernel(cwd: Path, setup: str = "", **settings: Any) -> Iterator[Kernel]:
    """A kernel started in ``cwd`` with :func:`setup_cell` run in it, closed on leaving.

    A setup cell that errs stops here with its outputs (the kernel is closed first), so a module's
    tests never run against a half-configured kernel.
    """
    kernel = Kernel(cwd)
    try:
        cell = kernel.run(setup_cell(settings, setup))
        assert cell.ok, (cell.errors, cell.stderr, cell.outputs)
        yield kernel
    finally:
        kernel.close()


def run_unsaved_cell(client: Any, nb: Any, source: str) -> Any:
    """Run ``source`` in the kernel of ``client`` (an ``nbclient.NotebookClient`` of ``nb``) as a cell that is
    not kept in ``nb``; the executed cell (its outputs). A failing cell raises ``CellExecutionError``."""
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    nb.cells.append(cell)
    try:
        client.execute_cell(cell, len(nb.cells) - 1)
    finally:
        nb.cells.pop()
    return cell


_counter = iter(range(10_000))


def script(kernel: Kernel, *turns: dict[str, Any]) -> str:
    """Write a scripted model into the kernel's folder; returns ``-m scripted/<file>``."""
    name = f"script_{next(_counter)}.json"
    (kernel.cwd / name).write_text(json.dumps({"turns": list(turns)}))
    return f"-m scripted/{name}"


def code_turn(code: str, text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}


def answer(text: str) -> dict[str, Any]:
    return {"text": text}
