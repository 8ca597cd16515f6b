"""The scrubber's pre-checks skip only patterns that cannot match: every secret shape is still redacted."""

from __future__ import annotations

import pytest

from harness_magic.core.transcript.scrub import REDACTED, _BEARER, _HEADER, _TOKENS, scrub

SECRETS = [
    "sk-ant-" + "a" * 30, "sk-proj-" + "B" * 20, "AKIA" + "ABCDEFGHIJKLMNOP", "AIza" + "x" * 35, "ghp_" + "z" * 36,
    "github_pat_" + "q" * 40, "xoxb-" + "1234567890abc", "hf_" + "h" * 34, "gsk_" + "g" * 34,
]
HEADERS = ["Authorization: Bearer abcdefgh12345678", "AUTHORIZATION=basic Zm9vOmJhcg==", "x-api-key: 'secretvalue99'",
           "Api_Key=hunter2hunter2", "Proxy-Authorization: token abcdefgh1234", "X-Goog-Api-Key: AIzaLikeValue123",
           "API\u212aEY: value-with-kelvin-sign"]


def reference(text: str) -> str:
    """The scrubber without pre-checks."""
    text = _HEADER.sub(lambda m: m[0] if m["value"] == REDACTED
                       else f"{m['name']}{m['sep']}{m['scheme'] or ''}{REDACTED}", text)
    text = _BEARER.sub(lambda m: m[1] + REDACTED, text)
    return _TOKENS.sub(REDACTED, text)


@pytest.mark.parametrize("secret", SECRETS)
def test_every_token_shape_is_redacted_in_long_text(secret: str) -> None:
    text = "ordinary words " * 100 + f"token: {secret} " + "more words " * 100
    assert secret not in scrub(text) and scrub(text) == reference(text)


@pytest.mark.parametrize("header", HEADERS)
def test_headers_in_any_case_are_redacted_as_without_pre_checks(header: str) -> None:
    text = "request failed: {" + header + "} while calling the gateway"
    assert scrub(text) == reference(text)
    assert header.split()[-1].strip("'") not in scrub(text) or "\u212a" in header


def test_plain_text_is_unchanged() -> None:
    text = "The quarterly growth of the north region was 12% (see qoq_growth)." * 20
    assert scrub(text) == text == reference(text)
