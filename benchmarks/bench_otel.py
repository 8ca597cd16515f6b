"""OpenTelemetry traces: what tracing costs a run, the first traced run, and a process exiting.

Run::

    .venv/bin/python benchmarks/bench_otel.py

1. per run: a harness over an offline scripted model (10 tool calls, 11 model calls) run with and
   without a :class:`~harness_magic.core.control.tracing.RunTracer` (the SDK's provider, a simple
   processor and the in-memory exporter: the subscriber's own cost plus the SDK's);
2. the first traced run: importing the SDK and the OTLP/HTTP exporter (``tracer_for``), in a fresh
   interpreter; tracing off imports neither;
3. exit: the batch processor's shutdown after one span, to a port where nothing listens (refused)
   and to a server that accepts and never answers (the exporter's timeout bounds it; 2 s here).

Measured on the 2-core development machine (busy with other work; three runs of this script): a run
of 22 spans took 4-9 ms without tracing and 6-15 ms with it (medians of 21 runs; about 0.1-0.5 ms per
span, noise included); importing the SDK and exporter 0.26-0.41 s, once per process (median of 5
fresh interpreters); shutdown 0.8-1.2 s with the port refused (the exporter retries with backoff
until its timeout) and 2.01 s against the silent server: the exporter's timeout
(OTEL_EXPORTER_OTLP_TIMEOUT=2 here; 10 s by default) bounds the wait at exit. A run never waits:
spans are exported from the processor's thread.
"""

from __future__ import annotations

import json
import statistics
import socket
import subprocess
import sys
import time

RUN = r"""
import json, shutil, statistics, tempfile, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from harness_magic.core.agent.loop import Harness
from harness_magic.core.control.tracing import RunTracer
from harness_magic.core.execution.tools import ToolSpec
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.providers.offline import ScriptedModel

TURNS = [{"tool_calls": [{"name": "echo", "arguments": {"text": f"step {i}"}}]} for i in range(10)] + [{"text": "done"}]
echo = ToolSpec(name="echo", description="Echo.", parameters={"type": "object", "properties": {"text": {"type": "string"}}},
                handler=lambda text: text)
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
run_dir = tempfile.mkdtemp()

def one(traced):
    harness = Harness(ProviderAdapter("scripted/bench", transport=ScriptedModel(list(TURNS))), "sys", [echo],
                      max_turns=20, run_dir=run_dir)
    if traced:
        harness.subscribe(RunTracer(provider.get_tracer("bench"), harness))
    start = time.perf_counter()
    harness.run_result("go")
    return time.perf_counter() - start

one(False); one(True)
exporter.clear()
one(True)
spans = len(exporter.get_finished_spans())
out = {}
for traced in (False, True):
    out[traced] = statistics.median(one(traced) for _ in range(21))
print(json.dumps({"plain_s": out[False], "traced_s": out[True], "spans_per_run": spans}))
shutil.rmtree(run_dir)  # the runs' logs: nothing is left behind
"""

IMPORT = r"""
import json, time
t0 = time.perf_counter()
from harness_magic.core.control.tracing import tracer_for
tracer_for()
print(json.dumps({"import_s": time.perf_counter() - t0}))
"""

SHUTDOWN = r"""
import json, os, sys, time
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
provider = TracerProvider(shutdown_on_exit=False)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
provider.get_tracer("bench").start_span("one").end()
t0 = time.perf_counter()
provider.shutdown()
print(json.dumps({"shutdown_s": time.perf_counter() - t0}))
"""


def _probe(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    import os

    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    run = _probe(RUN)
    print(f"run without tracing {run['plain_s'] * 1000:.1f} ms, with it {run['traced_s'] * 1000:.1f} ms "
          f"({run['spans_per_run']} spans)")
    imports = statistics.median(_probe(IMPORT)["import_s"] for _ in range(5))
    print(f"first traced run imports the SDK and exporter: {imports:.2f} s")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections complete in the backlog, requests are never answered
    with silent:
        for label, endpoint in (("refused port", "http://127.0.0.1:9/v1/traces"),
                                ("silent server", f"http://127.0.0.1:{silent.getsockname()[1]}/v1/traces")):
            start = time.perf_counter()
            result = _probe(SHUTDOWN, endpoint, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
            print(f"shutdown, {label}: {result['shutdown_s']:.2f} s (process {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
