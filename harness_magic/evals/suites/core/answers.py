"""Expected answers of the core suite, computed independently of the reference scripts.

The reference scripts use pandas or DuckDB; these functions use plain Python over
the rows (``to_dict("records")``), ``datetime``/``zoneinfo`` and ``statistics``,
so a bug shared by a script and its expected value is unlikely. Each takes the
task's input frames (copies) and returns a number, records or rows.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from datetime import datetime, timezone
from zoneinfo import ZoneInfo


def _rows(frame):
    return frame.to_dict("records")


def total_revenue(inputs):
    return sum(r["revenue"] for r in _rows(inputs["sales"]))
