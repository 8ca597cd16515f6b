"""Session cache: the agent's working memory (handles, snapshots, spill)."""

from harness_magic.core.cache.names import resolve_handle_name, sanitize_identifier
from harness_magic.core.cache.session import SessionCache
from harness_magic.core.cache.snapshot import make_snapshot

__all__ = ["SessionCache", "make_snapshot", "resolve_handle_name", "sanitize_identifier"]
