"""``%agent_checkpoint``: keep the agent's cache across kernel restarts.

``%agent_checkpoint save DIR``
    Write every cached handle (values, snapshots, provenance) to ``DIR``;
    all or nothing (:meth:`~harness_magic.core.cache.SessionCache.save`).
``%agent_checkpoint load DIR``
    Replace the session's cache by the checkpoint in ``DIR``; the
    conversation is kept. Lazy engine handles are re-bound on the session's
    connectors through their usual read-only checks; any that cannot be are
    named (and shown by ``%agent_status``). A checkpoint that cannot be read
    leaves the cache as it was.

Nothing in a checkpoint is decoded into code: values are Arrow/Parquet/NumPy
files checked against their recorded digests (see :mod:`harness_magic.core.cache.checkpoint`).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from harness_magic.core.text.counts import count

__all__ = ["CheckpointMagics"]

ACTIONS = ("save", "load")
"""What ``%agent_checkpoint`` does with its directory."""


@magics_class
class CheckpointMagics(Magics):
    """``%agent_checkpoint`` over ``agent_magics``' session cache."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    @no_var_expand
    @magic_arguments()
    @argument("action", help="save: write the cache to DIR; load: replace the cache by the checkpoint in DIR.")
    @argument("directory", metavar="DIR", help="The checkpoint's directory (created by save).")
    @line_magic
    def agent_checkpoint(self, line: str) -> None:
        """Save the agent's cache to a directory, or load it back (after a kernel restart)."""
        from harness_magic.core.cache.errors import CheckpointError, CheckpointWarning

        args = parse_argstring(self.agent_checkpoint, line)
        if args.action not in ACTIONS:
            raise UsageError(f"%agent_checkpoint: action must be one of {', '.join(ACTIONS)}, got {args.action!r}")
        session = self._agent.session
        if args.action == "save":
            try:
                manifest = session.cache.save(args.directory)
            except (CheckpointError, OSError) as exc:
                raise UsageError(f"%agent_checkpoint save: {exc}") from None
            print(f"saved {count(len(session.cache.names()), 'handle')} to {manifest.parent}")
            return
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CheckpointWarning)
            try:
                cache = session.restore_checkpoint(args.directory)
            except (CheckpointError, OSError) as exc:
                raise UsageError(f"%agent_checkpoint load: {exc} (the cache is unchanged)") from None
        names = cache.names()
        print(f"loaded {count(len(names), 'handle')} from {args.directory}: {', '.join(names) or '(none)'}")
        missing = cache.not_restored
        for name, why in missing.items():
            print(f"not restored: {name} ({why})", file=sys.stderr)
        for item in caught:
            if not issubclass(item.category, CheckpointWarning):
                warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
