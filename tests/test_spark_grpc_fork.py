"""The Spark engine turns gRPC's fork handlers off before Spark Connect's client first imports gRPC.

With them on, a process the kernel forked after a Spark Connect session ran (the next local server's JVM, the
docs index's worker pool, a pseudo-terminal) sometimes died before its ``exec``. Each check runs in a fresh
interpreter whose environment lacks the setting (the suite's own conftest sets it for its processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness_magic.core.execution.connectors.spark.engine import GRPC_FORK_SUPPORT

pytest.importorskip("grpc")
NAME, VALUE = GRPC_FORK_SUPPORT


def fresh(code: str, **environment: str) -> dict:
    """Run ``code`` in a fresh interpreter without the setting (plus ``environment``); its printed JSON."""
    env = {k: v for k, v in os.environ.items() if k != NAME}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


REPORT = f"import json, os, sys; print(json.dumps({{'value': os.environ.get({NAME!r}), 'grpc': 'grpc' in sys.modules}}))"


def test_the_engines_first_session_sets_it_before_its_client_is_imported():
    """A real engine's session start: when Spark Connect's client first imports gRPC (stopped there by a finder
    that notes the moment, so no server is needed), the setting is already on."""
    code = ("import json, os, sys\n"
            "seen = {}\n"
            "class Note:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'grpc':\n"
            f"            seen.update(value=os.environ.get({NAME!r}), session='pyspark.sql.connect.session' in sys.modules)\n"
            "            raise ImportError('stopped here by the test')\n"
            "sys.meta_path.insert(0, Note())\n"
            "from harness_magic.core.execution.connectors.spark.engine import SparkEngine\n"
            "from harness_magic.core.execution.tools import ToolError\n"
            "try:\n"
            "    SparkEngine('sc://127.0.0.1:9').spark\n"
            "except ToolError:\n"
            "    pass\n"
            "print(json.dumps(seen))\n")
    assert fresh(code) == {"value": VALUE, "session": False}


def test_a_users_own_setting_is_kept():
    code = ("from harness_magic.core.execution.connectors.spark.engine import without_grpc_fork_handlers\n"
            "without_grpc_fork_handlers()\n" + REPORT)
    assert fresh(code, **{NAME: "true"}) == {"value": "true", "grpc": False}


def test_with_grpc_imported_first_nothing_is_changed():
    """gRPC read its setting at its import: setting it afterwards would claim what does not hold."""
    code = ("import grpc\n"
            "from harness_magic.core.execution.connectors.spark.engine import without_grpc_fork_handlers\n"
            "without_grpc_fork_handlers()\n" + REPORT)
    assert fresh(code) == {"value": None, "grpc": True}
