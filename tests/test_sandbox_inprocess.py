"""In-process mode with friendly checks: same API, refusals with clear messages, not a boundary."""

from __future__ import annotations

import pandas as pd
import pytest

from harness_magic.core.execution.interpreter import InProcessInterpreter


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


# -- live output (issue 14, point 3): the in-process backend streams like the worker -------------------


class _Seen:
    def __init__(self) -> None:
        import time

        self.clock = time.monotonic
        self.chunks: list[tuple[float, str]] = []

    def __call__(self, text: str) -> None:
        self.chunks.append((self.clock(), text))

    @property
    def text(self) -> str:
        return "".join(t for _, t in self.chunks)


def test_inprocess_lines_printed_over_time_are_handed_on_before_the_call_ends():
    import time

    seen = _Seen()
    code = "import time\nfor i in range(4):\n    print(f'line {i}', flush=True)\n    time.sleep(0.4)\nprint('done')"
    result = InProcessInterpreter().execute(code, {}, [], on_output=seen)
    ended = time.monotonic()
    assert result.error is None and result.stdout == "line 0\nline 1\nline 2\nline 3\ndone\n"
    assert seen.text == result.stdout, "everything printed is handed on, the tail at the end"
    first = next(at for at, text in seen.chunks if "line 0" in text)
    third = next(at for at, text in seen.chunks if "line 2" in text)
    assert ended - first > 1.2 and third - first > 0.6, "each line went on when it was printed"


def test_inprocess_streaming_is_bounded_and_coalesced_but_the_result_keeps_all():
    from harness_magic.core.execution.interpreter import STREAM_INTERVAL_S, STREAM_MAX_CHARS

    seen = _Seen()
    code = ("import time\nend = time.monotonic() + 0.5\nn = 0\nwhile time.monotonic() < end:\n"
            "    print('y' * 40, flush=True)\n    n += 1\nprint('z' * 200_000)\nn")
    result = InProcessInterpreter().execute(code, {}, [], on_output=seen)
    assert result.error is None
    assert len(seen.text) == STREAM_MAX_CHARS and set(seen.text) <= {"y", "z", "\n"}
    assert len(seen.chunks) <= 0.5 / STREAM_INTERVAL_S + 3, "a print loop is not one update per line"
    assert len(result.stdout) == result.value * 41 + 200_001, "the captured output is complete"


def test_inprocess_callback_prints_to_the_real_stdout_and_its_failure_does_not_fail_the_code(capsys):
    import warnings

    def prints(text: str) -> None:
        print(f"[view] {text!r}")  # what the terminal view does

    result = InProcessInterpreter().execute("print('a', flush=True)\n7", {}, [], on_output=prints)
    assert result.stdout == "a\n" and result.value == 7, "the view's own printing is not the code's output"
    assert "[view] 'a\\n'" in capsys.readouterr().out

    def broken(text: str) -> None:
        raise RuntimeError("display broke")

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = InProcessInterpreter().execute("print('still here', flush=True)\n2", {}, [], on_output=broken)
    assert result.value == 2 and result.stdout == "still here\n"


def test_inprocess_session_streams_tool_output_events_and_an_interrupt_keeps_them(tmp_path):
    import _thread
    import threading
    import time

    from harness_magic import AgentConfig, AgentSession, ProviderAdapter, ScriptedModel
    from harness_magic.core.transcript.events import ToolOutputDelta
    from harness_magic.core.agent.run import INTERRUPTED_RESULT

    code = "import time\nfor i in range(3):\n    print(f'partial {i}', flush=True)\n    time.sleep(0.3)\ntime.sleep(30)"
    adapter = ProviderAdapter("scripted/inproc", transport=ScriptedModel(
        [{"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}, {"text": "after"}]))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"), adapter=adapter)
    events: list = []
    session.subscribe(events.append)

    def interrupt_after_output() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if "partial 2" in "".join(e.text for e in events if isinstance(e, ToolOutputDelta)):
                break
            time.sleep(0.05)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_after_output, daemon=True).start()
    try:
        started = time.monotonic()
        result = session.ask("go")
        assert time.monotonic() - started < 15
    finally:
        session.close()
    assert result.status == "interrupted"
    assert "".join(e.text for e in events if isinstance(e, ToolOutputDelta)) == "partial 0\npartial 1\npartial 2\n"
    content = result.messages[-1].tool_results[0].content
    assert content.startswith(INTERRUPTED_RESULT) and "partial 0\npartial 1\npartial 2" in content


def test_inprocess_stderr_is_captured_and_streamed_like_the_workers(capsys):
    seen = _Seen()
    code = "import sys\nprint('out', flush=True)\nprint('err', file=sys.stderr, flush=True)\n3"
    result = InProcessInterpreter().execute(code, {}, [], on_output=seen)
    assert result.value == 3 and result.stdout == "out\nerr\n"
    assert seen.text == result.stdout
    assert "err" not in capsys.readouterr().err, "nothing leaks onto the kernel's own stderr"
