"""Notebook-layer costs: extension load time and ``%%agent`` overhead before the first model request.

    .venv/bin/python benchmarks/bench_notebook.py

* **load**: ``%load_ext harness_magic`` in a fresh interpreter (median of several
  subprocesses), and whether it imported litellm or pandas (it must not).
* **overhead**: time from entering the ``%%agent`` cell magic to the first
  provider request, in a shell with the extension loaded; the first cell pays
  for the session (cache, tools, widgets import), later cells only for argument
  parsing, ``--in`` copies and the live view. The model is a stub that answers
  at once, so nothing else is measured.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
import time

LOAD_RUNS = 5
"""Fresh interpreters for the load figure (each costs ~1 s of IPython start-up)."""
CELL_RUNS = 20
"""Warm %%agent cells for the overhead figure."""

LOAD = textwrap.dedent("""\
    import sys, time, json
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    t = time.perf_counter()
    shell.run_line_magic("load_ext", "harness_magic")
    print(json.dumps({"s": time.perf_counter() - t, "litellm": "litellm" in sys.modules,
                      "pandas": "pandas" in sys.modules}))
""")

OVERHEAD = textwrap.dedent("""\
    import json, time
    from IPython.core.interactiveshell import InteractiveShell
    import harness_magic.core.providers.offline as offline

    marks = []

    class Stub:
        name = "stub"
        def complete(self, payload, on_text):
            marks.append(time.perf_counter())
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                 "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        async def acomplete(self, payload, on_text):
            return self.complete(payload, on_text)

    offline.offline_transport = lambda model: Stub()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harness_magic")
    shell.run_line_magic("config", 'AgentMagics.sandbox = "inprocess"')
    shell.run_line_magic("config", 'AgentMagics.live = "LIVE"')
    shell.run_line_magic("config", 'AgentMagics.run_dir = "RUNDIR"')
    shell.run_line_magic("config", 'AgentMagics.model = "offline/quickstart"')
    import pandas as pd
    shell.user_ns["frame"] = pd.DataFrame({"a": range(10_000), "b": [str(i) for i in range(10_000)]})
    times = []
    for i in range(CELL_RUNS + 1):
        start = time.perf_counter()
        shell.run_cell_magic("agent", "--in frame", "Hello?")
        times.append(marks[-1] - start)
    print(json.dumps({"first": times[0], "warm": sorted(times[1:])[len(times[1:]) // 2]}))
""")


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import tempfile

    loads = [_run(LOAD) for _ in range(LOAD_RUNS)]
    median = statistics.median(r["s"] for r in loads)
    print(f"%load_ext harness_magic: median {median * 1000:.0f} ms over {LOAD_RUNS} fresh interpreters "
          f"(budget 500 ms); imports litellm: {any(r['litellm'] for r in loads)}, "
          f"pandas: {any(r['pandas'] for r in loads)}")
    with tempfile.TemporaryDirectory() as run_dir:
        for live in ("off", "rich", "widgets"):
            code = OVERHEAD.replace("LIVE", live).replace("RUNDIR", run_dir).replace("CELL_RUNS", str(CELL_RUNS))
            r = _run(code)
            print(f"%%agent --in frame (10k rows), live={live}: first cell {r['first'] * 1000:.0f} ms, "
                  f"then median {r['warm'] * 1000:.1f} ms before the model request")


if __name__ == "__main__":
    main()
