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


def _by(rows, key, value):
    out = defaultdict(float)
    for r in rows:
        out[key(r)] += value(r)
    return out


def _records(pairs, key_name, value_name, digits=None):
    return [{key_name: k, value_name: round(v, digits) if digits is not None else v} for k, v in sorted(pairs.items())]


def revenue_by_region(inputs):
    return _records(_by(_rows(inputs["sales"]), lambda r: r["region"], lambda r: r["revenue"]), "region", "revenue")


def units_top_product(inputs):
    units = _by(_rows(inputs["sales"]), lambda r: r["product"], lambda r: r["units"])
    return max(units, key=units.get)


def orders_per_month(inputs):
    counts = Counter(r["date"].strftime("%Y-%m") for r in _rows(inputs["sales"]))
    return [{"month": m, "orders": n} for m, n in sorted(counts.items())]


def avg_order_value_west(inputs):
    return statistics.fmean(r["revenue"] for r in _rows(inputs["sales"]) if r["region"] == "West")


def median_units(inputs):
    return statistics.median(r["units"] for r in _rows(inputs["sales"]))


def top_region_share_pct(inputs):
    totals = _by(_rows(inputs["sales"]), lambda r: r["region"], lambda r: r["revenue"])
    return 100 * max(totals.values()) / sum(totals.values())


def distinct_customers_q2(inputs):
    return len({r["customer_id"] for r in _rows(inputs["sales"]) if 4 <= r["date"].month <= 6})


def top5_products_by_revenue(inputs):
    totals = _by(_rows(inputs["sales"]), lambda r: r["product"], lambda r: r["revenue"])
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:5]
    return [{"product": p, "revenue": v} for p, v in ranked]


def busiest_weekday(inputs):
    counts = Counter(r["date"].strftime("%A") for r in _rows(inputs["sales"]))
    return max(counts, key=counts.get)


def revenue_by_quarter(inputs):
    return _records(_by(_rows(inputs["sales"]), lambda r: f"{r['date'].year}Q{(r['date'].month - 1) // 3 + 1}",
                        lambda r: r["revenue"]), "quarter", "revenue")


def _unique(rows):
    seen, out = set(), []
    for r in rows:
        key = tuple((k, "nan" if v != v else v) for k, v in sorted(r.items()))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def unique_orders(inputs):
    return len(_unique(_rows(inputs["orders"])))


def dedup_revenue(inputs):
    return sum(r["revenue"] for r in _unique(_rows(inputs["orders"])))


def mean_known_discount(inputs):
    values = [r["discount"] for r in _unique(_rows(inputs["orders"])) if r["discount"] == r["discount"]]
    return statistics.fmean(values)


def missing_discount_orders(inputs):
    return sum(1 for r in _unique(_rows(inputs["orders"])) if r["discount"] != r["discount"])


def revenue_by_segment(inputs):
    segment = {c["customer_id"]: c["segment"] for c in _rows(inputs["customers"])}
    return _records(_by(_rows(inputs["sales"]), lambda r: segment[r["customer_id"]], lambda r: r["revenue"]),
                    "segment", "revenue")


def customers_without_orders(inputs):
    ordered = {r["customer_id"] for r in _rows(inputs["sales"])}
    return sum(1 for c in _rows(inputs["customers"]) if c["customer_id"] not in ordered)


def top_customer_per_region(inputs):
    totals = _by(_rows(inputs["sales"]), lambda r: (r["region"], r["customer_id"]), lambda r: r["revenue"])
    best = {}
    for (region, customer), value in totals.items():
        if region not in best or (value, -customer) > (best[region][1], -best[region][0]):
            best[region] = (customer, value)
    return [{"region": k, "customer_id": v[0], "revenue": v[1]} for k, v in sorted(best.items())]


def cumulative_revenue_by_month(inputs):
    monthly = _by(_rows(inputs["sales"]), lambda r: r["date"].strftime("%Y-%m"), lambda r: r["revenue"])
    total, out = 0.0, []
    for month in sorted(monthly):
        total += monthly[month]
        out.append({"month": month, "cumulative_revenue": total})
    return out


def last_month_growth_pct(inputs):
    monthly = _by(_rows(inputs["sales"]), lambda r: r["date"].strftime("%Y-%m"), lambda r: r["revenue"])
    months = sorted(monthly)
    return 100 * (monthly[months[-1]] / monthly[months[-2]] - 1)


_NY = ZoneInfo("America/New_York")


def tickets_per_ny_day(inputs):
    counts = Counter(r["created_utc"].to_pydatetime().astimezone(_NY).date().isoformat()
                     for r in _rows(inputs["tickets"]))
    return [{"date": d, "tickets": n} for d, n in sorted(counts.items())]


def tickets_in_ny_office_hours(inputs):
    return sum(1 for r in _rows(inputs["tickets"]) if 9 <= r["created_utc"].to_pydatetime().astimezone(_NY).hour < 17)


def tickets_on_dst_day(inputs):
    return sum(1 for r in _rows(inputs["tickets"])
               if r["created_utc"].to_pydatetime().astimezone(_NY).date().isoformat() == "2024-03-11")


def fy2024_revenue(inputs):
    # fiscal year 2024 runs from 2023-04 to 2024-03
    return sum(r["revenue"] for r in _rows(inputs["monthly"]) if "2023-04" <= r["month"] <= "2024-03")


def revenue_by_fiscal_year(inputs):
    def fiscal(month):
        year, mon = int(month[:4]), int(month[5:])
        return f"FY{year + 1 if mon >= 4 else year}"
    return _records(_by(_rows(inputs["monthly"]), lambda r: fiscal(r["month"]), lambda r: r["revenue"]),
                    "fiscal_year", "revenue")


def best_quarter_2024(inputs):
    totals = _by([r for r in _rows(inputs["monthly"]) if r["month"].startswith("2024")],
                 lambda r: (int(r["month"][5:]) - 1) // 3 + 1, lambda r: r["revenue"])
    return f"Q{max(totals, key=totals.get)}"


def googl_months_with_data(inputs):
    return sum(1 for r in _rows(inputs["stocks"]) if r["GOOGL"] == r["GOOGL"])


def aapl_mean_2000(inputs):
    values = [r["AAPL"] for r in _rows(inputs["stocks"])
              if str(r["Date"]).startswith("2000-") and r["AAPL"] == r["AAPL"]]  # NaN rows: no price that day
    return statistics.fmean(values)


def msft_first_trading_day(inputs):
    days = [datetime.strptime(r["Date"], "%d-%b-%y").date() for r in _rows(inputs["msft"])]
    return min(days).isoformat()


def msft_mean_volume(inputs):
    return statistics.fmean(r["Volume"] for r in _rows(inputs["msft"]))


def msft_best_day_return_pct(inputs):
    rows = sorted(_rows(inputs["msft"]), key=lambda r: datetime.strptime(r["Date"], "%d-%b-%y"))
    return max(100 * (b["Close"] / a["Close"] - 1) for a, b in zip(rows, rows[1:]))


def cancelled_orders(inputs):
    return sum(1 for r in _rows(inputs["orders"]) if r["status"] == "cancelled")


def shop_order_count(inputs):
    return len(inputs["orders"])


def shipped_revenue_by_country(inputs):
    country = {c["customer_id"]: c["country"] for c in _rows(inputs["customers"])}
    totals = _by([r for r in _rows(inputs["orders"]) if r["status"] == "shipped"],
                 lambda r: country[r["customer_id"]], lambda r: r["revenue"])
    return max(totals, key=totals.get)


def peak_month(inputs):
    rows = _rows(inputs["monthly"])
    return max(rows, key=lambda r: r["revenue"])["month"]
