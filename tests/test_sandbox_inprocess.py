"""In-process mode with friendly checks: same API, refusals with clear messages, not a boundary."""

from __future__ import annotations

import pandas as pd
import pytest

from harness_magic.core.interpreter import InProcessInterpreter


@pytest.fixture
def checked():
    return InProcessInterpreter(checks=True)


def test_plain_analysis_still_works(checked):
    result = checked.execute("import pandas as pd\nsave('t', df.groupby('k')['v'].sum())\ndf['v'].sum()",
                             {"df": pd.DataFrame({"k": ["a", "a", "b"], "v": [1, 2, 3]})}, [])
    assert result.error is None and result.value == 6
    assert result.saved[0][0] == "t"


@pytest.mark.parametrize("code, words", [
    ("import os", "import of 'os' is not available"),
    ("import subprocess", "not available"),
    ("__import__('os')", "'__import__' is not available"),
    ("open('/tmp/x', 'w')", "'open' is not available"),
    ("save.__globals__", "'__globals__' is not available"),
    ("().__class__.__base__.__subclasses__()", "not available"),
    ("get_ipython()", "not available"),
])
def test_precheck_refuses_with_a_friendly_message(checked, code, words):
    result = checked.execute(code, {}, [])
    assert result.error.startswith("SandboxViolation") and words in result.error


@pytest.mark.parametrize("code, words", [
    ("import pandas as pd\ngetattr(pd.io.common.os, 'sys' + 'tem')('true')", "running programs"),
    ("import pandas as pd\npd.DataFrame({'a': [1]}).to_csv('/tmp/harness_inprocess_pwn.csv')", "writing files"),
    ("import pandas as pd\npd.io.common.os.remove('/tmp/nothing-here')", "changing files"),
    ("import pandas as pd, io\npd.read_pickle(io.BytesIO(b'cos\\nsystem\\n(S\\'true\\'\\ntR.'))", "pickle.find_class"),
])
def test_audit_hook_refuses_what_the_precheck_cannot_see(checked, code, words):
    result = checked.execute(code, {}, [])
    assert result.error is not None and "SandboxViolation" in result.error and words in result.error


def test_audit_hook_is_disarmed_outside_model_code(checked, tmp_path):
    checked.execute("1", {}, [])
    (tmp_path / "kernel_can_write.txt").write_text("yes")  # the kernel itself is unaffected


def test_checks_are_off_by_default():
    assert InProcessInterpreter().execute("import os\nos.sep", {}, []).value == "/"
