"""Strict local emulations of the Anthropic Messages API and OpenAI Chat Completions.

They reject what the real APIs reject, with the real error shape (HTTP 400,
``invalid_request_error``):

Anthropic (:func:`anthropic_problems`, :class:`AnthropicServer`)
    unknown top-level fields, a missing ``max_tokens``, empty or whitespace-only
    text blocks, empty message content, a ``tool_use`` not answered by a
    ``tool_result`` at the start of the next user message, a ``tool_result`` with
    no matching ``tool_use``, duplicate tool-use ids, more than 4 ``cache_control``
    breakpoints, a first message that is not from the user.
OpenAI (:func:`openai_problems`, used by ``ScriptedServer(strict=True)``)
    ``content: null`` on a message without tool calls, tool calls not answered by
    tool messages right after them, tool messages without a preceding call,
    empty content arrays, empty text parts; with ``strict_fields`` (a gateway that
    validates its schema) any unknown field, ``cache_control`` included.

The Anthropic server streams SSE (``message_start`` ... ``message_stop``) and
emulates prompt caching: each request's prefix up to a ``cache_control``
breakpoint is written to a cache; a later request whose prefix matches a
written one (looking back up to 20 blocks from a breakpoint, as the real API
does) reads it. Usage reports ``input_tokens`` (after the last breakpoint),
``cache_creation_input_tokens`` and ``cache_read_input_tokens``; tokens are
characters / 4 of the canonical JSON of each block.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_CACHE_BREAKPOINTS = 4
"""The Anthropic API's limit on ``cache_control`` blocks per request."""
LOOKBACK_BLOCKS = 20
"""How far back from a breakpoint the Anthropic API looks for a cached prefix."""
CHARS_PER_TOKEN = 4

ANTHROPIC_FIELDS = frozenset({
    "model", "messages", "max_tokens", "system", "tools", "tool_choice", "stream", "temperature", "top_p",
    "top_k", "stop_sequences", "metadata", "thinking", "service_tier"})
OPENAI_FIELDS = frozenset({
    "model", "messages", "tools", "tool_choice", "stream", "stream_options", "temperature", "top_p", "n",
    "stop", "max_tokens", "max_completion_tokens", "user", "parallel_tool_calls", "response_format", "seed",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs"})
OPENAI_MESSAGE_FIELDS = {
    "system": {"role", "content", "name"}, "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal"},
    "tool": {"role", "content", "tool_call_id"}, "developer": {"role", "content", "name"}}
OPENAI_PART_FIELDS = {"text": {"type", "text"}, "image_url": {"type", "image_url"}}


# --------------------------------------------------------------------------- Anthropic


def _text_problem(text: Any, where: str) -> str | None:
    if not isinstance(text, str):
        return f"{where}: text must be a string"
    if not text.strip():
        return f"{where}: text content blocks must contain non-whitespace text"
    return None


def anthropic_problems(body: dict[str, Any]) -> str | None:
    """The first reason the real Messages API would reject ``body``, or None."""
    extra = sorted(set(body) - ANTHROPIC_FIELDS)
    if extra:
        return f"{extra[0]}: Extra inputs are not permitted"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    breakpoints = 0
    system = body.get("system")
    if isinstance(system, list):
        for index, block in enumerate(system):
            problem = _text_problem(block.get("text"), f"system.{index}")
            if problem:
                return problem
            breakpoints += "cache_control" in block
    for tool in body.get("tools") or []:
        if "input_schema" not in tool or not tool.get("name"):
            return "tools: each tool needs a name and an input_schema"
        breakpoints += "cache_control" in tool
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return "messages.0.role: the first message must use the 'user' role"
    seen_ids: set[str] = set()
    pending: list[str] = []
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = content
        else:
            return f"messages.{index}.content: Input should be a valid list or string"
        last = index == len(messages) - 1
        if not blocks and not (last and role == "assistant"):
            return f"messages.{index}: all messages must have non-empty content except for the optional final assistant message"
        if pending:  # the previous assistant turn called tools: results must come first, all of them
            leading = []
            for block in blocks:
                if block.get("type") != "tool_result":
                    break
                leading.append(block.get("tool_use_id"))
            missing = [i for i in pending if i not in leading]
            if role != "user" or missing:
                return (f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
                        f"after: {', '.join(missing or pending)}. Each `tool_use` block must have a corresponding "
                        "`tool_result` block in the next message.")
        answered = set(pending)
        pending = []
        for b_index, block in enumerate(blocks):
            where = f"messages.{index}.content.{b_index}"
            kind = block.get("type")
            breakpoints += "cache_control" in block
            if kind == "text":
                problem = _text_problem(block.get("text"), where)
                if problem:
                    return problem
            elif kind == "tool_use":
                if role != "assistant":
                    return f"{where}: tool_use blocks are only allowed in assistant messages"
                if block.get("id") in seen_ids:
                    return f"{where}: `tool_use` ids must be unique"
                seen_ids.add(block.get("id"))
                pending.append(block.get("id"))
            elif kind == "tool_result":
                if role != "user" or block.get("tool_use_id") not in answered:
                    return (f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                            "`tool_use` block in the previous message.")
                inner = block.get("content")
                if isinstance(inner, list):
                    for i_index, part in enumerate(inner):
                        breakpoints += "cache_control" in part
                        if part.get("type") == "text":
                            problem = _text_problem(part.get("text"), f"{where}.content.{i_index}")
                            if problem:
                                return problem
            else:
                return f"{where}.type: unsupported block type {kind!r}"
    if breakpoints > MAX_CACHE_BREAKPOINTS:
        return f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
    return None


def _prompt_blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """(canonical JSON without cache_control, is a breakpoint) for each block, in cache order."""
    out: list[tuple[str, bool]] = []

    def add(block: dict[str, Any]) -> None:
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        out.append((json.dumps(clean, sort_keys=True), "cache_control" in block))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    if isinstance(system, str):
        add({"type": "text", "text": system})
    for block in system or [] if isinstance(system, list) else []:
        add(block)
    for message in body["messages"]:
        content = message["content"]
        for block in ([{"type": "text", "text": content}] if isinstance(content, str) else content):
            add({**block, "role": message["role"]})
    return out


class _PromptCache:
    """Prefix hashes written by earlier requests."""

    def __init__(self) -> None:
        self.written: set[str] = set()

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        blocks = _prompt_blocks(body)
        tokens = [max(1, len(b) // CHARS_PER_TOKEN) for b, _ in blocks]
        digests, running = [], hashlib.sha256()
        for text, _ in blocks:
            running.update(text.encode())
            digests.append(running.copy().hexdigest())
        marks = [i for i, (_, mark) in enumerate(blocks) if mark]
        read_upto = 0  # blocks [0, read_upto) come from the cache
        for mark in marks:
            for index in range(mark, max(-1, mark - LOOKBACK_BLOCKS), -1):
                if digests[index] in self.written:
                    read_upto = max(read_upto, index + 1)
                    break
        last_mark = marks[-1] + 1 if marks else 0
        for mark in marks:
            self.written.add(digests[mark])
        read = sum(tokens[:read_upto])
        created = sum(tokens[read_upto:last_mark]) if last_mark > read_upto else 0
        rest = sum(tokens[max(last_mark, read_upto):])
        return {"input_tokens": rest, "cache_creation_input_tokens": created, "cache_read_input_tokens": read}


class AnthropicServer:
    """``POST /v1/messages``: strict validation, scripted replies, SSE, prompt caching.

    Replies are ``{"text": str, "tool_calls": [{"id", "name", "arguments"}], "output_tokens": int}``
    or ``{"status": int, "error": str}``. ``requests`` holds every request body,
    ``rejections`` every validation error sent back, ``usages`` every usage sent.
    """

    def __init__(self, replies: list[dict[str, Any]] | None = None) -> None:
        self.replies: list[dict[str, Any]] = list(replies or [])
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        self.usages: list[dict[str, int]] = []
        self.paths: list[str] = []
        self.cache = _PromptCache()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with server._lock:
                    server.paths.append(self.path)
                    server.requests.append(body)
                    if not self.headers.get("x-api-key") or not self.headers.get("anthropic-version"):
                        problem = "authentication: x-api-key and anthropic-version headers are required"
                    else:
                        problem = anthropic_problems(body)
                    if problem:
                        server.rejections.append(problem)
                        reply = {"status": 400, "error": problem}
                    else:
                        reply = server.replies.pop(0) if server.replies else {"status": 500, "error": "script exhausted"}
                    usage = server.cache.usage(body) if "status" not in reply else None
                    if usage is not None:
                        usage["output_tokens"] = reply.get("output_tokens", 10)
                        server.usages.append(usage)
                if "status" in reply:
                    kind = "invalid_request_error" if reply["status"] == 400 else "api_error"
                    self._json(reply["status"], {"type": "error", "error": {"type": kind, "message": reply["error"]}})
                    return
                content = _anthropic_content(reply)
                stop = "tool_use" if reply.get("tool_calls") else "end_turn"
                if not body.get("stream"):
                    self._json(200, {"id": "msg_test", "type": "message", "role": "assistant",
                                     "model": body["model"], "content": content, "stop_reason": stop,
                                     "stop_sequence": None, "usage": usage})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event, data in _anthropic_events(body["model"], content, stop, usage):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "AnthropicServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _anthropic_content(reply: dict[str, Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if reply.get("text"):
        content.append({"type": "text", "text": reply["text"]})
    for index, call in enumerate(reply.get("tool_calls") or []):
        content.append({"type": "tool_use", "id": call.get("id", f"toolu_{index}"), "name": call["name"],
                        "input": call.get("arguments", {})})
    return content


def _anthropic_events(model: str, content: list[dict[str, Any]], stop: str,
                      usage: dict[str, int]) -> list[tuple[str, dict[str, Any]]]:
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_test", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage}})]
    for index, block in enumerate(content):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            for start in range(0, len(block["text"]), 5):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "text_delta", "text": block["text"][start:start + 5]}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}))
            args = json.dumps(block["input"])
            for start in range(0, len(args), 7):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": args[start:start + 7]}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": usage["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


# --------------------------------------------------------------------------- OpenAI


def openai_problems(body: dict[str, Any], *, strict_fields: bool = False) -> str | None:
    """The first reason OpenAI Chat Completions (or a schema-strict gateway) would reject ``body``."""
    if strict_fields:
        extra = sorted(set(body) - OPENAI_FIELDS)
        if extra:
            return f"Unrecognized request argument supplied: {extra[0]}"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'"
    pending: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in OPENAI_MESSAGE_FIELDS:
            return f"messages[{index}].role: invalid value {role!r}"
        if strict_fields:
            extra = sorted(set(message) - OPENAI_MESSAGE_FIELDS[role])
            if extra:
                return f"messages[{index}]: Additional properties are not allowed ({extra[0]!r} was unexpected)"
        if pending and role != "tool":
            return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return (f"Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                        f"with 'tool_calls' (messages[{index}], tool_call_id {message.get('tool_call_id')!r}).")
            pending.remove(message["tool_call_id"])
        content = message.get("content")
        calls = message.get("tool_calls") or []
        if content is None and not (role == "assistant" and calls):
            return f"Invalid value for 'content' (messages[{index}]): expected a string, got null."
        if isinstance(content, list):
            if not content:
                return f"messages[{index}].content: [] is too short"
            for p_index, part in enumerate(content):
                kind = part.get("type")
                if strict_fields and set(part) - OPENAI_PART_FIELDS.get(kind, set()):
                    extra = sorted(set(part) - OPENAI_PART_FIELDS.get(kind, set()))
                    return (f"messages[{index}].content[{p_index}]: Additional properties are not allowed "
                            f"({extra[0]!r} was unexpected)")
                if kind == "text" and not isinstance(part.get("text"), str):
                    return f"messages[{index}].content[{p_index}].text: expected a string"
        elif content is not None and not isinstance(content, str):
            return f"messages[{index}].content: expected a string or an array of parts"
        if role == "assistant":
            pending = [c["id"] for c in calls]
    if pending:
        return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}")
    return None
