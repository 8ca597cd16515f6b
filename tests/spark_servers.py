"""JVM settings for the local Spark Connect servers the tests start: a quicker start, the same SQL."""

from __future__ import annotations

from collections.abc import Mapping

QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""HotSpot's first compiler tier only, and the serial collector. A test server answers short queries on small
data, where the optimising compiler's threads cost more CPU than they win back: measured on the 2-core machine,
a server was ready after 6 s of JVM CPU instead of 11, and had used 12 s instead of 20 after its first queries.
Only how the JVM compiles Spark's own code changes, not what a query returns."""


def quick_jvm(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """``conf`` for a test's local server with :data:`QUICK_JVM_OPTIONS` as its driver's JVM options (the
    server puts ``spark.driver.extraJavaOptions`` on the JVM's command line); a test's own options win."""
    return {"spark.driver.extraJavaOptions": QUICK_JVM_OPTIONS, **(conf or {})}


QUICK_JVM_CELL = f"""\
import harness_magic.core.execution.connectors.spark.server as _quick_jvm_server
_quick_jvm_server._JVM_OPTIONS += tuple({QUICK_JVM_OPTIONS.split()!r})
del _quick_jvm_server
"""
"""A cell the suite runs in a kernel before a shipped notebook that starts a local Spark server
(:func:`starts_local_spark`): every server the kernel starts from then on gets :data:`QUICK_JVM_OPTIONS` too.
The notebook itself is run unchanged and its JVM settings stay what users get; the cell leaves no name behind.
The suite runs such a notebook five times (nbval once, twice in one kernel, its connector cells twice)."""


def starts_local_spark(source: str) -> bool:
    """Whether a notebook's text (its cells' sources) starts a private local Spark server."""
    return "spark_connector(" in source and "master=" in source
