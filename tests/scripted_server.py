"""A local OpenAI-compatible chat-completions server with scripted replies.

Runs on 127.0.0.1 (port 0) in a background thread. Each POST to
``/v1/chat/completions`` takes the next scripted reply and records the request
body. Replies are dicts:

``{"text": str, "tool_calls": [{"id", "name", "arguments": dict}], "usage": {...}}``
    a completion; streamed as SSE when the request asks for ``stream``.
``{"status": 429, "error": "..."}``
    an HTTP error (``"body": {...}`` sends that JSON body instead of the OpenAI-style one).
``{"empty_stream": True}``
    a streamed request gets a 200 with an empty body, as llama-cpp-python answers one over its
    context window (a request that does not stream takes the next reply).
``{"reset_stream": True}``
    a streamed request gets no answer: its connection is reset (TCP RST), as llama-cpp-python's server
    sometimes ends a streamed request over its context window (a request that does not stream takes the
    next reply).

``ScriptedServer(strict=True)`` validates each request as OpenAI does (see
:func:`strict_apis.openai_problems`) and answers a violation with HTTP 400
without consuming a reply; ``strict_fields=True`` also rejects unknown fields
(``cache_control`` included), as schema-strict gateways do. Rejections are kept
in ``rejections``.

``string_content=True`` validates as llama-cpp-python's server does: system,
assistant and tool ``content`` must be a string (a list of parts is answered
with HTTP 500 "N validation errors", as that server does). ``models`` (ids)
makes ``GET /v1/models`` answer with that list (else 404), and
``served_model`` answers a request for any other model with a vLLM-style 404.
Request headers are kept in ``headers`` (one dict per request). ``v1_only=True`` serves the API
under ``/v1`` only, as llama-cpp-python does: other paths get its 404 ``{"detail": "Not Found"}``.

Run as a process (a real server with its own socket and pid)::

    python tests/scripted_server.py --replies FILE [--string-content] [--models a,b]
        [--served-model NAME] [--requests FILE]

prints its ``api_base`` on the first line of stdout, appends each request as
``{"headers": ..., "body": ...}`` (JSON lines) to ``--requests``, and serves
until terminated.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from strict_apis import openai_problems

DEFAULT_USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 0}


class ScriptedServer:
    def __init__(self, replies: list[dict[str, Any]] | None = None, *, strict: bool = False,
                 strict_fields: bool = False, string_content: bool = False, models: list[str] | None = None,
                 served_model: str | None = None, on_request: Any = None, v1_only: bool = False,
                 reply_for: Any = None) -> None:
        self.replies: list[dict[str, Any]] = list(replies or [])
        self.reply_for = reply_for
        """``reply_for(request_body) -> reply``: answers each request by its content instead of taking the next
        scripted reply (for many concurrent conversations, where the order of requests is not known)."""
        self.strict = strict or strict_fields
        self.strict_fields = strict_fields
        self.string_content = string_content
        self.models = models
        self.served_model = served_model
        self.on_request = on_request
        self.v1_only = v1_only
        self.paths: list[str] = []
        """Every request's method and path, in order (``"POST /v1/chat/completions"``)."""
        self.rejections: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _outside_v1(self, method: str) -> bool:
                """Record the request's path; answer 404 (and True) for one outside /v1 when ``v1_only``."""
                with server._lock:
                    server.paths.append(f"{method} {self.path}")
                if server.v1_only and not self.path.startswith("/v1/"):
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._json(404, {"detail": "Not Found"})
                    return True
                return False

            def do_GET(self) -> None:  # noqa: N802
                if self._outside_v1("GET"):
                    return
                if self.path.rstrip("/").endswith("/models") and server.models is not None:
                    self._json(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "owned_by": "test"} for m in server.models]})
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self) -> None:  # noqa: N802
                if self._outside_v1("POST"):
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with server._lock:
                    server.raw_requests.append(body)
                    server.requests.append(json.loads(body))
                    server.headers.append(dict(self.headers.items()))
                    if server.on_request is not None:
                        server.on_request(server.headers[-1], server.requests[-1])
                    problem = (openai_problems(server.requests[-1], strict_fields=server.strict_fields)
                               if server.strict else None)
                    invalid = string_content_problems(server.requests[-1]) if server.string_content else []
                    asked = server.requests[-1].get("model")
                    if problem:
                        server.rejections.append(problem)
                        reply = {"status": 400, "error": problem}
                    elif invalid:
                        server.rejections.append("; ".join(invalid))
                        self._json(500, {"error": {"message": f"{len(invalid)} validation errors: {invalid[0]}",
                                                   "type": "internal_server_error"}})
                        return
                    elif server.served_model is not None and asked != server.served_model:
                        server.rejections.append(f"model {asked!r} not served")
                        self._json(404, {"object": "error", "type": "NotFoundError", "code": 404,
                                         "message": f"The model `{asked}` does not exist."})
                        return
                    elif server.reply_for is not None:
                        reply = server.reply_for(server.requests[-1])
                    else:
                        while server.replies and (server.replies[0].get("empty_stream")
                                                  or server.replies[0].get("reset_stream")) \
                                and not server.requests[-1].get("stream"):
                            server.replies.pop(0)  # only a streamed request gets the empty body or the reset
                        reply = server.replies.pop(0) if server.replies else {"status": 500, "error": "script exhausted"}
                if reply.get("delay"):
                    time.sleep(reply["delay"])
                if reply.get("reset_stream"):
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()  # linger 0: the close sends a reset, not an orderly end
                    return
                if reply.get("empty_stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if "status" in reply:
                    kind = "invalid_request_error" if reply["status"] == 400 else "server_error"
                    payload = json.dumps(reply.get("body") or {"error": {
                        "message": reply.get("error", "error"), "type": kind, "code": reply["status"]}}).encode()
                    self.send_response(reply["status"])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                request = json.loads(body)
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


def string_content_problems(body: dict[str, Any]) -> list[str]:
    """What llama-cpp-python's request schema rejects: non-string content where only a string is allowed."""
    problems = []
    for index, message in enumerate(body.get("messages") or []):
        role, content = message.get("role"), message.get("content")
        if role in ("system", "assistant", "tool") and not (isinstance(content, str) or
                                                            (content is None and role == "assistant")):
            problems.append(f"messages.{index}.{role}.content: Input should be a valid string")
    return problems


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


def main(argv: list[str] | None = None) -> None:
    """Serve as a process: print the api_base line, log requests as JSON lines, run until terminated."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(description="A scripted OpenAI-compatible server on 127.0.0.1.")
    parser.add_argument("--replies", required=True, help="JSON file: the list of scripted replies")
    parser.add_argument("--string-content", action="store_true", help="validate as llama-cpp-python does")
    parser.add_argument("--models", default=None, help="comma-separated ids GET /v1/models lists")
    parser.add_argument("--served-model", default=None, help="answer 404 for any other model")
    parser.add_argument("--requests", default=None, help="append each request here as a JSON line")
    args = parser.parse_args(argv)
    with open(args.replies, encoding="utf-8") as handle:
        replies = json.load(handle)

    def record(headers: dict[str, str], body: dict[str, Any]) -> None:
        if args.requests:
            with open(args.requests, "a", encoding="utf-8") as out:
                out.write(json.dumps({"headers": headers, "body": body}) + "\n")

    server = ScriptedServer(replies, string_content=args.string_content,
                            models=args.models.split(",") if args.models is not None else None,
                            served_model=args.served_model, on_request=record)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    print(server.api_base, flush=True)
    try:
        server.httpd.serve_forever()
    finally:
        server.httpd.server_close()


if __name__ == "__main__":  # run as a script, its folder (with strict_apis) is on sys.path
    main()
