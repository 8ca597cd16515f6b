"""Configuration is idempotent (issue 32 point 3): adding a connector again, or applying the same configuration
list again, keeps what is unchanged (state and all) and replaces what changed, saying so.

Real engines (DuckDB in-process, SQLite through SQLAlchemy) behind a real AgentSession; no network.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness_magic.core.execution.connectors import Connector, duckdb_connector, sql_connector
from harness_magic.core.execution.connectors.config import apply_config, connectors_from_config
from harness_magic.core.execution.connectors.sameness import differences
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession


@pytest.fixture
def data(tmp_path: Path) -> Path:
    for name in ("a", "b"):
        (tmp_path / f"{name}.csv").write_text("region,revenue\nnorth,3\nsouth,5\n")
    return tmp_path


@pytest.fixture
def session() -> Any:
    s = AgentSession(AgentConfig(model="offline/quickstart", sandbox="inprocess"))
    s.told = []
    s.notify = s.told.append
    yield s
    s.close()


def tool_names(session: Any) -> list[str]:
    return [t.name for t in session.harness.tools if t.connector is not None]


def test_adding_the_same_duckdb_connector_again_keeps_the_registered_one_and_its_engine(session, data) -> None:
    first = session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm"))
    engine = first.engine
    again = session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm"))
    assert again is first and again.engine is engine, "the registered connector, state and all"
    assert session.told == ["connector 'crm' is already registered with this configuration: kept (its state too)"]
    assert tool_names(session) == ["crm__list_tables", "crm__describe", "crm__query"]


def test_a_connector_re_added_with_a_changed_path_replaces_it_and_says_what_changed(session, data) -> None:
    first = session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm"))
    session.connectors.load("crm")
    second = session.add_connector(duckdb_connector({"sales": str(data / "b.csv")}, name="crm"))
    assert second is not first and session.connectors.registry["crm"] is second
    assert session.told == ["connector 'crm' replaced: its configuration changed (files)"]
    assert tool_names(session) == ["crm__list_tables", "crm__describe", "crm__query"], "no duplicate tools"
    assert session.connectors.loaded == ["crm"], "a connector the conversation loaded stays loaded"
    assert all(t.visible for t in session.harness.tools if t.connector == "crm")
    assert "b.csv" in str(second.engine.files["sales"]) and "a.csv" in str(first.engine.files["sales"])


def test_a_connector_re_added_with_a_write_tool_replaces_it_and_the_write_still_needs_approval(session, data) -> None:
    session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm"))
    writable = session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm",
                                                      database=str(data / "crm.duckdb")))
    assert "database" in session.told[-1] and "tools" in session.told[-1]
    execute = next(t for t in session.harness.tools if t.name == "crm__execute")
    assert execute.safety != "read" and not execute.visible, "hidden until loaded, and gated"
    assert session.connectors.registry["crm"] is writable


def test_other_options_count_as_changes(session, data) -> None:
    session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm"))
    session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm", max_rows=10))
    assert session.told[-1] == "connector 'crm' replaced: its configuration changed (max_rows)"
    session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm", max_rows=10,
                                           description="Another description."))
    assert "description" in session.told[-1]


def test_a_new_sqlalchemy_engine_is_a_change_the_same_url_is_not(session, data) -> None:
    import sqlalchemy as sa

    url = f"sqlite:///{data / 'shop.db'}"
    session.add_connector(sql_connector(url, name="shop"))
    session.add_connector(sql_connector(url, name="shop"))
    assert session.told[-1].endswith("kept (its state too)")
    session.add_connector(sql_connector(sa.create_engine(url), name="shop"))
    assert session.told[-1].startswith("connector 'shop' replaced") and "url_or_engine" in session.told[-1]


HAND_BUILT = textwrap.dedent("""\
    from harness_magic.core.execution.connectors import Connector
    crm = Connector("crm", "Customer records.")
    limit = LIMIT

    @crm.tool()
    def lookup(customer_id: int) -> dict:
        \"\"\"One customer.

        Args:
            customer_id: The id.
        \"\"\"
        return {"id": customer_id, "limit": limit}
""")


def hand_built(limit: int, ns: dict[str, Any] | None = None) -> Connector:
    """Run the cell that builds a connector by hand (as a notebook would, in one namespace)."""
    ns = ns if ns is not None else {}
    exec(compile(HAND_BUILT.replace("LIMIT", str(limit)), "<cell>", "exec"), ns)
    return ns["crm"]


def test_a_hand_built_connector_run_again_unchanged_is_kept(session) -> None:
    ns: dict[str, Any] = {}
    first = session.add_connector(hand_built(5, ns))
    assert session.add_connector(hand_built(5, ns)) is first
    assert session.told[-1].endswith("kept (its state too)")


def test_a_hand_built_connector_whose_tool_code_changed_is_replaced(session) -> None:
    session.add_connector(hand_built(5))
    changed = Connector("crm", "Customer records.")

    @changed.tool()
    def lookup(customer_id: int) -> dict:
        """One customer.

        Args:
            customer_id: The id.
        """
        return {"id": customer_id, "deleted": True}  # same schema, other code

    assert session.add_connector(changed) is changed
    assert session.told[-1] == "connector 'crm' replaced: its configuration changed (tool code)"


def test_a_hand_built_connectors_closure_value_counts(session) -> None:
    ns: dict[str, Any] = {}
    session.add_connector(hand_built(5, ns))
    # the module-level `limit` is a global, read when called: the same code with another global is the same tool
    assert differences(hand_built(5), hand_built(6)) == []

    def make(limit: int) -> Connector:
        c = Connector("crm", "Customer records.")

        @c.tool()
        def lookup(customer_id: int) -> dict:
            """One customer.

            Args:
                customer_id: The id.
            """
            return {"id": customer_id, "limit": limit}

        return c

    assert differences(make(5), make(5)) == []
    assert differences(make(5), make(6)) == ["tool code"]


def test_a_connector_added_with_another_type_under_the_name_is_replaced(session, data) -> None:
    session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="crm"))
    session.add_connector(hand_built(1))
    assert "type" not in session.told[-1] and "how it was built" in session.told[-1]
    assert tool_names(session) == ["crm__lookup"]


# -- applying a configuration list again ----------------------------------------------------------------


def entries(data: Path, docs_file: str = "a.csv") -> list[dict[str, Any]]:
    return [{"type": "duckdb", "name": "lake", "files": {"sales": str(data / "a.csv")}},
            {"type": "files", "name": "shared", "roots": [str(data)]},
            {"type": "duckdb", "name": "other", "files": {"sales": str(data / docs_file)}}]


def test_applying_the_same_list_again_keeps_every_connector(data) -> None:
    registry = connectors_from_config(entries(data))
    before = {n: registry[n] for n in registry.names}
    changes = apply_config(registry, entries(data))
    assert changes.summary == "connectors: lake kept, shared kept, other kept"
    assert all(registry[n] is before[n] for n in before)


def test_applying_a_changed_list_rebuilds_adds_and_removes_only_what_changed(data) -> None:
    registry = connectors_from_config(entries(data))
    registry.register(hand_built(3))  # added by hand: not the configuration's
    lake = registry["lake"]
    new = entries(data, docs_file="b.csv")[:1] + entries(data, docs_file="b.csv")[2:] + [
        {"type": "files", "name": "more", "roots": [str(data)]}]
    changes = apply_config(registry, new)
    assert changes.summary == "connectors: lake kept, other rebuilt, more added, shared removed"
    assert registry["lake"] is lake and "crm" in registry and "shared" not in registry


def test_a_bad_list_changes_nothing(data) -> None:
    registry = connectors_from_config(entries(data))
    before = {n: registry[n] for n in registry.names}
    bad = entries(data, docs_file="b.csv") + [{"type": "files", "name": "other", "roots": [str(data)]}]
    with pytest.raises(ValueError, match="listed more than once: other"):
        apply_config(registry, bad)
    with pytest.raises(ValueError, match="unknown"):
        apply_config(registry, entries(data, docs_file="b.csv") + [{"type": "shell"}])
    assert {n: registry[n] for n in registry.names} == before


def test_a_registry_installed_in_a_harness_swaps_tools_in_place(session, data) -> None:
    session.add_connector(duckdb_connector({"sales": str(data / "a.csv")}, name="lake"))
    registry = session.connectors.registry
    apply_config(registry, [{"type": "duckdb", "name": "lake", "files": {"sales": str(data / "b.csv")}}])
    assert tool_names(session) == ["lake__list_tables", "lake__describe", "lake__query"]
    load = next(t for t in session.harness.tools if t.name == "load_connectors")
    assert load.parameters["properties"]["connector_name"]["enum"] == ["lake"]


def test_methods_binding_builtins_compare_without_crashing() -> None:
    """A bound method's function may be any callable (a builtin here): compared by value, never by ``__code__``."""
    import types

    from harness_magic.core.execution.connectors.sameness import same_value

    owner = object()
    assert same_value(types.MethodType(len, owner), types.MethodType(len, owner))
    assert not same_value(types.MethodType(len, owner), types.MethodType(abs, owner))
    assert not same_value(types.MethodType(len, owner), types.MethodType(len, object()))
