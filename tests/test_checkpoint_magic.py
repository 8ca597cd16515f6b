"""%agent_checkpoint in real kernels: the cache survives a kernel restart, %agent_status is right after a
restore (issue 27 point 2), lazy DuckDB handles re-bind only on a configured connector, and a damaged or
missing checkpoint leaves the cache as it was."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from test_first_hour_magics import script, status_lines  # noqa: E402
from kernel_helpers import Kernel, answer, code_turn, usage_error  # noqa: E402

pytestmark = pytest.mark.kernel


def duckdb_call(sql: str, name: str, lazy: bool = False) -> dict:
    arguments = {"sql": sql, "name": name} | ({"lazy": True} if lazy else {})
    return {"text": "", "tool_calls": [{"name": "lake__query", "arguments": arguments}]}


LOAD = {"text": "", "tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "lake"}}]}


def start(tmp_path: Path, with_lake: bool) -> Kernel:
    connectors = [{"type": "duckdb", "name": "lake", "files": {"sales": str(tmp_path / "sales.csv")}}]
    k = Kernel(tmp_path)
    setup = k.run(textwrap.dedent(f"""\
        %load_ext harness_magic
        %config AgentMagics.model = "offline/quickstart"
        %config AgentMagics.connectors = {connectors if with_lake else []!r}
    """))
    assert setup.ok, setup.outputs
    return k


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    """A checkpoint of a session holding a frame (saved by agent code) and a lazy DuckDB handle over a view."""
    (tmp_path / "sales.csv").write_text("region,revenue\nnorth,3\nsouth,5\nnorth,4\n")
    k = start(tmp_path, with_lake=True)
    try:
        model = script(tmp_path, code_turn("save('targets', {'north': 6, 'south': 4})"), LOAD,
                       duckdb_call("SELECT region, sum(revenue) AS revenue FROM sales GROUP BY 1 ORDER BY 1",
                                   "by_region", lazy=True),
                       answer("Saved."))
        run = k.run(f"%%agent {model}\nSum revenue by region.")
        assert run.ok, run.outputs
        cell = k.run("%agent_checkpoint save ckpt")
        assert cell.ok, cell.outputs
        assert "saved 2 handles to ckpt" in cell.stdout
    finally:
        k.close()
    return tmp_path / "ckpt"


def test_a_checkpoint_restores_the_cache_in_a_new_kernel_and_status_names_it(saved: Path, tmp_path: Path) -> None:
    k = start(tmp_path, with_lake=True)
    try:
        cell = k.run("%agent_checkpoint load ckpt")
        assert cell.ok, cell.outputs
        assert "loaded 2 handles from ckpt: targets, by_region" in cell.stdout
        assert status_lines(k)["handles"] == "2: targets, by_region"
        model = script(tmp_path, code_turn("print(sorted(targets.items())); print(by_region.to_dict('list'))"),
                       answer("Read."))
        run = k.run(f"%%agent {model}\nRead the restored handles.")
        assert run.ok, run.outputs
        outputs = k.value("[r.content for m in get_ipython().magics_manager.registry['AgentMagics']"
                          ".session.harness.messages for r in getattr(m, 'tool_results', [])]")
        joined = "\n".join(outputs)
        assert "[('north', 6), ('south', 4)]" in joined
        assert "{'region': ['north', 'south'], 'revenue': [7, 5]}" in joined
    finally:
        k.close()


def test_without_its_connector_a_lazy_handle_is_named_by_load_and_by_status(saved: Path, tmp_path: Path) -> None:
    k = start(tmp_path, with_lake=False)
    try:
        cell = k.run("%agent_checkpoint load ckpt")
        assert cell.reply.get("status") == "ok" and not cell.errors, cell.outputs
        assert "loaded 1 handle from ckpt: targets" in cell.stdout
        assert "not restored: by_region (" in cell.stderr
        handles = status_lines(k)["handles"]
        assert handles.startswith("1: targets · not restored from the checkpoint: by_region (")
    finally:
        k.close()


def test_a_missing_checkpoint_or_unknown_action_is_one_line_and_the_cache_stays(saved: Path, tmp_path: Path) -> None:
    k = start(tmp_path, with_lake=True)
    try:
        assert k.run("kept = [1, 2, 3]\n%agent_push kept").ok
        before = status_lines(k)["handles"]
        assert before == "1: kept"
        missing = usage_error(k.run("%agent_checkpoint load no_such_dir"))
        assert missing.startswith("UsageError: %agent_checkpoint load: ") and "no_such_dir" in missing
        assert missing.endswith("(the cache is unchanged)")
        action = usage_error(k.run("%agent_checkpoint drop ckpt"))
        assert action == "UsageError: %agent_checkpoint: action must be one of save, load, got 'drop'"
        assert status_lines(k)["handles"] == before
    finally:
        k.close()


def test_a_value_file_changed_after_the_save_is_refused_when_read_never_decoded(saved: Path, tmp_path: Path) -> None:
    manifest = json.loads((saved / "manifest.json").read_text())
    [stored] = [row["file"] for row in manifest["entries"] if row["name"] == "targets"]
    damaged = saved / stored
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    k = start(tmp_path, with_lake=True)
    try:
        assert k.run("%agent_checkpoint load ckpt").ok
        message = usage_error(k.run("%agent_pull targets"))
        assert message.startswith("UsageError: %agent_pull targets: handle 'targets': its file on disk was "
                                  "changed since it was written"), message
        assert k.value("'targets' in globals()") is False
    finally:
        k.close()
