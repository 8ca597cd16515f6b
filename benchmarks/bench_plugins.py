"""Plugins: what reading the entry-point groups costs a process, and what each session pays after that.

Run::

    .venv/bin/python benchmarks/bench_plugins.py

Each measurement runs in a fresh interpreter (the registry caches per process):

1. the first look at a group: one scan of every installed distribution's entry points, shared by
   the four groups (the floor: ``importlib.metadata.entry_points()`` alone in the same process);
2. loading every plugin of every group (what ``%agent_status`` does): importing the built-in
   connector types (their engines are imported only when a connector is built), graders and skills;
3. per session after that: adding the tool plugins' tools to a harness, and ``load_skills()``
   (the plugin directories are read again each session: skill files may change between sessions).

Measured on the 2-core development machine (busy with other work), medians of 5 processes: the
registry's scan 65 ms (after a bare ``entry_points()`` in the same fresh process took 166 ms), every
group after the first 1.2 ms; loading everything 0.25 s, most of it importing the evals graders;
per session, plugin tools under 0.01 ms, ``load_skills()`` 59 ms (as before plugins: the built-in
directory was read each session then too).
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import json, time
t0 = time.perf_counter()
from importlib.metadata import entry_points
entry_points()
floor = time.perf_counter() - t0
from harness_magic.core.execution.connectors.types import CONNECTOR_TYPES
from harness_magic.core.execution.tool_plugins import TOOL_PLUGINS, install_plugin_tools
from harness_magic.core.control.skills.loader import SKILL_PLUGINS, load_skills
from harness_magic.core.plugins import PluginGroup
for group in (CONNECTOR_TYPES, TOOL_PLUGINS, SKILL_PLUGINS):
    group.forget()
t1 = time.perf_counter(); CONNECTOR_TYPES.names(); t2 = time.perf_counter()
TOOL_PLUGINS.names(); SKILL_PLUGINS.names(); t3 = time.perf_counter()
from harness_magic.evals.graders import GRADERS
for group in (CONNECTOR_TYPES, TOOL_PLUGINS, SKILL_PLUGINS, GRADERS):
    group.load_all()
t4 = time.perf_counter()

class Table:
    def __init__(self): self.tools = []
    def add_tool(self, tool): self.tools.append(tool)

runs = 50
t5 = time.perf_counter()
for _ in range(runs):
    install_plugin_tools(Table())
t6 = time.perf_counter()
for _ in range(runs):
    load_skills()
t7 = time.perf_counter()
print(json.dumps({"floor_s": floor, "first_scan_s": t2 - t1, "other_groups_s": t3 - t2,
                  "load_all_s": t4 - t3, "tools_per_session_s": (t6 - t5) / runs,
                  "skills_per_session_s": (t7 - t6) / runs}))
"""


def main() -> None:
    samples = [json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                                         check=True).stdout) for _ in range(5)]
    print("| measure | median (ms) |\n| --- | --- |")
    for key in samples[0]:
        values = sorted(s[key] for s in samples)
        print(f"| {key} | {values[len(values) // 2] * 1000:.2f} |")


if __name__ == "__main__":
    main()
