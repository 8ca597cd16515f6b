"""Moving values between the kernel and the worker through files, with the cache's one codec.

Both directions use the same encoder/decoder as the cache's spill files
(:func:`harness_magic.core.cache.spill.frame_to_table` /
:func:`~harness_magic.core.cache.spill.table_to_frame` for frames and series,
``.npy`` for arrays, :mod:`harness_magic.core.cache.codec` tagged JSON for
everything else), so a kind that survives a spill survives the worker:
labels of any type, ``freq``, ``flags``, ``attrs``, categoricals in indexes
and columns, Python objects in object columns, memory order. A value the
codec cannot carry exactly is refused with an error naming its kind — never
turned into a placeholder or a repr string. Nothing is pickled either way.

Inputs (kernel -> worker): Arrow IPC files (uncompressed) and ``.npy`` in the
session's input directory (striped over one file per core when large, like
results); the worker memory-maps them read-only.

Results (worker -> kernel): the worker writes each table or array into
memory files (``memfd_create``; a large one striped over several, written in
parallel), seals them against writing, growing and shrinking
(``F_ADD_SEALS``) and passes the descriptors over a socketpair made before it
confined itself (:func:`receive_sealed`). The kernel checks the seals, the
type and the sizes, and maps them read-only as one buffer: sealed means the
worker can no longer change it, so no safety copy is made
(:func:`read_sealed_result`, :mod:`harness_magic.core.execution.sandbox.sealed`).
Without that channel, results are scratch files: the kernel opens them
without following links, checks they are regular files within the size cap
and copies them into its own memory. Either way it then walks the Arrow
message metadata *before decoding anything*: compressed bodies are refused,
every buffer must lie inside its message body, and the decoded size
(buffers plus what pandas materialises per row) must stay under the cap.
Then the data is validated in full before pandas sees it. ``.npy`` loads
with ``allow_pickle=False``. Nothing is unpickled or evaluated.

Trailing-expression values of a kind the codec does not know (a figure, a
model object) come back as a bounded :class:`RemoteObject` repr for the model
to read; *saved* values are never placeholders: they are exact or refused.

This module is the face of three: :mod:`.transfer_codec` (the value kinds and
their byte writers, shared), :mod:`.transfer_kernel` (writing inputs, checking
and rebuilding results) and :mod:`.transfer_worker` (mapping inputs, writing
results, inside the worker). Every name it offered before the split is
re-exported here.
"""

from harness_magic.core.execution.sandbox.transfer_codec import (
    RESULT_MAX_BYTES,
    SERIES_COLUMN,
    TransferRefused,
    input_files,
)
from harness_magic.core.execution.sandbox.transfer_kernel import (
    ROW_MATERIALISE_BYTES,
    check_ipc_file,
    read_result,
    read_sealed_result,
    receive_sealed,
    write_input,
)
from harness_magic.core.execution.sandbox.transfer_worker import (
    keep_input_tables,
    read_input,
    set_result_channel,
    write_result,
)

__all__ = [
    "RESULT_MAX_BYTES",
    "TransferRefused",
    "write_input",
    "read_input",
    "write_result",
    "read_result",
    "check_ipc_file",
    "SERIES_COLUMN",
    "input_files",
    "keep_input_tables",
    "set_result_channel",
    "receive_sealed",
    "read_sealed_result",
    "ROW_MATERIALISE_BYTES",
]
