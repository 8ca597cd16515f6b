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
