"""Normal data work keeps working in the sandbox worker, and values round-trip exactly."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from harness_magic.core.execution.sandbox import RemoteObject, SandboxedInterpreter, probe_confinement

pytestmark = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")

SALES = pd.DataFrame({
    "region": ["north", "south", "north", "east", "south", "east"],
    "quarter": ["Q1", "Q1", "Q2", "Q2", "Q2", "Q1"],
    "amount": [100.0, 80.0, 130.0, 60.0, 95.0, 70.0],
    "units": [10, 8, 12, 6, 9, 7],
})


@pytest.fixture(scope="module")
def sandbox():
    backend = SandboxedInterpreter(timeout=20.0)
    yield backend
    backend.close()


def run(sandbox, code, **inputs):
    result = sandbox.execute(code, inputs, list(inputs))
    assert result.error is None, result.error
    return result


ANALYSES = {
    "groupby_sum": ("sales.groupby('region')['amount'].sum().to_dict()",
                    {"east": 130.0, "north": 230.0, "south": 175.0}),
    "pivot_table": ("sales.pivot_table(index='region', columns='quarter', values='amount', aggfunc='sum')"
                    ".fillna(0).loc['north', 'Q2']", 130.0),
    "describe": ("round(sales['amount'].describe()['mean'], 4)", round(SALES["amount"].mean(), 4)),
    "merge": ("import pandas as pd\nt = pd.DataFrame({'region': ['north', 'south', 'east'], 'target': [200, 150, 140]})\n"
              "m = sales.groupby('region', as_index=False)['amount'].sum().merge(t)\n"
              "int((m['amount'] > m['target']).sum())", 2),
    "qoq_growth": ("p = sales.pivot_table(index='region', columns='quarter', values='amount', aggfunc='sum')\n"
                   "((p['Q2'] - p['Q1']) / p['Q1']).idxmax()", "north"),
    "numpy_stats": ("import numpy as np\nfloat(np.round(np.std(sales['amount'].to_numpy()), 6))",
                    float(np.round(np.std(SALES["amount"].to_numpy()), 6))),
    "numpy_linalg": ("import numpy as np\nnp.linalg.solve(np.array([[2.0, 1.0], [1.0, 3.0]]), np.array([3.0, 5.0])).round(6).tolist()",
                     [0.8, 1.4]),
    "pyarrow_compute": ("import pyarrow as pa, pyarrow.compute as pc\nt = pa.Table.from_pandas(sales)\n"
                        "pc.sum(t['units']).as_py()", 52),
    "math": ("import math\nmath.isclose(math.sqrt(2) ** 2, 2.0)", True),
    "statistics": ("import statistics\nstatistics.median(sales['units'])", 8.5),
    "json_roundtrip": ("import json\njson.loads(json.dumps({'a': [1, 2]}))", {"a": [1, 2]}),
    "regex": ("import re\nre.findall(r'\\d+', 'q1 2024, q2 2025')", ["1", "2024", "2", "2025"]),
    "datetime_math": ("import datetime as dt\n(dt.date(2024, 3, 1) - dt.date(2024, 2, 1)).days", 29),
    "collections_counter": ("from collections import Counter\nCounter(sales['region']).most_common(1)[0][1]", 2),
    "itertools": ("import itertools\nlen(list(itertools.combinations(range(5), 2)))", 10),
    "user_function": ("def margin(a, b):\n    return round(a / b, 2)\nmargin(sales['amount'].sum(), sales['units'].sum())",
                      round(SALES["amount"].sum() / SALES["units"].sum(), 2)),
    "user_class": ("class Acc:\n    def __init__(self):\n        self.total = 0\n    def add(self, x):\n"
                   "        self.total += x\n        return self\nAcc().add(2).add(3).total", 5),
    "dataclass": ("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: int = 2\nP(1).y", 2),
    "try_except": ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    out = type(e).__name__\nout", "ZeroDivisionError"),
    "try_keyerror": ("try:\n    {}['x']\nexcept KeyError:\n    r = 'missing'\nr", "missing"),
    "comprehensions": ("{r: [a for a in g] for r, g in sales.groupby('region')['units']}['east']", [6, 7]),
    "fstrings": ("total = sales['amount'].sum()\nf'{total:,.1f} over {len(sales)} rows'", "535.0 over 6 rows"),
    "string_methods": ("sales['region'].str.upper().str[:1].unique().tolist()", ["N", "S", "E"]),
    "dates_resample": ("import pandas as pd\ns = pd.Series(range(10), index=pd.date_range('2024-01-01', periods=10, freq='D'))\n"
                       "s.resample('W').sum().tolist()", [21, 24]),
    "timezone": ("import pandas as pd\nstr(pd.Timestamp('2024-06-01 12:00', tz='Europe/Paris').tz_convert('UTC'))",
                 "2024-06-01 10:00:00+00:00"),
    "rolling": ("sales['amount'].rolling(2).mean().iloc[-1]", 82.5),
    "rank_sort": ("sales.sort_values('amount', ascending=False)['region'].iloc[0]", "north"),
    "csv_from_text": ("import pandas as pd, io\npd.read_csv(io.StringIO('a,b\\n1,2\\n3,4'))['b'].sum()", 6),
    "decimal_fraction": ("from decimal import Decimal\nfrom fractions import Fraction\nstr(Decimal('0.1') + Decimal('0.2')), str(Fraction(1, 3) * 3)",
                         ("0.3", "1")),
    "functools_reduce": ("import functools, operator\nfunctools.reduce(operator.mul, range(1, 6))", 120),
    "random_seeded": ("import random\nrandom.seed(1)\nlen([random.random() for _ in range(5)])", 5),
    "numpy_random": ("import numpy as np\nrng = np.random.default_rng(0)\nrng.normal(size=(100, 3)).shape", (100, 3)),
    "print_and_value": ("print('hello')\n41 + 1", 42),
    "big_int_ok": ("2 ** 200", 2 ** 200),
    "none_value": ("x = 1", None),
}


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_legitimate_analysis_succeeds(sandbox, name):
    code, expected = ANALYSES[name]
    result = run(sandbox, code, sales=SALES)
    if expected is None:
        assert not result.has_value or result.value is None
    else:
        assert result.value == expected


def test_there_are_at_least_thirty_analyses():
    assert len(ANALYSES) >= 30


def test_matplotlib_chart_comes_back_as_png(sandbox):
    result = run(sandbox, "import matplotlib.pyplot as plt\nsales.groupby('region')['amount'].sum().plot.bar()\n"
                          "plt.title('Amount by region')", sales=SALES)
    assert len(result.charts) == 1
    assert result.charts[0].startswith(b"\x89PNG\r\n\x1a\n")


def test_save_returns_the_handle_the_cache_will_assign(sandbox):
    result = sandbox.execute("a = save('totals', sales.sum(numeric_only=True))\nb = save('totals', 1)\n(a, b)",
                             {"sales": SALES}, ["sales", "totals"])
    assert result.error is None
    assert result.value == ("totals_2", "totals_3")
    assert [h for h, _ in result.saved] == ["totals_2", "totals_3"]


def test_frame_round_trips_with_index_and_dtypes(sandbox):
    frame = pd.DataFrame(
        {"cat": pd.Categorical(["a", "b", "a"]), "ts": pd.date_range("2024-01-01", periods=3, tz="UTC"),
         "f": [1.5, np.nan, 3.0], "i": pd.array([1, None, 3], dtype="Int64"), "s": ["x", "y", "z"]},
        index=pd.MultiIndex.from_tuples([("a", 1), ("a", 2), ("b", 1)], names=["k", "n"]),
    )
    frame.attrs = {}
    result = run(sandbox, "save('same', frame)\nframe", frame=frame)
    pd.testing.assert_frame_equal(result.value, frame)
    pd.testing.assert_frame_equal(result.saved[0][1], frame)


def test_range_index_comes_back_as_a_range_index(sandbox):
    frame = pd.DataFrame({"x": [1, 2, 3]}, index=pd.RangeIndex(10, 16, 2, name="row"))
    result = run(sandbox, "save('fresh', frame.reset_index(drop=True))\nframe", frame=frame)
    pd.testing.assert_frame_equal(result.value, frame, check_index_type=True, check_exact=True)
    assert isinstance(result.value.index, pd.RangeIndex)
    assert result.value.index.start == 10 and result.value.index.step == 2
    assert isinstance(result.saved[0][1].index, pd.RangeIndex)
    series = run(sandbox, "s.reset_index(drop=True)", s=pd.Series([1.0, 2.0], name="v")).value
    assert isinstance(series.index, pd.RangeIndex) and series.name == "v"


def test_series_array_and_table_round_trip(sandbox):
    series = pd.Series([1.0, 2.0], index=pd.Index(["a", "b"], name="key"), name="amount")
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    table = pa.table({"x": [1, 2], "y": ["a", "b"]})
    result = run(sandbox, "save('s', series)\nsave('a', array)\nsave('t', table)\nNone",
                 series=series, array=array, table=table)
    values = dict(result.saved)
    pd.testing.assert_series_equal(values["s"], series)
    np.testing.assert_array_equal(values["a"], array)
    assert values["a"].dtype == np.int32
    assert values["t"].equals(table)


def test_inputs_are_read_only_views_in_the_worker(sandbox):
    result = run(sandbox, "a = arr.copy()\na[0] = 99\n(arr.flags.writeable, int(a[0]), int(arr[0]))",
                 arr=np.arange(5))
    assert result.value == (False, 99, 0)


def test_scalars_and_containers_come_back_as_data(sandbox):
    result = run(sandbox, "import datetime as dt, decimal, pandas as pd\n"
                          "{'d': dt.date(2024, 1, 2), 'dec': decimal.Decimal('1.10'), 's': {1, 2}, "
                          "'ts': pd.Timestamp('2024-01-01'), 'n': None, 'b': b'xy', 'c': 1+2j}")
    assert result.value == {"d": dt.date(2024, 1, 2), "dec": decimal.Decimal("1.10"), "s": {1, 2},
                            "ts": pd.Timestamp("2024-01-01"), "n": None, "b": b"xy", "c": 1 + 2j}


def test_unknown_objects_come_back_as_a_bounded_repr(sandbox):
    result = run(sandbox, "class Thing:\n    def __repr__(self):\n        return 'Thing!'\nThing()")
    assert isinstance(result.value, RemoteObject)
    assert repr(result.value) == "Thing!"


def test_namespace_is_fresh_on_every_call(sandbox):
    run(sandbox, "leftover = 1")
    result = sandbox.execute("leftover", {}, [])
    assert "NameError" in result.error


def test_errors_show_the_model_its_own_traceback_only(sandbox):
    result = sandbox.execute("def f():\n    return 1 / 0\nf()", {}, [])
    assert "ZeroDivisionError" in result.error
    assert 'File "<agent>", line 2' in result.error
    assert "worker.py" not in result.error


def test_mixed_object_columns_come_back_exactly(sandbox):
    result = run(sandbox, "import pandas as pd\npd.DataFrame({'m': [1, 'a', 2.5, None, [1, 2]]})")
    values = result.value["m"].tolist()
    assert values == [1, "a", 2.5, None, [1, 2]]
    assert [type(v) for v in values] == [int, str, float, type(None), list]
    assert result.value["m"].dtype == object


