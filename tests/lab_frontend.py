"""A front end that answers the agent's questions and approvals the way a person in JupyterLab does.

It executes a cell with stdin allowed (what JupyterLab sends), follows the
widgets the cell opens on the kernel's IOPub channel, and once a prompt box
(:class:`harness_magic.notebook.prompt_widget.PromptBox`) is on screen, clicks
or types into it by sending the same comm messages the browser sends. It also
watches the stdin channel: a kernel input request is a failure (the front end
would keep its box and refuse every other cell).
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kernel_helpers import CELL_TIMEOUT_S, Cell, Kernel

__all__ = ["Prompt", "run_answering", "send_to_widget", "click", "StdinRequested"]


class StdinRequested(AssertionError):
    """The kernel asked for stdin: the front end would lock every other cell."""


@dataclass
class Prompt:
    """A prompt box as the front end holds it (states by comm id)."""

    box_id: str
    widgets: dict[str, dict[str, Any]] = field(repr=False)

    def _children(self, model_id: str) -> list[str]:
        return [c.removeprefix("IPY_MODEL_") for c in self.widgets.get(model_id, {}).get("children", [])]

    def _tree(self, model_id: str) -> list[str]:
        return [model_id] + [m for c in self._children(model_id) for m in self._tree(c)]

    def with_class(self, css: str) -> list[str]:
        return [m for m in self._tree(self.box_id) if css in self.widgets.get(m, {}).get("_dom_classes", [])]

    @property
    def kind(self) -> str:
        classes = self.widgets[self.box_id].get("_dom_classes", [])
        return "approval" if "agent-prompt-approval" in classes else "question"

    @property
    def state(self) -> str:
        """``open``, ``answered`` or ``withdrawn`` (the box's class)."""
        classes = self.widgets[self.box_id].get("_dom_classes", [])
        return next(c.removeprefix("agent-prompt-") for c in classes
                    if c in ("agent-prompt-open", "agent-prompt-answered", "agent-prompt-withdrawn"))

    @property
    def header(self) -> str:
        """The HTML above the controls (what is asked)."""
        return self.widgets[self._children(self.box_id)[0]]["value"]

    @property
    def labels(self) -> list[str]:
        return [self.widgets[m]["description"] for m in self.with_class("agent-prompt-choice")]

    @property
    def note(self) -> str:
        return self.widgets[self.with_class("agent-prompt-note")[0]]["value"]

    @property
    def controls_disabled(self) -> list[bool]:
        ids = self.with_class("agent-prompt-choice") + self.with_class("agent-prompt-text") + \
            self.with_class("agent-prompt-submit")
        return [bool(self.widgets[m].get("disabled")) for m in ids]

    def choice(self, label: str) -> str:
        return next(m for m in self.with_class("agent-prompt-choice") if self.widgets[m]["description"] == label)


def send_to_widget(kernel: Kernel, comm_id: str, data: dict[str, Any]) -> None:
    """A comm message from the front end to widget ``comm_id`` (what a click or a keystroke sends)."""
    kernel.kc.shell_channel.send(kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))


def click(kernel: Kernel, comm_id: str) -> None:
    send_to_widget(kernel, comm_id, {"method": "custom", "content": {"event": "click"}})


def type_answer(kernel: Kernel, prompt: Prompt, text: str) -> None:
    """Type ``text`` into the prompt's box and press Enter."""
    (box,) = prompt.with_class("agent-prompt-text")
    send_to_widget(kernel, box, {"method": "update", "state": {"value": text}, "buffer_paths": []})
    send_to_widget(kernel, box, {"method": "custom", "content": {"event": "submit"}})


def answer_with(reply: str) -> Callable[[Kernel, Prompt], None]:
    """What a person does with ``reply``: ``y``/``n`` approve or deny; a number picks that option; other text
    is typed into the question's box."""
    def act(kernel: Kernel, prompt: Prompt) -> None:
        if prompt.kind == "approval":
            css = "agent-prompt-approve" if reply.strip().lower() in ("y", "yes") else "agent-prompt-deny"
            click(kernel, prompt.with_class(css)[0])
        elif reply.isdigit() and 1 <= int(reply) <= len(prompt.labels):
            click(kernel, prompt.choice(prompt.labels[int(reply) - 1]))
        else:
            type_answer(kernel, prompt, reply)
    return act


def run_answering(kernel: Kernel, code: str, reply: str | Callable[[Kernel, Prompt], None] | None, *,
                  timeout: float = CELL_TIMEOUT_S, while_waiting: Callable[[Kernel, Prompt], None] | None = None
                  ) -> tuple[Cell, list[Prompt]]:
    """Run ``code`` as JupyterLab does; answer each prompt that shows with ``reply`` (see :func:`answer_with`;
    a callable acts itself; None: never answer). ``while_waiting`` runs once per prompt before the answer.
    Returns the cell and its prompts (their final states)."""
    act = answer_with(reply) if isinstance(reply, str) else reply
    cell = Cell(kernel.kc.execute(code, allow_stdin=True))
    widgets: dict[str, dict[str, Any]] = {}
    prompts: dict[str, Prompt] = {}
    deadline = time.monotonic() + timeout
    while True:
        _refuse_stdin(kernel)
        try:
            msg = kernel.kc.get_iopub_msg(timeout=max(0.1, min(0.5, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell did not finish: {cell.outputs}") from None
            continue
        content = msg["content"]
        if msg["msg_type"] == "comm_open":
            widgets[content["comm_id"]] = dict(content["data"].get("state", {}))
        elif msg["msg_type"] == "comm_msg" and content["data"].get("method") in ("update", "echo_update"):
            widgets.setdefault(content["comm_id"], {}).update(content["data"].get("state", {}))
        if msg["parent_header"].get("msg_id") != cell.msg_id:
            continue
        if msg["msg_type"] == "status" and content["execution_state"] == "idle":
            break
        cell.messages.append(msg)
        for box_id in _shown_boxes(msg, widgets):
            if box_id not in prompts:
                prompts[box_id] = Prompt(box_id, widgets)
                if while_waiting is not None:
                    while_waiting(kernel, prompts[box_id])
                if act is not None:
                    act(kernel, prompts[box_id])
    _refuse_stdin(kernel)
    shell = kernel.kc.get_shell_msg(timeout=10)
    while shell["parent_header"].get("msg_id") != cell.msg_id:
        shell = kernel.kc.get_shell_msg(timeout=10)
    cell.reply = shell["content"]
    return cell, list(prompts.values())


def _shown_boxes(msg: dict[str, Any], widgets: dict[str, dict[str, Any]]) -> list[str]:
    """Prompt boxes this message puts on screen: displayed alone, or added to the live view."""
    content = msg["content"]
    if msg["msg_type"] == "display_data":
        shown = [content["data"].get("application/vnd.jupyter.widget-view+json", {}).get("model_id")]
    elif msg["msg_type"] == "comm_msg":
        shown = [c.removeprefix("IPY_MODEL_") for c in content["data"].get("state", {}).get("children", [])]
    else:
        return []
    return [m for m in shown if m and "agent-prompt" in widgets.get(m, {}).get("_dom_classes", [])]


def _refuse_stdin(kernel: Kernel) -> None:
    try:
        msg = kernel.kc.get_stdin_msg(timeout=0)
    except queue.Empty:
        return
    raise StdinRequested(f"the kernel asked for stdin: {msg['content']}")
