"""Run records and transcript export (``.jsonl``, ``.html``, ``.md``).

A :class:`RunRecorder` subscribes to a session's events and keeps, per run, a
plain :class:`RunRecord`: the prompt, the model's text, every tool call with its
code, result, snapshots and charts, nested subagent transcripts, and the final
result. The notebook's final output and :func:`export_runs` both render these
records, so what a colleague opens is what the notebook showed.

Contract of the renderers: every value that came from the model, the data or
the user is escaped, and model Markdown is rendered and sanitized by
:mod:`harness_magic.core.text.safe_markdown`; nothing in a transcript is ever
active HTML or script and nothing loads from the network. The ``.md`` export
escapes the model's raw HTML and image syntax the same way.

People see tables, the model sees text: snapshots render as tables
(:mod:`harness_magic.core.text.snapshot_view`), and the exact text a tool call
returned to the model is one click away in a ``what the model saw`` section,
like the harness's reminders, which appear nowhere else.

Modules, one job each (this package's ``__all__`` names the public ones):

* :mod:`.record` — :class:`RunRecord`, :class:`ToolRecord`, the event fold.
* :mod:`.views` — what people read of a record, as plain text.
* :mod:`.render_html` — the notebook's final output and the ``.html`` page.
* :mod:`.render_markdown` — the ``.md`` export.
* :mod:`.files` — :func:`export_runs`: writing records to a file, scrubbed.

Pure: imports neither IPython nor ipywidgets. Pygments, markdown-it and nh3
are imported when a transcript is first rendered.
"""

from harness_magic.core.export.files import EXPORT_FORMATS, export_runs
from harness_magic.core.export.record import (
    RunRecord,
    RunRecorder,
    ToolRecord,
    apply_event,
    clip,
    sandbox_step_text,
)
from harness_magic.core.export.render_html import (
    copy_button_html,
    render_answer_html,
    render_code_html,
    render_html_document,
    render_markdown_safe,
    render_run_html,
    render_snapshot_html,
    render_tool_body_html,
)
from harness_magic.core.export.render_markdown import render_markdown_document
from harness_magic.core.export.views import (
    RESULT_PREVIEW_CHARS,
    copy_key,
    display_result_text,
    printed_output,
    render_footer_text,
    tool_call_source,
    tool_summary,
)

__all__ = [
    "RunRecord",
    "ToolRecord",
    "RunRecorder",
    "export_runs",
    "render_run_html",
    "render_answer_html",
    "render_footer_text",
    "render_snapshot_html",
    "render_code_html",
    "render_markdown_safe",
    "render_html_document",
    "render_markdown_document",
    "render_tool_body_html",
    "copy_key",
    "copy_button_html",
    "display_result_text",
    "printed_output",
    "tool_call_source",
    "EXPORT_FORMATS",
    "RESULT_PREVIEW_CHARS",
    # what the live views of the notebook fold and show, the way the records do
    "apply_event",
    "clip",
    "sandbox_step_text",
    "tool_summary",
]
