"""``AgentMagics.show_real_values`` (issue 31): real values in the live view for the person at the keyboard only.

The live view gets each event with its pseudonyms restored; the events themselves (what the run log, the
recorder, the cell's final output and exports are built from), every request body and the run log keep
what the model saw. A live view that showed real values is emptied when the run ends, even after an error.
"""

from __future__ import annotations

import json

import pytest

from test_pseudonyms import LONG_EMAILS, NAMES, call, glossary, leaks, logged, make_session, people, sent


def test_the_live_view_shows_real_values_while_the_events_keep_what_the_model_saw(tmp_path, server):
    from harness_magic.notebook.live import RevealingView

    code = "print(frame[['name', 'email']].to_string())"
    session = make_session(tmp_path, server, [glossary(tmp_path)])
    try:
        session.cache.put("frame", people(), tool="notebook")
        first = session.cache.get("frame")["name"].iloc[0]
        server.replies = [{"tool_calls": [{"id": "c1", **call("python_interpreter", code=code)}]},
                          {"text": f"The first customer is {first}."}]  # the model names her by her pseudonym
        shown: list = []
        kept: list = []
        view = RevealingView(shown.append, session.pseudonyms.reveal_text)
        unsubscribe = session.subscribe(view)
        unsubscribe_raw = session.subscribe(kept.append)
        try:
            result = session.ask("who is first?")
        finally:
            unsubscribe()
            unsubscribe_raw()
        assert result.status == "completed", result.error
        live = "\n".join(map(repr, shown))
        assert NAMES[0] in live and LONG_EMAILS[1] in live  # the person at the keyboard sees real values
        assert f"The first customer is {NAMES[0]}." in live
        assert leaks("\n".join(map(repr, kept))) == []  # the events themselves are untouched ...
        assert leaks(result.text) == [] and first in result.text  # ... the final output too
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
    finally:
        session.close()


def test_reveal_event_copies_what_it_changes_and_leaves_other_objects_alone():
    from dataclasses import dataclass, field

    from harness_magic.notebook.live import REVEAL_MAX_DEPTH, reveal_event

    @dataclass(frozen=True)
    class Inner:
        text: str
        items: list = field(default_factory=list)

    @dataclass(frozen=True)
    class Event:
        inner: Inner
        payload: dict
        other: object

    marker = object()
    event = Event(Inner("see P1", ["P2", 3]), {"k": ("P1",)}, marker)
    out = reveal_event(event, lambda s: s.replace("P1", "Ann").replace("P2", "Bo"))
    assert out.inner.text == "see Ann" and out.inner.items == ["Bo", 3] and out.payload == {"k": ("Ann",)}
    assert out.other is marker and event.inner.text == "see P1"  # the original event is unchanged
    nested: list = ["P1"]
    for _ in range(REVEAL_MAX_DEPTH + 5):  # a hostile depth ends, it never exhausts the stack
        nested = [nested]
    assert json.dumps(reveal_event(nested, lambda s: "x")).count("P1") == 1


def test_a_live_view_that_showed_real_values_is_emptied_even_after_an_error():
    from harness_magic.notebook.live import RevealingView, settle

    class Handle:
        updates: list = []

        def update(self, data, raw):
            self.updates.append(data)

    class View:
        closed = stopped = False

        def __call__(self, event):
            pass

        def close(self):
            self.closed = True

        def stop(self):
            self.stopped = True

    plain, revealing, handle = View(), View(), Handle()
    settle(handle, plain, settled=False)
    assert plain.stopped and not plain.closed and handle.updates == []  # an error: the plain view stays
    settle(handle, RevealingView(revealing, str), settled=False)
    assert revealing.closed and handle.updates == [{}]  # real values shown: emptied all the same


@pytest.mark.kernel
def test_in_a_kernel_the_widgets_show_real_values_only_with_the_setting_and_the_outputs_never(tmp_path):
    pytest.importorskip("jupyter_client")
    from kernel_helpers import agent_kernel, script

    glossary(tmp_path)
    setup = ("import pandas as pd\n"
             f"customers = pd.DataFrame({{'id': [1, 2, 3], 'name': {NAMES!r}, 'email': {LONG_EMAILS!r}}})")
    with agent_kernel(tmp_path, setup, run_dir="runs",
                      connectors=[{"type": "glossary", "files": ["terms.yaml"]}]) as kernel:
        code = "print(customers[['name', 'email']].to_string())"
        for shown in (False, True):
            kernel.run(f"%config AgentMagics.show_real_values = {shown}")
            model = script(kernel, {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
                           {"text": "Three customers."})
            run = kernel.run(f"%%agent {model} --in customers\nWho are they?")
            assert run.ok, run.outputs
            widgets = json.dumps([m["content"]["data"] for m in run.messages if m["msg_type"] == "comm_msg"],
                                 ensure_ascii=False)
            assert (NAMES[0] in widgets) is shown  # the live view: real values only with the setting
            assert leaks(json.dumps(run.outputs, ensure_ascii=False)) == []  # what a saved notebook holds
            settled = [m["content"]["data"] for m in run.messages if m["msg_type"] == "update_display_data"]
            assert settled == [{}]  # the live view is emptied: the final form (what the model saw) stays
        assert leaks(logged(tmp_path)) == []
