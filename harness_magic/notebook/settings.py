"""``AgentMagics``' traits, derived from the core's table of settings (:data:`harness_magic.core.config.SETTINGS`).

Nothing here declares a setting of the session again: :func:`setting_traits`
turns each :class:`~harness_magic.core.config.Setting` the notebook offers
into a configurable trait (its type, default, help and ``config=True``, so
``%config AgentMagics`` shows the help), and :func:`check_trait` validates a
value with the setting's one validator. The notebook's own settings (how a
run is shown and whether it shows real values, whether an error stops Run All, prestarting the sandbox) are
:data:`NOTEBOOK_SETTINGS`, declared the same way.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Dict, Float, Integer, List, TraitType, Unicode

from harness_magic.core.config import SETTINGS, AgentConfig, Setting, flag, one_of
from harness_magic.notebook.arguments import LIVE_MODES

__all__ = ["NOTEBOOK_SETTINGS", "ALL_SETTINGS", "setting_traits", "check_trait", "config_from", "trait_names"]

NOTEBOOK_SETTINGS = (
    Setting("live", str, "auto", "Live view: 'auto', 'widgets', 'rich' or 'off'.", one_of(lambda: LIVE_MODES),
            applies="magics", field=False),
    Setting("prestart_sandbox", bool, False, "Start the sandbox's launcher in the background when the extension "
            "loads (otherwise the sandbox starts with the session's first run, beside the first model request).",
            flag, applies="magics", field=False),
    Setting("raise_on_error", bool, True, "A %%agent run that ends in error (not an interrupt, budget or turn "
            "limit) raises AgentRunError after its output is shown, so Run All stops there; False: the cell passes "
            "and its value is the failed RunResult.", flag, applies="magics", field=False),
    Setting("show_real_values", bool, False, "Show the real values of pseudonymised columns in the live view of a "
            "run (for you at the keyboard); the cell's final output, a saved notebook, the run log and exports "
            "still hold what the model saw.", flag, applies="magics", field=False),
)
"""Settings of the notebook layer only (the session never reads them)."""

ALL_SETTINGS: tuple[Setting, ...] = tuple(one for one in SETTINGS + NOTEBOOK_SETTINGS if one.trait_name is not None)
"""Every setting ``AgentMagics`` offers, in declaration order."""

_BY_TRAIT: dict[str, Setting] = {one.trait_name: one for one in ALL_SETTINGS if one.trait_name is not None}
_TRAIT_TYPES: dict[type, type[TraitType[Any, Any]]] = {str: Unicode, int: Integer, float: Float, bool: Bool}


def _trait(one: Setting) -> TraitType[Any, Any]:
    """The configurable trait for ``one``."""
    default = one.trait_default
    if one.type is list:
        trait: TraitType[Any, Any] = List(Dict() if one.item is dict else Unicode(), default_value=list(default),
                                          help=one.help)
    elif one.type is dict:
        trait = Dict(default_value=dict(default), help=one.help)
    else:
        trait = _TRAIT_TYPES[one.type](default, allow_none=one.nullable, help=one.help)
    return trait.tag(config=True)


def setting_traits() -> dict[str, TraitType[Any, Any]]:
    """One configurable trait per setting the notebook offers, by trait name (for the class body)."""
    return {name: _trait(one) for name, one in _BY_TRAIT.items()}


def trait_names(*, applies: str | None = None, reconnects: bool | None = None) -> tuple[str, ...]:
    """The traits whose settings take effect as ``applies`` says (any when None) and rebuild connectors or not."""
    return tuple(name for name, one in _BY_TRAIT.items()
                 if (applies is None or one.applies == applies) and (reconnects is None or one.reconnects == reconnects))


def check_trait(name: str, value: Any) -> Any:
    """``value`` checked by trait ``name``'s one validator (ValueError naming the trait and the value)."""
    return _BY_TRAIT[name].validate(value, name)


def config_from(values: Any) -> AgentConfig:
    """The :class:`AgentConfig` for the current trait values of ``values`` (an ``AgentMagics``)."""
    return AgentConfig(**{one.name: getattr(values, one.trait_name) for one in ALL_SETTINGS
                          if one.field and one.trait_name is not None})
