"""Errors and warnings raised by the session cache.

Hierarchy::

    KeyError
     └── CacheError                 base of every cache failure about one handle
          ├── UnknownHandleError    the handle does not exist (typo, retired)
          ├── SpillReadError        the handle's spill file is missing or corrupt
          ├── BoundaryCopyError     no safe copy of the value can be made
          └── CheckpointError       a checkpoint cannot be written or read

    UserWarning
     ├── SpillWarning               a value could not be written to disk and
     │                              stays in memory (nothing is lost)
     └── CheckpointWarning          a checkpoint loaded, but an engine handle in
                                    it could not be re-bound (it is named)

``CacheError`` subclasses ``KeyError`` so that code which looks a handle up
and handles ``KeyError`` keeps working; unlike ``KeyError`` its ``str()`` is
the plain message (no quotes), because messages go to the model and the user.
Every message names the handle it is about.
"""

from __future__ import annotations

__all__ = [
    "CacheError",
    "UnknownHandleError",
    "SpillReadError",
    "BoundaryCopyError",
    "CheckpointError",
    "SpillWarning",
    "CheckpointWarning",
]


class CacheError(KeyError):
    """A cache operation on a handle failed; ``handle`` names it (or None)."""

    def __init__(self, message: str, *, handle: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.handle = handle

    def __str__(self) -> str:
        return self.message


class UnknownHandleError(CacheError):
    """No handle of that name exists; the message lists the known handles."""


class SpillReadError(CacheError):
    """A spilled value could not be read back (file deleted or corrupt).

    The handle stays listed (its snapshot is still valid) until retired; every
    other handle keeps working.
    """


class BoundaryCopyError(CacheError):
    """A value cannot be copied safely across the copy boundary."""


class CheckpointError(CacheError):
    """A checkpoint could not be saved or loaded; nothing partial is left valid."""


class SpillWarning(UserWarning):
    """A value could not be spilled to disk and stays in memory."""


class CheckpointWarning(UserWarning):
    """A checkpoint loaded, but some engine handles in it could not be re-bound; each is named with the reason."""
