"""Integrity of cache files: striped SHA-256 digests, and reading a file checked against one.

Contract: :func:`file_digest`, :func:`buffer_digest` and :func:`new_hasher`
give the same hex digest for the same bytes, whatever the thread count, for
every algorithm of :data:`DIGEST_ALGORITHMS` (:data:`DIGEST_ALGORITHM`, the
striped SHA-256 of :func:`striped_digest`, for new files; plain SHA-256 and
BLAKE2b for files older checkpoints recorded). :func:`read_checked` reads a
file once into memory and checks the digest of those very bytes, so what the
caller decodes is what was checked; a mismatch, or a file changing size while
it is read, raises :class:`SpillIntegrityError`, never wrong data.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Callable

__all__ = [
    "SpillIntegrityError",
    "new_hasher",
    "striped_digest",
    "buffer_digest",
    "file_digest",
    "read_checked",
    "DIGEST_ALGORITHM",
    "DIGEST_ALGORITHMS",
    "DIGEST_SIZE",
    "DIGEST_STRIPE_BYTES",
    "HASH_THREADS_MAX",
    "HASH_PARALLEL_MIN_BYTES",
]

DIGEST_ALGORITHM = "sha256-stripes"
"""Digest of new spill files (:func:`striped_digest`): SHA-256 of each stripe, hashed on parallel threads
as the file is read, then SHA-256 over the stripes' digests; as collision-resistant as SHA-256 itself."""
DIGEST_ALGORITHMS = ("sha256-stripes", "sha256", "blake2b")
"""Digests a record may carry: plain SHA-256 is what version-3 checkpoints hold, BLAKE2b version 2."""
DIGEST_SIZE = 32
"""Digest bytes per file (every algorithm): 64 hex characters."""
DIGEST_STRIPE_BYTES = 4 * 1024**2
"""Stripe of the striped digest; part of its definition (another size gives other digests): large enough
that per-stripe overhead vanishes, small enough that a 16 MiB file already splits over four threads."""
HASH_THREADS_MAX = 8
"""Threads reading and hashing one file at most: past this, memory bandwidth is the limit, not the CPU."""
HASH_PARALLEL_MIN_BYTES = 16 * 1024**2
"""Files smaller than this are read and hashed on the calling thread: starting threads would cost more."""
_HASH_CHUNK = 4 * 1024**2
"""Bytes hashed per read: large enough to run at memory speed, small enough to stay cache-friendly."""
_STRIPES_TAG = b"harness_magic sha256-stripes 4MiB\x00"
"""Prefix of the striped digest's final hash: names the scheme and stripe size the digests belong to."""


class SpillIntegrityError(Exception):
    """A spill file's bytes do not match the digest recorded when it was written."""


class _StripedHasher:
    """:data:`DIGEST_ALGORITHM` fed sequentially (``update``/``hexdigest``, as hashlib objects are)."""

    def __init__(self) -> None:
        self._digests: list[bytes] = []
        self._stripe = hashlib.sha256()
        self._filled = 0
        self._size = 0

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        self._size += len(view)
        while len(view):
            take = min(len(view), DIGEST_STRIPE_BYTES - self._filled)
            self._stripe.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == DIGEST_STRIPE_BYTES:
                self._digests.append(self._stripe.digest())
                self._stripe, self._filled = hashlib.sha256(), 0

    def hexdigest(self) -> str:
        digests = self._digests + ([self._stripe.digest()] if self._filled else [])
        return _combine(self._size, digests)


def _combine(size: int, digests: list[bytes]) -> str:
    """The striped digest of ``size`` bytes from its stripes' SHA-256 digests, in order."""
    top = hashlib.sha256(_STRIPES_TAG + size.to_bytes(8, "big"))
    for digest in digests:
        top.update(digest)
    return top.hexdigest()


def new_hasher(algorithm: str = DIGEST_ALGORITHM, data: Any = b"") -> Any:
    """A sequential hasher (``update``/``hexdigest``) for ``algorithm`` (one of :data:`DIGEST_ALGORITHMS`), fed ``data``."""
    if algorithm == "sha256-stripes":
        hasher = _StripedHasher()
        hasher.update(data)
        return hasher
    if algorithm == "sha256":
        return hashlib.sha256(data)
    if algorithm == "blake2b":
        return hashlib.blake2b(data, digest_size=DIGEST_SIZE)
    raise ValueError(f"digest algorithm {algorithm!r} is not supported; allowed: {', '.join(DIGEST_ALGORITHMS)}")


def _hash_threads(size: int) -> int:
    """Threads that read and hash a file of ``size`` bytes: one below :data:`HASH_PARALLEL_MIN_BYTES`."""
    if size < HASH_PARALLEL_MIN_BYTES:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(HASH_THREADS_MAX, cpus, -(-size // DIGEST_STRIPE_BYTES)))


def striped_digest(size: int, stripe: Callable[[int, int], bytes]) -> str:
    """:data:`DIGEST_ALGORITHM` of ``size`` bytes; ``stripe(start, end)`` returns the SHA-256 digest of
    bytes [start, end) (reading them first where they come from a file).

    Definition: SHA-256 of :data:`_STRIPES_TAG`, the size as 8 big-endian
    bytes, and the digests of consecutive :data:`DIGEST_STRIPE_BYTES` stripes
    in order (the last one shorter). Stripes are computed on up to
    :data:`HASH_THREADS_MAX` threads, each taking a contiguous run (hashlib
    releases the GIL while hashing, os.preadv while reading); the digest does
    not depend on the thread count. An exception in any stripe propagates.
    """
    count = -(-size // DIGEST_STRIPE_BYTES)
    digests = [b""] * count
    threads = _hash_threads(size)

    def run(part: int) -> None:
        for index in range(part * count // threads, (part + 1) * count // threads):
            start = index * DIGEST_STRIPE_BYTES
            digests[index] = stripe(start, min(size, start + DIGEST_STRIPE_BYTES))

    if threads == 1:
        run(0)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads, thread_name_prefix="spill-digest") as pool:
            for done in [pool.submit(run, part) for part in range(threads)]:
                done.result()
    return _combine(size, digests)


def buffer_digest(data: Any, algorithm: str = DIGEST_ALGORITHM) -> str:
    """Hex digest of bytes in memory by ``algorithm`` (striped ones on parallel threads)."""
    view = memoryview(data).cast("B")
    if algorithm != "sha256-stripes":
        return new_hasher(algorithm, view).hexdigest()
    return striped_digest(len(view), lambda start, end: hashlib.sha256(view[start:end]).digest())


def file_digest(path: Path | str, algorithm: str = DIGEST_ALGORITHM) -> str:
    """Hex digest of a file by ``algorithm``, read in chunks (striped digests: stripes on parallel threads)."""
    with open(path, "rb", buffering=0) as source:
        if algorithm == "sha256-stripes":
            fd = source.fileno()
            local = threading.local()

            def stripe(start: int, end: int) -> bytes:
                scratch = getattr(local, "scratch", None)
                if scratch is None:
                    scratch = local.scratch = memoryview(bytearray(DIGEST_STRIPE_BYTES))
                _pread_exactly(fd, scratch[: end - start], start, path)
                return hashlib.sha256(scratch[: end - start]).digest()

            digest = striped_digest(os.fstat(fd).st_size, stripe)
            if os.pread(fd, 1, os.fstat(fd).st_size):
                raise SpillIntegrityError(f"{Path(path).name} changed size while it was read")
            return digest
        digest = new_hasher(algorithm)
        chunk = bytearray(_HASH_CHUNK)
        view = memoryview(chunk)
        while True:
            n = source.readinto(chunk)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest()


def _pread_exactly(fd: int, view: memoryview, offset: int, path: Path | str) -> None:
    """Fill ``view`` from ``fd`` at ``offset``; a file that ends early changed size while it was read."""
    filled = 0
    while filled < len(view):
        n = os.preadv(fd, [view[filled:]], offset + filled)
        if not n:
            raise SpillIntegrityError(f"{Path(path).name} changed size while it was read")
        filled += n


def read_checked(path: Path, digest: str, algorithm: str = DIGEST_ALGORITHM) -> Any:
    """The file's bytes in one Arrow buffer, after checking them against ``digest`` (hex, by ``algorithm``).

    Striped digests: each thread reads its stripes straight into the buffer and
    hashes each while it is still in cache. The buffer comes from Arrow's pool,
    which the caller empties afterwards
    (:func:`~harness_magic.core.confinement.heap.release_freed_memory`): a glibc
    allocation this large would raise glibc's mmap threshold and leave later
    frames' columns resident on its heap. A file that changes size meanwhile is refused.
    """
    import pyarrow as pa

    with open(path, "rb", buffering=0) as source:
        fd = source.fileno()
        size = os.fstat(fd).st_size
        data = pa.allocate_buffer(size)
        view = memoryview(data)
        try:
            actual = _fill_and_digest(fd, view, algorithm, path)
            if os.pread(fd, 1, size):
                raise SpillIntegrityError(f"{path.name} changed size while it was read")
        finally:
            view.release()
    if actual != digest:
        raise SpillIntegrityError(f"{path.name} does not match its {algorithm} digest (the file changed)")
    return data


def _fill_and_digest(fd: int, view: memoryview, algorithm: str, path: Path) -> str:
    """Read the whole file into ``view`` and return the digest of those bytes by ``algorithm``."""
    if algorithm != "sha256-stripes":
        _pread_exactly(fd, view, 0, path)
        return new_hasher(algorithm, view).hexdigest()

    def stripe(start: int, end: int) -> bytes:
        _pread_exactly(fd, view[start:end], start, path)
        return hashlib.sha256(view[start:end]).digest()

    return striped_digest(len(view), stripe)
