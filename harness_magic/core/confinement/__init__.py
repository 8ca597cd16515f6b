"""OS boundary primitives shared by every confined process and every read beneath a root.

* :mod:`.layers` — confinement layers applied in a child before it runs anything untrusted
  (clean environment, rlimits, namespaces, dropping root, Landlock, seccomp), each probed on its own;
  used by the sandbox worker, the local Spark server's supervisor and the docs extraction child.
* :mod:`.safe_open` — ``openat2`` beneath a root with no symlinks and no hard links unless allowed;
  used by the files connector and the docs index.
* :mod:`.heap` — handing freed memory back to the system (glibc's heap, Arrow's pool); used by the sandbox
  worker after a call that grew it, the session cache after a spill and the provider host after its imports.

Nothing here imports the rest of the package: :mod:`.layers` and :mod:`.safe_open` are also loaded by
path in children that must not import site-packages once confined.
"""
