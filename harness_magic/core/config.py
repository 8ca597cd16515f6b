"""The settings of a session, each declared once: :class:`AgentConfig` and the table :data:`SETTINGS`.

A setting is one entry: name, type, default, help and one validator (a
function ``check(value, label) -> value`` that returns the value, normalised,
or raises ValueError naming ``label``, the bad value and what is allowed).
:class:`AgentConfig`'s fields are declared with :func:`setting`, so the
dataclass *is* the table: its annotations give the types, :func:`setting`
the default, help and validator, and ``__post_init__`` runs each validator.
Settings a session takes beside its config (connectors, the governance
table, subagents) are :data:`SESSION_SETTINGS`, declared with :class:`Setting`
directly. The notebook derives ``AgentMagics``' traits (type, default, help,
``config=True``), their validation, which settings rebuild the session and
the ``%config AgentMagics`` help from :data:`SETTINGS`; it declares nothing
again. Validators import what they need lazily, so reading the table (as
``%load_ext`` does) stays cheap.
"""

from __future__ import annotations

import builtins
import dataclasses
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, get_type_hints

from harness_magic.core.agent.prompts import DEFAULT_SYSTEM_PROMPT
from harness_magic.core.execution.interpreter import DEFAULT_MATERIALIZE_MAX_BYTES, DEFAULT_MATERIALIZE_MAX_ROWS
from harness_magic.core.providers.channel import DEFAULT_IDLE_S, check_idle_s

if TYPE_CHECKING:
    from harness_magic.core.control.budgets import Budgets

__all__ = ["AgentConfig", "Setting", "SETTINGS", "SESSION_SETTINGS", "setting", "setting_named", "SANDBOX_MODES",
           "DEFAULT_MODEL", "MAX_SETTING_INT", "MAX_PATH_CHARS"]

DEFAULT_MODEL = "openai/gpt-4o-mini"
"""A cheap, capable default; needs OPENAI_API_KEY. Offline ids need no key."""
SANDBOX_MODES = ("worker", "inprocess", "unconfined")
"""``worker``: OS-confined subprocess (default). ``inprocess``: no security boundary. ``unconfined``: the
worker subprocess even where the OS confines it only partly or not at all (warns what is missing)."""
MAX_SETTING_INT = 2**63 - 1
"""Largest whole number a setting takes (64-bit counts: larger values are typing mistakes or attacks)."""
MAX_PATH_CHARS = 4096
"""Longest path a setting takes (Linux PATH_MAX)."""
_SHOWN_CHARS = 80
"""How much of a refused text the message quotes (the rest is elided, so the message stays one short line)."""

Check = Callable[[Any, str], Any]
"""A validator: ``check(value, label)`` returns the value (normalised) or raises ValueError naming ``label``."""
Applies = Literal["session", "run", "magics"]
"""When a change takes effect: ``session``: the live session is reconfigured at its next use (conversation and
cache kept); ``run``: the next run reads it; ``magics``: the magics read it where they use it."""
_SAME = object()
"""Marks a notebook default equal to the core default."""
_KEY = "harness_magic.setting"
"""The dataclass field metadata key holding a field's :class:`_Declared`."""


@dataclass(frozen=True)
class Setting:
    """One setting: everything about it, in one place."""

    name: str
    """The name in :class:`AgentConfig` (and of the trait unless :attr:`trait` says otherwise)."""
    type: type
    """The value's type: ``str``, ``int``, ``float``, ``bool``, ``list`` (of :attr:`item`) or ``dict``."""
    default: Any
    help: str
    """What it does, shown by ``%config AgentMagics`` (never cut)."""
    check: Check
    nullable: bool = False
    """None is a value (meaning what :attr:`help` says)."""
    item: builtins.type | None = None  # builtins: inside this class ``type`` names the field above
    """The type of a list's items."""
    trait: str | None = ""
    """The ``AgentMagics`` trait's name: ``""`` for :attr:`name`, None for a setting the notebook does not offer."""
    notebook_default: Any = _SAME
    """The trait's default where the notebook's differs from the core's (e.g. a workspace memory file)."""
    applies: Applies = "session"
    reconnects: bool = False
    """A change rebuilds the session's connectors."""
    field: bool = True
    """A field of :class:`AgentConfig` (else the session takes it beside its config)."""

    @property
    def trait_name(self) -> str | None:
        """The trait offering it, or None."""
        return None if self.trait is None else self.trait or self.name

    @property
    def trait_default(self) -> Any:
        """The trait's default value."""
        return self.default if self.notebook_default is _SAME else self.notebook_default

    def validate(self, value: Any, label: str | None = None) -> Any:
        """``value`` normalised, or a ValueError naming ``label`` (default: the trait's or field's name)."""
        return self.check(value, label or self.trait_name or self.name)


@dataclass(frozen=True)
class _Declared:
    """What :func:`setting` keeps on a field; the field itself gives name, type and default."""

    help: str
    check: Check
    trait: str | None
    notebook_default: Any
    applies: Applies
    reconnects: bool


def setting(default: Any, help: str, check: Check, *, trait: str | None = "", notebook_default: Any = _SAME,
            applies: Applies = "session", reconnects: bool = False) -> Any:
    """Declare an :class:`AgentConfig` field as a setting (the arguments are :class:`Setting`'s)."""
    declared = {_KEY: _Declared(help, check, trait, notebook_default, applies, reconnects)}
    if isinstance(default, (dict, list)):
        frozen = dict(default) if isinstance(default, dict) else list(default)
        return field(default_factory=lambda: type(frozen)(frozen), metadata=declared)
    return field(default=default, metadata=declared)


# -- validators ---------------------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    """``repr(value)``, elided past :data:`_SHOWN_CHARS` (a hostile value may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 3] + "..."


def _whole(value: Any, label: str, what: str, nullable: bool) -> int | None:
    """An int (not a bool) up to :data:`MAX_SETTING_INT` (None where ``nullable``); the caller checks the low end."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{label} must be {what}{' or None' if nullable else ''}, got {_shown(value)}")
    if value > MAX_SETTING_INT:
        raise ValueError(f"{label} must be at most {MAX_SETTING_INT:,}, got {_shown(value)}")
    return value


def at_least_one(value: Any, label: str) -> int:
    """A whole number >= 1 (turns, hot handles)."""
    number = _whole(value, label, "a whole number", False)
    if number < 1:  # type: ignore[operator]  # not None: nullable is False
        raise ValueError(f"{label} must be at least 1, got {number}")
    return number  # type: ignore[return-value]  # not None: nullable is False


def byte_budget(value: Any, label: str) -> int | None:
    """Bytes >= 0, or None."""
    number = _whole(value, label, "a number of bytes", True)
    if number is not None and number < 0:
        raise ValueError(f"{label} must be a number of bytes >= 0, got {number}")
    return number


def token_window(value: Any, label: str) -> int | None:
    """A positive number of tokens, or None."""
    number = _whole(value, label, "a positive number of tokens", True)
    if number is not None and number < 1:
        raise ValueError(f"{label} must be a positive number of tokens or None, got {number}")
    return number


def whole_limit(value: Any, label: str) -> int | None:
    """A per-run count limit (tokens, tool calls): a positive integer or None (the budgets' own rule)."""
    from harness_magic.core.control.budgets import check_limit

    return check_limit(value, label, integer=True)


def number_limit(value: Any, label: str) -> float | None:
    """A per-run amount limit (USD, seconds): a positive finite number or None (the budgets' own rule)."""
    from harness_magic.core.control.budgets import check_limit

    return check_limit(value, label, integer=False)


def write_count_limit(value: Any, label: str) -> int | None:
    """A per-run count of approved writes: an integer 0 or more, or None (the budgets' own rule)."""
    from harness_magic.core.control.budgets import check_limit

    return check_limit(value, label, integer=True, zero=True)


def materialize_cap(value: Any, label: str) -> int:
    """A row or byte cap on bringing a lazy handle into the kernel (the connectors' own rule)."""
    from harness_magic.core.execution.connectors.lazy import check_cap

    return check_cap(value, label)


def question_count(value: Any, label: str) -> int:
    """``ask_user`` questions per run (the questions tool's own rule)."""
    from harness_magic.core.control.questions import check_max_questions

    return check_max_questions(value, label)


def question_timeout(value: Any, label: str) -> float | None:
    """Seconds a question waits, or None (the questions tool's own rule)."""
    from harness_magic.core.control.questions import check_timeout

    return check_timeout(value, label)


def idle_seconds(value: Any, label: str) -> float:
    """Seconds the provider host lives without a request (the host's own rule)."""
    return check_idle_s(value, label)


def flag(value: Any, label: str) -> bool:
    """True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{label} must be True or False, got {_shown(value)}")
    return value


def one_of(choices: Callable[[], tuple[str, ...]]) -> Check:
    """A validator accepting one of the words ``choices()`` returns (read when checking: imports stay lazy)."""
    def check(value: Any, label: str) -> str:
        allowed = choices()
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"{label} {_shown(value)} is not valid; allowed: {', '.join(allowed)}")
        return value
    return check


def _otel_modes() -> tuple[str, ...]:
    from harness_magic.core.control.tracing import OTEL_MODES

    return OTEL_MODES


def _printable(value: Any) -> bool:
    return isinstance(value, str) and value.isprintable()


def path(nullable: bool) -> Check:
    """A validator for a file or directory path: printable text (no newline or control character) of at most
    :data:`MAX_PATH_CHARS` characters (None too where ``nullable``)."""
    def check(value: Any, label: str) -> str | None:
        if value is None and nullable:
            return None
        if not _printable(value) or len(value) > MAX_PATH_CHARS:
            raise ValueError(f"{label} must be a path of at most {MAX_PATH_CHARS:,} printable characters (no "
                             f"newline or control character){' or None' if nullable else ''}, got {_shown(value)}")
        return value
    return check


def word(what: str, nullable: bool) -> Check:
    """A validator for a name or URL: non-empty printable text without spaces (None too where ``nullable``)."""
    def check(value: Any, label: str) -> str | None:
        if value is None and nullable:
            return None
        if not _printable(value) or not value or any(c.isspace() for c in value) or len(value) > MAX_PATH_CHARS:
            raise ValueError(f"{label} must be {what} without spaces or control characters"
                             f"{' or None' if nullable else ''}, got {_shown(value)}")
        return value
    return check


def model_id(value: Any, label: str) -> str:
    """A model id: non-empty printable text without spaces (whether this kernel can reach it is the caller's)."""
    if not _printable(value) or not value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"bad {label} {_shown(value)}: give a litellm model id such as {DEFAULT_MODEL!r} or "
                         "'offline/quickstart'")
    return value


def text(value: Any, label: str) -> str:
    """Any text (a prompt may have newlines)."""
    if not isinstance(value, str):
        raise ValueError(f"{label} must be text, got {_shown(value)}")
    return value


def mapping(value: Any, label: str) -> dict[str, Any]:
    """A dict with text keys."""
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ValueError(f"{label} must be a dict with text keys, got {_shown(value)}")
    return dict(value)


def masking_policy(value: Any, label: str) -> dict[str, str]:
    """Per sensitivity class, allow/mask/deny (the masker's own rule); returned complete."""
    from harness_magic.core.text.masking import check_policy

    return check_policy(value)


def directories(value: Any, label: str) -> tuple[str, ...]:
    """Directories (a list or tuple of paths), as a tuple."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{label} must be a list of directories, got {_shown(value)}")
    each = path(False)
    return tuple(each(item, f"{label} entry") for item in value)


def role_name(value: Any, label: str) -> str | None:
    """A role name (the approval policy's own rule), or None."""
    if value is None:
        return None
    if not _printable(value):
        raise ValueError(f"{label} must be a role name without newline or control characters, got {_shown(value)}")
    from harness_magic.core.execution.connectors.policy import current_actor

    current_actor(value)
    return value


def connector_entries(value: Any, label: str) -> list[dict[str, Any]]:
    """Connector entries, each a dict naming a known connector ``type`` (built-in or plugin)."""
    from harness_magic.core.execution.connectors.types import CONNECTOR_TYPES

    if not isinstance(value, list):
        raise ValueError(f"{label} must be a list of connector entries, got {_shown(value)}")
    for entry in value:
        if not isinstance(entry, dict) or entry.get("type") not in CONNECTOR_TYPES:
            raise ValueError(f"connector {_shown(entry)} needs a 'type' of {', '.join(CONNECTOR_TYPES.names())}")
    return value


def governance_table(value: Any, label: str) -> dict[str, Any]:
    """A governance table ``{"rules": [...]}`` (the policy's own rule); ``{}``: none."""
    from harness_magic.core.execution.connectors.policy import governance_from

    table = mapping(value, label)
    governance_from(policy=table)
    return table


def governance_file(value: Any, label: str) -> str | None:
    """A governance table's YAML file (read and checked now), or None."""
    found = path(True)(value, label)
    if found:
        from harness_magic.core.execution.connectors.policy import governance_from

        governance_from(policy_file=found)
    return found


def _prompt_caching_modes() -> tuple[str, ...]:
    from harness_magic.core.providers.adapter import PROMPT_CACHING_MODES

    return PROMPT_CACHING_MODES


# -- the table ----------------------------------------------------------------------------------------------


@dataclass
class AgentConfig:
    """Plain settings of a session, validated on construction (each by its one validator)."""

    model: str = setting(DEFAULT_MODEL, "Model id: any litellm id, or offline/<name>, scripted/<file.json>, "
                         "replay/<run.jsonl>.", model_id, applies="magics")
    api_base: str | None = setting(None, "Base URL of an OpenAI-compatible server (e.g. a local model); None uses "
                                   "the provider's default.", word("a URL", True))
    max_turns: int = setting(25, "Provider calls one %%agent cell may make.", at_least_one)
    sandbox: str = setting("worker", "Interpreter backend: 'worker' (confined subprocess), 'inprocess' (no security "
                           "boundary; for development) or 'unconfined' (the worker subprocess even where the OS cannot "
                           "confine it fully; warns what is missing).", one_of(lambda: SANDBOX_MODES))
    run_dir: str = setting("./runs", "Directory for the JSONL run logs.", path(False), notebook_default="runs")
    hot_count: int = setting(10, "Handles kept in memory before older ones spill to disk.", at_least_one)
    memory_budget_bytes: int | None = setting(None, "Bytes of cached values kept in memory before spilling; None: "
                                              "count only.", byte_budget, trait="memory_budget")
    spill_dir: str | None = setting(None, "Directory for spilled handles; None: a temporary directory.", path(True))
    stream: bool = setting(True, "Stream model text as it arrives.", flag)
    system_prompt: str = setting(DEFAULT_SYSTEM_PROMPT, "The system prompt (byte-stable across runs).", text,
                                 trait=None)
    allow_unconfined: bool = setting(False, "Let the worker run where the OS offers no confinement (with a "
                                     "warning).", flag, trait=None)
    extra: dict[str, Any] = setting({}, "Extra keyword arguments for every litellm call.", mapping, trait=None)
    max_tokens: int | None = setting(None, "Token budget per run, subagents included; None: unlimited. A run that "
                                     "spends it ends with status 'budget_tokens'.", whole_limit, applies="run")
    max_cost_usd: float | None = setting(None, "Cost budget per run in USD (litellm prices), subagents included; "
                                         "None: unlimited. Status 'budget_cost'.", number_limit, applies="run")
    max_wall_s: float | None = setting(None, "Wall-time budget per run in seconds, checked between steps; None: "
                                       "unlimited. Status 'budget_wall_time'.", number_limit, applies="run")
    max_tool_calls: int | None = setting(None, "Tool calls per run; None: unlimited. Status 'budget_tool_calls'.",
                                         whole_limit, applies="run")
    planner: bool = setting(True, "Offer the agent the 'plan' tool.", flag)
    reminders: bool = setting(True, "Remind the model when it makes no progress, and warn it on its last turn.",
                              flag)
    ask_confidence: bool = setting(False, "Ask the model to end each answer with 'Confidence: high, medium or low' "
                                   "and 'Open questions:' lines, shown in the run's state panel.", flag)
    prompt_caching: str = setting("auto", "Prompt-cache markers: 'auto' (only where litellm says the model caches "
                                  "prompts), 'on' (a custom gateway that caches) or 'off' (a gateway that rejects "
                                  "unknown fields).", one_of(_prompt_caching_modes))
    context_window: int | None = setting(None, "Input-token limit of the model; None: litellm's model information. "
                                         "Over it, older turns are compacted before a request.", token_window)
    materialize_max_bytes: int = setting(DEFAULT_MATERIALIZE_MAX_BYTES, "Bytes (Arrow) a lazy engine handle may "
                                         "bring into the kernel when agent code names it or %agent_pull copies it; "
                                         "over it the agent is told to aggregate in the engine first.",
                                         materialize_cap, applies="run")
    materialize_max_rows: int = setting(DEFAULT_MATERIALIZE_MAX_ROWS, "Rows a lazy engine handle may bring into the "
                                        "kernel when agent code names it or %agent_pull copies it; over it the agent "
                                        "is told to aggregate in the engine first.", materialize_cap, applies="run")
    masking: dict[str, str] = setting({"pii": "mask", "financial": "mask", "restricted": "deny"}, "Per class (pii, "
                                      "financial, restricted) what the model sees: 'allow', 'mask' (a stable "
                                      "pseudonym) or 'deny' (column listed, values never sent).", masking_policy)
    skill_dirs: tuple[str, ...] = setting((), "Directories of skill folders (<dir>/<name>/SKILL.md, the Agent Skills "
                                          "convention) offered beside the built-in skills; %agent_skills lists them.",
                                          directories)
    workspace_memory: str | None = setting(None, "Workspace memory file (relative to the kernel's working "
                                           "directory): definitions the user approved, kept across sessions, "
                                           "carried into each run and read by glossary connectors; None: none.",
                                           path(True), notebook_default=".harness_memory.yaml", reconnects=True)
    audit_log: str | None = setting(".harness_audit.jsonl", "The workspace's hash-chained audit log (relative to the "
                                    "kernel's working directory): approvals, denials, refusals, governed writes, "
                                    "masking, pulls and exports, never values; %agent_audit shows it, python -m "
                                    "harness_magic.audit verify checks it; None or '': not audited.", path(True))
    actor_role: str | None = setting(None, "Your role for the approval policy (a rule's approvers) and the audit log; "
                                     "the actor is the OS user. None: no role.", role_name, reconnects=True)
    max_questions: int = setting(3, "Clarifying questions (ask_user) one run may ask; over it the agent is told to "
                                 "state its assumption and go on (0: never asks).", question_count)
    question_timeout_s: float | None = setting(300.0, "Seconds a question or an approval waits for you in the cell; "
                                               "then it is withdrawn: the agent goes on under an assumption it "
                                               "states, a write is not approved. Other cells stay runnable meanwhile. "
                                               "None: no limit.", question_timeout)
    otel: str = setting("auto", "OpenTelemetry traces of each run (GenAI conventions; names, sizes, counts and classes, "
                        "never data values): 'auto' when OTEL_EXPORTER_OTLP_ENDPOINT or "
                        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, 'off', 'on' (OTLP/HTTP as the OTEL_* variables "
                        "say), or 'content' (as 'on', plus the prompt, tool arguments, results and answers, masked). "
                        "OTEL_SDK_DISABLED=true turns it off.", one_of(_otel_modes))
    max_query_rows: int | None = setting(None, "Rows one query's plan may be estimated to handle (its largest step, "
                                         "scans included), asked of the engine (DuckDB/PostgreSQL EXPLAIN, Spark "
                                         "EXPLAIN COST) before the query runs; over it the read asks first or, with "
                                         "no approver, is refused. None: not checked.", whole_limit, applies="run")
    max_query_cost: float | None = setting(None, "The engine's own cost estimate one query may have, asked before it "
                                           "runs (PostgreSQL: planner cost units; Spark: estimated bytes; DuckDB "
                                           "gives none); over it the read asks first or is refused. None: not "
                                           "checked.", number_limit, applies="run")
    max_write_operations: int | None = setting(None, "Approved writes (governed execute calls) per run; further "
                                               "writes are refused. 0: no write in a run. None: no count limit "
                                               "(prod writes still need allow_writes and an approval each).",
                                               write_count_limit, applies="run")
    provider_host: bool = setting(True, "Run litellm in a provider host process (started on the first model call, "
                                  "shared by the session's calls, stopped after provider_idle_s seconds without "
                                  "one), so the kernel never imports it. False: litellm in the kernel, as needed "
                                  "when you set litellm's module globals or register custom providers in the "
                                  "kernel, or pass Python objects in extra.", flag)
    provider_idle_s: float = setting(DEFAULT_IDLE_S, "Seconds the provider host waits without a model call before it "
                                     "exits, giving its memory back (the next call starts it again, in about "
                                     "as long as importing litellm takes).", idle_seconds)

    def budgets(self) -> Budgets:
        """The per-run budgets these settings ask for."""
        from harness_magic.core.control.budgets import Budgets

        return Budgets(max_tokens=self.max_tokens, max_cost_usd=self.max_cost_usd, max_wall_s=self.max_wall_s,
                       max_tool_calls=self.max_tool_calls, max_query_rows=self.max_query_rows,
                       max_query_cost=self.max_query_cost, max_write_operations=self.max_write_operations)

    def __post_init__(self) -> None:
        for one in _FIELD_SETTINGS:
            setattr(self, one.name, one.check(getattr(self, one.name), one.name))


def _value_type(annotation: Any) -> tuple[type, bool, type | None]:
    """``(type, nullable, item)`` of a field annotation such as ``int | None`` or ``tuple[str, ...]``."""
    args: tuple[Any, ...] = getattr(annotation, "__args__", ())
    if isinstance(annotation, types.UnionType):
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _value_type(inner)[0], True, None
    origin = getattr(annotation, "__origin__", annotation)
    if origin in (tuple, list):
        return list, False, args[0]
    return origin, False, None


def _field_settings() -> tuple[Setting, ...]:
    hints = get_type_hints(AgentConfig)
    found = []
    for one in dataclasses.fields(AgentConfig):
        declared: _Declared = one.metadata[_KEY]
        kind, nullable, item = _value_type(hints[one.name])
        default = one.default if one.default_factory is dataclasses.MISSING else one.default_factory()
        found.append(Setting(one.name, kind, default, declared.help, declared.check, nullable, item, declared.trait,
                             declared.notebook_default, declared.applies, declared.reconnects))
    return tuple(found)


_FIELD_SETTINGS = _field_settings()

SESSION_SETTINGS = (
    Setting("connectors", list, [], "Connectors of every new session, as for "
            "harness_magic.core.execution.connectors.connectors_from_config, e.g. [{'type': 'files', 'roots': "
            "['data']}].", connector_entries, item=dict, reconnects=True, field=False),
    Setting("policy", dict, {}, "Governance table {'rules': [{environment, safety, sensitivity, action, approvers}, "
            "...]}: first match decides allow/ask/deny per environment, risk and sensitivity "
            "(harness_magic.core.execution.connectors.policy).", governance_table, reconnects=True, field=False),
    Setting("policy_file", str, None, "The same table as a YAML file (instead of AgentMagics.policy).",
            governance_file, nullable=True, reconnects=True, field=False),
    Setting("subagents", bool, True, "Offer the agent the 'subagent' tool (delegation to an isolated subagent).",
            flag, applies="magics", field=False),
)
"""Settings the session takes beside its :class:`AgentConfig` (``AgentSession(config, connectors=...,
subagents=...)``)."""

SETTINGS: tuple[Setting, ...] = _FIELD_SETTINGS + SESSION_SETTINGS
"""Every setting of a session, each declared once (the notebook adds its own display settings)."""


def setting_named(name: str) -> Setting:
    """The setting ``name`` (a field or trait name); ValueError naming it and the settings there are."""
    for one in SETTINGS:
        if name in (one.name, one.trait_name):
            return one
    raise ValueError(f"no setting {name!r}; settings: {', '.join(one.name for one in SETTINGS)}")
