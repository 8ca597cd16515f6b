"""A local OpenAI-compatible chat-completions server with scripted replies.

Runs on 127.0.0.1 (port 0) in a background thread. Each POST to
``/v1/chat/completions`` takes the next scripted reply and records the request
body. Replies are dicts:

``{"text": str, "tool_calls": [{"id", "name", "arguments": dict}], "usage": {...}}``
    a completion; streamed as SSE when the request asks for ``stream``.
``{"status": 429, "error": "..."}``
    an HTTP error.

``ScriptedServer(strict=True)`` validates each request as OpenAI does (see
:func:`strict_apis.openai_problems`) and answers a violation with HTTP 400
without consuming a reply; ``strict_fields=True`` also rejects unknown fields
(``cache_control`` included), as schema-strict gateways do. Rejections are kept
in ``rejections``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from strict_apis import openai_problems

DEFAULT_USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 0}


class ScriptedServer:
    def __init__(self, replies: list[dict[str, Any]] | None = None, *, strict: bool = False,
                 strict_fields: bool = False) -> None:
        self.replies: list[dict[str, Any]] = list(replies or [])
        self.strict = strict or strict_fields
        self.strict_fields = strict_fields
        self.rejections: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with server._lock:
                    server.raw_requests.append(body)
                    server.requests.append(json.loads(body))
                    problem = (openai_problems(server.requests[-1], strict_fields=server.strict_fields)
                               if server.strict else None)
                    if problem:
                        server.rejections.append(problem)
                        reply = {"status": 400, "error": problem}
                    else:
                        reply = server.replies.pop(0) if server.replies else {"status": 500, "error": "script exhausted"}
                if reply.get("delay"):
                    time.sleep(reply["delay"])
                if "status" in reply:
                    kind = "invalid_request_error" if reply["status"] == 400 else "server_error"
                    payload = json.dumps({"error": {"message": reply.get("error", "error"), "type": kind,
                                                    "code": reply["status"]}}).encode()
                    self.send_response(reply["status"])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                request = server.requests[-1]
                if request.get("stream"):
                    self._stream(reply, request)
                else:
                    payload = json.dumps(_completion(reply, request)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

            def _stream(self, reply: dict[str, Any], request: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in _chunks(reply, request):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _usage(reply: dict[str, Any]) -> dict[str, Any]:
    usage = {**DEFAULT_USAGE, **(reply.get("usage") or {})}
    return {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
        "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]},
    }


def _tool_calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"id": c.get("id", f"call_{i}"), "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
        for i, c in enumerate(reply.get("tool_calls") or [])
    ]


def _completion(reply: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    calls = _tool_calls(reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("text")}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": request.get("model", "test"),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": _usage(reply),
    }


def _chunks(reply: dict[str, Any], request: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
            "model": request.get("model", "test")}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    text = reply.get("text") or ""
    for start in range(0, len(text), 5):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": text[start:start + 5]},
                                            "finish_reason": None}]})
    for index, call in enumerate(_tool_calls(reply)):
        args = call["function"]["arguments"]
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": ""}}]}, "finish_reason": None}]})
        for start in range(0, len(args), 7):
            chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": index, "function": {"arguments": args[start:start + 7]}}]}, "finish_reason": None}]})
    finish = "tool_calls" if reply.get("tool_calls") else "stop"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if (request.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": _usage(reply)})
    return chunks
