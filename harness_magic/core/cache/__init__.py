"""Session cache: the agent's working memory (handles, snapshots, spill, copy boundary).

Modules, one job each:

* :mod:`.names` — handle names: valid identifiers, never a silent overwrite.
* :mod:`.snapshot` — ``ls`` + ``head`` summaries, bounded JSON.
* :mod:`.sizing` — fast memory estimates for the byte budget.
* :mod:`.boundary` — copies handed out that cannot change the cache.
* :mod:`.codec` — tagged JSON: the code-free encoding of Python objects read back.
* :mod:`.frames` — frames and series as Arrow tables, exactly (the frame codec).
* :mod:`.digest` — striped SHA-256 digests; files read once and checked on those bytes.
* :mod:`.spill` — exact on-disk formats (Arrow IPC, Parquet, ``.npy``, tagged JSON) of one value.
* :mod:`.spill_dir` — the private directory a cache owns, removed at cleanup.
* :mod:`.checkpoint` — the checkpoint manifest: versions, validation, writing.
* :mod:`.session` — :class:`SessionCache`: handles, hot set, spill, hydrate, save/load.
* :mod:`.guard` — :class:`EntryGuard`: the seam every stored value passes (masking at entry).
* :mod:`.errors` — the exception hierarchy and :class:`SpillWarning`.
"""

from harness_magic.core.cache.boundary import boundary_copy
from harness_magic.core.cache.errors import (
    BoundaryCopyError,
    CacheError,
    CheckpointError,
    CheckpointWarning,
    SpillReadError,
    SpillWarning,
    UnknownHandleError,
)
from harness_magic.core.cache.guard import ColumnSources, EntryGuard
from harness_magic.core.cache.names import resolve_handle_name, sanitize_identifier
from harness_magic.core.cache.session import (
    DEFAULT_HOT_COUNT,
    DEFAULT_MEMORY_BUDGET_BYTES,
    HandleInfo,
    SessionCache,
)
from harness_magic.core.cache.sizing import estimate_nbytes
from harness_magic.core.cache.snapshot import SNAPSHOT_MAX_BYTES, make_snapshot, snapshot_json

__all__ = [
    "SessionCache",
    "EntryGuard",
    "ColumnSources",
    "HandleInfo",
    "make_snapshot",
    "snapshot_json",
    "boundary_copy",
    "estimate_nbytes",
    "resolve_handle_name",
    "sanitize_identifier",
    "CacheError",
    "UnknownHandleError",
    "SpillReadError",
    "BoundaryCopyError",
    "CheckpointError",
    "CheckpointWarning",
    "SpillWarning",
    "DEFAULT_HOT_COUNT",
    "DEFAULT_MEMORY_BUDGET_BYTES",
    "SNAPSHOT_MAX_BYTES",
]
