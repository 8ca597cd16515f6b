"""Statistics for reports and the gate: Wilson intervals, pass^k, McNemar's exact test.

Pure Python (``math`` only) so results are identical everywhere.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

__all__ = ["wilson_interval", "pass_hat_k", "mcnemar_one_sided", "load_results", "MAX_RESULTS_BYTES"]

MAX_RESULTS_BYTES = 256 * 1024 * 1024
"""A results file larger than this is refused."""


def wilson_interval(passed: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a pass rate (95% by default); (0, 1) when ``total`` is 0."""
    if total <= 0:
        return 0.0, 1.0
    p = passed / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_hat_k(results: Iterable[dict[str, Any]], k: int) -> float | None:
    """pass^k: the chance that k attempts at a task all pass, averaged over tasks.

    Per task with n attempts and c passes it is C(c, k) / C(n, k) (unbiased); tasks
    with fewer than k attempts are skipped; None when no task has k attempts.
    """
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        counts[r["task_id"]][0] += 1
        counts[r["task_id"]][1] += bool(r["passed"])
    values = [math.comb(c, k) / math.comb(n, k) for n, c in counts.values() if n >= k]
    return sum(values) / len(values) if values else None


def mcnemar_one_sided(b: int, c: int) -> float:
    """Exact one-sided McNemar p-value that B is worse than A.

    ``b``: pairs A passed and B failed; ``c``: pairs A failed and B passed. Under
    the null (no difference) b ~ Binomial(b + c, 1/2); the p-value is P(X >= b).
    """
    n = b + c
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(b, n + 1)) / 2 ** n


def load_results(path: str) -> dict[str, Any]:
    """A results file written by ``run``, validated; clear errors naming the file."""
    import json
    import os

    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise ValueError(f"cannot read results file {path}: {exc.strerror or exc}") from None
    if size > MAX_RESULTS_BYTES:
        raise ValueError(f"{path}: {size} bytes; a results file may have at most {MAX_RESULTS_BYTES}")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a results file (not JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("format") != "harness_magic.evals/1" \
            or not isinstance(data.get("results"), list):
        raise ValueError(f"{path} is not a results file: expected format 'harness_magic.evals/1' with 'results'")
    for index, r in enumerate(data["results"]):
        if not isinstance(r, dict) or not isinstance(r.get("task_id"), str) or not isinstance(r.get("passed"), bool) \
                or not isinstance(r.get("repeat"), int):
            raise ValueError(f"{path}: results[{index}] needs task_id (string), repeat (integer), passed (boolean)")
        for key in ("cost", "wall_s", "model_s", "turns", "input_tokens", "output_tokens", "cached_tokens"):
            value = r.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{path}: results[{index}].{key} must be a non-negative number, got {value!r}")
    return data
