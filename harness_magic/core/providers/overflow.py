"""Context overflow: a server's "this does not fit" answer, the error that says so, and the window learned from it.

Servers answer a request over the model's context window in different ways:

- llama-cpp-python: HTTP 400 "This model's maximum context length is 512 tokens. However,
  you requested 730 tokens (710 in the messages, 20 in the completion)" — but only when not
  streaming; a streamed request gets an empty 200 body (the transport then asks once more
  without streaming to hear the reason, see :mod:`.transport`);
- llama.cpp's server: HTTP 400 ``{"type": "exceed_context_size_error", "n_prompt_tokens": N, "n_ctx": W}``;
- vLLM and OpenAI: "maximum context length is W tokens. However, you requested N tokens"
  (``context_length_exceeded``); Anthropic: "prompt is too long: N tokens > W maximum";
- a prompt that fits but leaves no room: an empty answer (the adapter checks this against the window).

:func:`server_overflow` recognises the first kinds from the error body; :func:`overflow_error`
words the error the user sees (the prompt's size, the window, the ``context_window`` setting);
:func:`learned_window` converts the server's window into the adapter's estimate units so the
next request is compacted to fit (the run's compaction reads the adapter's ``max_input_tokens``).
"""

from __future__ import annotations

import re

from harness_magic.core.providers.errors import ContextWindowExceeded

__all__ = ["server_overflow", "overflow_error", "learned_window", "NEAR_WINDOW_SHARE", "ANSWER_ROOM_SHARE"]

NEAR_WINDOW_SHARE = 0.85
"""An empty answer to a request at least this share of the window is an overflow: no room was left to answer."""
ANSWER_ROOM_SHARE = 0.15
"""Share of a learned window kept free for the answer (a prompt that just fits leaves the model no room)."""

_OVERFLOW_TEXT = re.compile(
    r"context[_ ]length[_ ]exceeded|exceed_context_size|maximum context length|context (?:window|length|size)"
    r"|\bn_ctx\b|prompt is too long|input is too long|too many (?:input )?tokens", re.IGNORECASE)
"""Words servers use when a request does not fit the model's window."""
_WINDOW_NUMBERS = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"context (?:window|length|size) of (\d+)", re.IGNORECASE),
    re.compile(r"\"?n_ctx\"?\s*[:=]\s*(\d+)", re.IGNORECASE),
    re.compile(r"(\d+) maximum", re.IGNORECASE),
)
"""Where the window's size is, in the wordings above (first match wins)."""
_PROMPT_NUMBERS = (
    re.compile(r"(\d+) (?:tokens )?in the messages", re.IGNORECASE),
    re.compile(r"\"?n_prompt_tokens\"?\s*[:=]\s*(\d+)", re.IGNORECASE),
    re.compile(r"requested tokens \((\d+)\)", re.IGNORECASE),
    re.compile(r"requested (\d+) tokens", re.IGNORECASE),
    re.compile(r"prompt is too long: (\d+) tokens", re.IGNORECASE),
)
"""Where the request's size is, prompt-only counts first."""


def _number(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


def server_overflow(body: str, line: str, url: str, *, status_code: int | None = None,
                    said_overflow: bool = False) -> ContextWindowExceeded | None:
    """A :class:`ContextWindowExceeded` when the server's error ``body`` says the request did not fit, else None.

    ``line`` is the body's one-line message (quoted in the error); ``said_overflow``: the client
    library already classified the error as a context overflow. The adapter re-words the
    error with its estimate and the ``context_window`` setting (:func:`overflow_error`).
    """
    if not (said_overflow or _OVERFLOW_TEXT.search(body)):
        return None
    prompt, window = _number(_PROMPT_NUMBERS, body), _number(_WINDOW_NUMBERS, body)
    return ContextWindowExceeded(f"{url} refused the request: it does not fit the model's context window: {line}",
                                 url=url, prompt_tokens=prompt, window=window, server_said=line,
                                 status_code=status_code)


def learned_window(window: int | None, server_prompt: int | None, estimate: int) -> int:
    """The window in the adapter's estimate units, from what an overflow showed (below ``estimate``).

    The server counts with the model's tokenizer and may leave parts of the request out (tool
    schemas it renders its own way); the adapter's estimate of the same request differs by a
    roughly fixed amount. So the window is the estimate less what the server said was too much
    (``server_prompt - window``), less :data:`ANSWER_ROOM_SHARE` of the window for the answer.
    An unknown window is just below the request.
    """
    ceiling = max(estimate - 1, 1)
    if window is None:
        return ceiling
    excess = max((server_prompt or estimate) - window, 0)
    room = int(min(window, estimate) * ANSWER_ROOM_SHARE)  # a window claimed far above the request is not believed
    return max(1, min(ceiling, estimate - excess - room))


def overflow_error(cause: ContextWindowExceeded | None, *, url: str, estimate: int, window: int | None,
                   setting: int | None) -> ContextWindowExceeded:
    """The error the user sees: the prompt's size, the window, the ``context_window`` setting and what happens next.

    ``cause``: the server's refusal (None: an empty answer near the window); ``estimate``: the
    adapter's count of the request; ``window``: the window in server tokens when known.
    """
    prompt = cause.prompt_tokens if cause is not None and cause.prompt_tokens else None
    size = f"{prompt:,} tokens" if prompt else f"about {estimate:,} tokens"
    over = f"the {window:,}-token context window" if window else "the model's context window"
    if cause is not None:
        what = f"the request is {size}, over {over} of the model at {url} (the server said: {cause.server_said})"
    else:
        what = (f"the model at {url} answered nothing to a request of {size}, near {over}: no room was left "
                "for an answer")
    if setting is None:
        example = window or "<the server's window in tokens>"
        advice = ("context_window is not set, so the window was unknown until now; the one this error showed is "
                  f"used from now on (set context_window, e.g. %config AgentMagics.context_window = {example}, to "
                  "compact before the first overflow)")
    elif window and setting > window:
        advice = (f"context_window is set to {setting:,}, above the server's window: set it to {window:,} "
                  f"(%config AgentMagics.context_window = {window})")
    else:
        advice = (f"context_window is set to {setting:,} (requests are compacted to fit it by estimate; the server "
                  "counts with the model's own tokenizer, and the compaction now allows for the difference)")
    return ContextWindowExceeded(
        f"context overflow: {what}. The conversation is compacted to fit before the next request, so the next "
        f"cell works; {advice}.",
        url=url, prompt_tokens=prompt or estimate, window=window, server_said=cause.server_said if cause else None,
        status_code=cause.status_code if cause else None)
