"""The "copy code" button of each tool call, in the live view and in the settled final form.

A cell's kernel is busy while the agent runs, so a widget button with a Python
callback would answer only after the run; and the settled final form is static
HTML that a saved notebook keeps, which must carry no script. So the button
is plain, inert HTML (:func:`harness_magic.core.export.copy_button_html`):
hidden, naming its call by a key (``RUN_ID:TOOL_USE_ID``). One
:class:`CodeClipboard` widget per session holds the code of every call by that
key (synced from the kernel, never read from the page) and its front-end
module, loaded by JupyterLab's widget manager, shows each button whose call
it holds (as outputs appear, through a ``MutationObserver``) and copies that
call's code to the clipboard when it is clicked — at once, busy kernel or
not. Buttons of calls it does not hold (a saved notebook reopened on a new
kernel, GitHub, nbviewer, an export) stay hidden. The copied text is what ``%agent_code --run RUN_ID
--turn N`` puts into the next cell for that call.

A forged button (in another output) can only name a key: the code comes from
the widget's own state, so it copies the agent's real code or nothing.

Code that would run differently from how it reads is never held: :meth:`add`
follows :func:`harness_magic.core.text.hidden_chars.hand_over` (the policy of
``%agent_code``) and refuses code with hidden characters (bidi controls,
zero-width characters, ESC and other controls), so its button stays hidden and
the transcript names the characters; the front end also refuses to copy text
holding any such character.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CodeClipboard", "code_clipboard", "MAX_CALLS"]

MAX_CALLS = 500
"""Calls whose code the widget keeps (the oldest go first): each new call re-sends the map to the page."""

_ESM = r"""
const KEY = "__harnessMagicCopyCode";
const SELECTOR = "button.agent-copy-code";
// Controls (but newline and tab), format, private-use, unassigned, separators: never copied (the kernel holds none).
const HIDDEN = /[^\P{C}\n\t]|[\p{Zl}\p{Zp}]/u;

function codeFor(g, key) {
  for (const model of g.models) {
    const calls = model.get("calls") || {};
    if (key && Object.prototype.hasOwnProperty.call(calls, key)) return calls[key];
  }
  return undefined;
}

// A button shows only while a live clipboard holds its call's code (stale or forged ones stay hidden).
function reveal(g, root) {
  const buttons = root.matches && root.matches(SELECTOR) ? [root] : [...(root.querySelectorAll ? root.querySelectorAll(SELECTOR) : [])];
  for (const button of buttons) {
    const known = typeof codeFor(g, button.getAttribute("data-agent-call")) === "string";
    button.hidden = !known;
    button.style.display = known ? "inline-block" : "none";
  }
}

function state() {
  const g = (globalThis[KEY] = globalThis[KEY] || { models: new Set(), installed: false });
  if (!g.installed) {
    g.installed = true;
    new MutationObserver((records) => {
      for (const record of records) {
        for (const node of record.addedNodes) if (node instanceof Element) reveal(g, node);
      }
    }).observe(document.body, { childList: true, subtree: true });
    document.addEventListener("click", (event) => {
      const target = event.target instanceof Element ? event.target.closest(SELECTOR) : null;
      if (!target) return;
      event.preventDefault();
      event.stopPropagation();
      const code = codeFor(g, target.getAttribute("data-agent-call") || "");
      if (typeof code !== "string") return flash(target, "not in this session");
      if (HIDDEN.test(code)) return flash(target, "not copied: hidden characters");
      copy(code).then(() => flash(target, "copied ✓"), () => flash(target, "copy failed"));
    }, true);
  }
  return g;
}

async function copy(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("the browser refused to copy");
}

function flash(button, text) {
  const label = button.getAttribute("data-label") || button.textContent;
  button.setAttribute("data-label", label);
  button.textContent = text;
  setTimeout(() => { button.textContent = label; }, 1500);
}

function track(model) {
  const g = state();
  if (!g.models.has(model)) {
    g.models.add(model);
    model.on("change:calls", () => reveal(g, document.body));
  }
  reveal(g, document.body);
  return () => { g.models.delete(model); reveal(g, document.body); };
}

export default {
  initialize({ model }) {
    return track(model);
  },
  render({ model }) {
    track(model);
  },
};
"""


def _widget_class() -> Any:
    import anywidget
    from traitlets import Dict

    class CodeClipboard(anywidget.AnyWidget):
        """Holds each tool call's code by key; its front end copies it when that call's button is clicked."""

        _esm = _ESM
        calls = Dict(help="RUN_ID:TOOL_USE_ID -> the call's code, as %agent_code writes it.").tag(sync=True)

        def add(self, key: str, code: str) -> bool:
            """Make ``key``'s button copy ``code`` (kept: the latest :data:`MAX_CALLS` calls).

            False, and ``key`` not held, when ``code`` has hidden characters
            (:func:`~harness_magic.core.text.hidden_chars.hand_over` refuses it).
            """
            from harness_magic.core.text.hidden_chars import hand_over

            handed = hand_over(code)
            if handed.text is None:
                if key in self.calls:
                    self.calls = {k: v for k, v in self.calls.items() if k != key}
                return False
            code = handed.text
            if self.calls.get(key) == code:
                return True
            calls = {k: v for k, v in self.calls.items() if k != key}
            calls[key] = code
            while len(calls) > MAX_CALLS:
                calls.pop(next(iter(calls)))
            self.calls = calls
            return True

        def __repr__(self) -> str:
            return "<agent code clipboard>"

    return CodeClipboard


_CLASS: Any = None


def CodeClipboard(**kwargs: Any) -> Any:  # noqa: N802 - a lazily built class
    """A new clipboard widget (anywidget is imported on first use)."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _widget_class()
    return _CLASS(**kwargs)


def code_clipboard(owner: Any) -> Any:
    """The clipboard widget of ``owner`` (the magics), made on first use; None without anywidget."""
    clipboard = getattr(owner, "_code_clipboard", None)
    if clipboard is None:
        try:
            clipboard = CodeClipboard()
        except ImportError:
            return None
        owner._code_clipboard = clipboard
    return clipboard
