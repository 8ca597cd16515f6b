"""The value-kind matrix every boundary must carry exactly (issue 12).

Each case is Python source for one expression, so the same value can be
built in the kernel, in a fresh process and inside the sandbox worker.
``PRELUDE`` is run first wherever a case is evaluated. ``assert_identical``
is the strict comparison; ``describe`` is a text fingerprint of everything
it compares, computed on either side of a boundary.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pandas.testing as tm

PRELUDE = (
    "import datetime as dt, decimal, numpy as np, pandas as pd\n"
    "def _attrs(df, **kw):\n    df.attrs.update(kw)\n    return df\n"
    "def _colname(df, name):\n    df.columns.name = name\n    return df\n"
)

CASES: dict[str, str] = {
    # indexes
    "range_index_start_step_name": "pd.DataFrame({'a': [1, 2, 3]}, index=pd.RangeIndex(5, 11, 2, name='r'))",
    "named_int_index": "pd.DataFrame({'a': [1.5, 2.5, 3.5]}, index=pd.Index([10, 30, 20], name='k'))",
    "string_index": "pd.DataFrame({'a': [1, 2]}, index=pd.Index(['x', 'y'], name='key'))",
    "object_index_mixed": "pd.DataFrame({'a': [1, 2, 3]}, index=pd.Index([1, 'a', (2, 3)], dtype=object))",
    "float_index": "pd.Series([1, 2], index=pd.Index([0.5, 1.5]))",
    "bool_values_int8": "pd.Series(np.array([1, -2], dtype='int8'))",
    "multiindex_rows": "pd.DataFrame({'v': [1, 2, 3, 4]}, index=pd.MultiIndex.from_product([['a', 'b'], [1, 2]],"
                      " names=['l', 'n']))",
    "multiindex_columns": "pd.DataFrame(np.arange(8).reshape(2, 4), columns=pd.MultiIndex.from_product("
                          "[['a', 'b'], ['x', 'y']], names=['upper', 'lower']))",
    "categorical_index": "pd.DataFrame({'a': [1, 2]}, index=pd.CategoricalIndex(['x', 'y'], categories=['y', 'x', 'z'],"
                         " name='cat'))",
    "categorical_columns": "pd.DataFrame([[1, 2]], columns=pd.CategoricalIndex(['a', 'b'], categories=['b', 'a', 'c']))",
    "datetime_index_with_freq": "pd.DataFrame({'a': [1, 2, 3]}, index=pd.date_range('2024-01-01', periods=3, freq='h',"
                                " tz='UTC', name='ts'))",
    "datetime_index_freq_ms": "pd.Series([1, 2, 3], index=pd.date_range('2024-01-31', periods=3, freq='ME'))",
    "timedelta_index_with_freq": "pd.Series([1, 2], index=pd.timedelta_range('1D', periods=2, freq='D'))",
    "period_index": "pd.DataFrame({'a': [1, 2, 3]}, index=pd.period_range('2024-01', periods=3, freq='M', name='p'))",
    "interval_index": "pd.DataFrame({'a': [1, 2]}, index=pd.interval_range(0.0, 1.0, periods=2, closed='left'))",
    "tuple_column_labels": "pd.DataFrame([[1, 2]], columns=pd.Index([('a', 1), ('b', 2)], tupleize_cols=False))",
    "integer_column_names": "pd.DataFrame({1: [1], 2: [2]})",
    "mixed_column_names": "pd.DataFrame([[1, 2, 3]], columns=pd.Index([1, 'a', 2.5], dtype=object))",
    "duplicate_column_names": "pd.DataFrame([[1, 2.0, 'x']], columns=['a', 'a', 'b'])",
    "named_column_index": "_colname(pd.DataFrame({'a': [1], 'b': [2]}), 'fields')",
    "datetime_column_labels": "pd.DataFrame([[1, 2]], columns=pd.DatetimeIndex(['2024-01-01', '2024-01-02']))",
    # dtypes
    "categorical_ordered_unused": "pd.DataFrame({'c': pd.Categorical(['b', 'a', None], categories=['z', 'b', 'a'],"
                                  " ordered=True)})",
    "categorical_int_categories": "pd.DataFrame({'c': pd.Categorical([3, 1, 3], categories=[3, 2, 1])})",
    "nullable_dtypes": "pd.DataFrame({'i': pd.array([1, None, 3], dtype='Int64'), 'b': pd.array([True, None, False],"
                       " dtype='boolean'), 's': pd.array(['a', None, 'c'], dtype='string'),"
                       " 'f': pd.array([1.5, None, 2.0], dtype='Float64')})",
    "nullable_uint8": "pd.Series(pd.array([1, None], dtype='UInt8'))",
    "string_python_storage": "pd.Series(pd.array(['a', None], dtype='string[python]'))",
    "string_pyarrow_storage": "pd.Series(pd.array(['a', None], dtype='string[pyarrow]'))",
    "default_str_with_missing": "pd.DataFrame({'s': pd.Series(['a', None, 'ccc'])})",
    "tz_datetimes_with_nat": "pd.DataFrame({'t': pd.to_datetime(['2024-03-31 01:30', None, '2024-10-27 02:30'])"
                             ".tz_localize('Europe/Paris', ambiguous=True)})",
    "datetime_seconds_resolution": "pd.DataFrame({'t': np.array(['2024-01-01T00:00:01', '1900-02-01'],"
                                   " dtype='datetime64[s]')})",
    "datetime_nanoseconds": "pd.Series(pd.to_datetime(['2024-01-01 00:00:00.000000001']))",
    "timedeltas_with_nat": "pd.DataFrame({'d': pd.to_timedelta([1, None, 86400], unit='s')})",
    "periods_column": "pd.DataFrame({'p': pd.period_range('2024-01', periods=3, freq='M')})",
    "intervals_column": "pd.DataFrame({'i': pd.interval_range(0, 3)})",
    "object_mixed_types": "pd.DataFrame({'o': pd.Series([1, 'a', 2.5, None, [1, 2], {'k': 1}, dt.date(2024, 1, 1)],"
                          " dtype=object)})",
    "object_missing_kinds": "pd.Series([np.nan, None, pd.NA, pd.NaT, 1], dtype=object)",
    "object_strings": "pd.DataFrame({'o': pd.Series(['a', 'b'], dtype=object)})",
    "object_lists_and_dicts": "pd.Series([[1, [2]], {'a': None}, (1, 'x')], dtype=object)",
    "decimal_objects": "pd.DataFrame({'d': [decimal.Decimal('1.10'), decimal.Decimal('2'), decimal.Decimal('2.00')]})",
    "object_numpy_scalars": "pd.Series([np.float32(1.5), np.int64(3), np.bool_(True)], dtype=object)",
    "object_timestamps_with_zones": "pd.Series([pd.Timestamp('2024-01-01 00:00:00.000000001', tz='Asia/Tokyo'),"
                                    " pd.Timestamp('2024-06-01', tz='UTC')], dtype=object)",
    "numeric_widths_nan_inf": "pd.DataFrame({'f': np.array([1.5, np.nan, np.inf, -0.0], dtype='float32'),"
                              " 'u': np.array([1, 2, 3, 255], dtype='uint8'), 'b': [True, False, True, False]})",
    "int64_extremes": "pd.Series(np.array([np.iinfo('int64').min, np.iinfo('int64').max]))",
    "float16": "pd.Series(np.array([1.5, -2.0], dtype='float16'))",
    "complex_numbers": "pd.DataFrame({'z': np.array([1 + 2j, 3 - 1j])})",
    "sparse_column": "pd.DataFrame({'s': pd.arrays.SparseArray([0, 0, 1, 0])})",
    "pyarrow_backed": "pd.DataFrame({'i': pd.array([1, None], dtype='int64[pyarrow]'),"
                      " 's': pd.array(['x', None], dtype='large_string[pyarrow]')})",
    "bytes_column": "pd.Series([b'ab', b'\\x00\\xff'], dtype=object)",
    # frame-level properties
    "attrs_nested": "_attrs(pd.DataFrame({'a': [1]}), source='sales', params={'k': [1, 2]})",
    "flags_no_duplicate_labels": "pd.DataFrame({'a': [1]}).set_flags(allows_duplicate_labels=False)",
    "empty_frame": "pd.DataFrame()",
    "empty_typed_columns": "pd.DataFrame({'a': pd.Series([], dtype='int64'), 'b': pd.Series([], dtype='str'),"
                           " 'c': pd.Series([], dtype='category')})",
    "empty_object_columns": "pd.DataFrame(columns=pd.Index(['a', 'b'], dtype=object))",
    "wide_frame": "pd.DataFrame(np.arange(300).reshape(3, 100))",
    "fortran_frame": "pd.DataFrame(np.asfortranarray(np.arange(6.0).reshape(3, 2)), columns=['x', 'y'])",
    # series
    "series_named_tz_index": "pd.Series([1.0, None], name='price', index=pd.DatetimeIndex(['2024-01-01',"
                             " '2024-01-02'], tz='Asia/Tokyo', name='day'))",
    "series_int_name_categorical": "pd.Series(pd.Categorical(['x', 'y']), name=7)",
    "series_tuple_name": "pd.Series([1, 2], name=('a', 1))",
    "series_attrs": "_attrs(pd.Series([1, 2, 3]), unit='kg')",
    "series_of_categorical_cut": "pd.cut(pd.Series([1, 5, 9]), bins=[0, 4, 8, 12])",
    # arrays
    "ndarray_zero_d": "np.array(3.25)",
    "ndarray_fortran_3d": "np.asfortranarray(np.arange(24, dtype='int16').reshape(2, 3, 4))",
    "ndarray_fortran_2d_float": "np.asfortranarray(np.arange(12.0).reshape(3, 4))",
    "ndarray_structured": "np.array([(1, 2.5, b'ab'), (2, -1.0, b'c')], dtype=[('id', '<i4'), ('x', '<f8'),"
                          " ('tag', 'S2')])",
    "ndarray_big_endian": "np.arange(5, dtype='>i4')",
    "ndarray_datetime_ms": "np.array(['2024-01-01', 'NaT'], dtype='datetime64[ms]')",
    "ndarray_bool": "np.array([True, False])",
    "ndarray_unicode": "np.array(['a', 'bcd'])",
    "ndarray_of_objects": "np.array([1, 'a', None], dtype=object)",
    "ndarray_objects_2d_fortran": "np.asfortranarray(np.array([[1, 'a'], [None, 2.5]], dtype=object))",
    # scalars and containers
    "numpy_float32_scalar": "np.float32(1.25)",
    "numpy_int64_scalar": "np.int64(-7)",
    "numpy_datetime64_scalar": "np.datetime64('2024-01-01T00:00:00.000000001')",
    "timestamp_tz_ns": "pd.Timestamp('2024-07-04 12:00:00.000000001', tz='America/New_York')",
    "timedelta_scalar": "pd.Timedelta(1, unit='ns')",
    "period_scalar": "pd.Period('2024Q1', freq='Q')",
    "interval_scalar": "pd.Interval(0.5, 1.5, closed='both')",
    "decimal_scalar": "decimal.Decimal('2.00')",
    "na_scalar": "pd.NA",
    "long_string": "'line\\n' * 10000",
    "nested_dict": "{'a': [1, 2, {'b': (3, 4)}], 5: {'c': None}, 'f': 1.0, 'i': 1}",
    "sets": "{'s': {1, 2}, 'fs': frozenset({'x'})}",
    "bytes_value": "bytes(range(256)) * 10",
    "big_int": "2 ** 200",
    "dates_and_times": "[dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.time(1, 2, 3),"
                       " dt.timedelta(days=1, microseconds=5)]",
}


def build(case: str) -> Any:
    """The value of ``case``, built in this process."""
    namespace: dict[str, Any] = {}
    exec(PRELUDE, namespace)
    return eval(CASES[case], namespace)


def assert_identical(expected: Any, actual: Any) -> None:
    """Exact equality, strictest settings pandas and numpy offer, plus attrs, flags and cell types."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, pd.DataFrame):
        tm.assert_frame_equal(actual, expected, check_exact=True, check_index_type=True, check_column_type=True,
                              check_categorical=True, check_freq=True, check_flags=True)
        assert actual.attrs == expected.attrs
        assert [type(c) for c in actual.columns] == [type(c) for c in expected.columns]
        if isinstance(expected.index, pd.RangeIndex):
            assert (actual.index.start, actual.index.step) == (expected.index.start, expected.index.step)
        for position, dtype in enumerate(expected.dtypes):
            if dtype == object:
                _same_cells(expected.iloc[:, position].tolist(), actual.iloc[:, position].tolist())
    elif isinstance(expected, pd.Series):
        tm.assert_series_equal(actual, expected, check_exact=True, check_index_type=True,
                               check_series_type=True, check_categorical=True, check_freq=True, check_flags=True)
        assert actual.attrs == expected.attrs
        assert type(actual.name) is type(expected.name)
        assert [type(c) for c in actual.index] == [type(c) for c in expected.index]
        if expected.dtype == object:
            _same_cells(expected.tolist(), actual.tolist())
    elif isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype and str(actual.dtype) == str(expected.dtype)
        assert actual.shape == expected.shape
        assert actual.flags.f_contiguous == expected.flags.f_contiguous
        assert actual.flags.c_contiguous == expected.flags.c_contiguous
        if expected.dtype == object:
            _same_cells(expected.ravel(order="K").tolist(), actual.ravel(order="K").tolist())
        else:
            np.testing.assert_array_equal(actual, expected, strict=True)
    elif expected is pd.NA:
        assert actual is pd.NA
    else:
        assert actual == expected
        _same_cells([expected], [actual])


def _same_cells(expected: list, actual: list) -> None:
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        assert type(a) is type(e), (a, e)
        if isinstance(e, (list, tuple)):
            _same_cells(list(e), list(a))
        elif isinstance(e, dict):
            assert list(a) == list(e)
            _same_cells(list(e.values()), list(a.values()))
        elif e is pd.NA or e is None or e is pd.NaT:
            assert a is e
        elif isinstance(e, float) and e != e:
            assert a != a
        else:
            assert a == e and str(a) == str(e)
            if isinstance(e, pd.Timestamp):
                assert str(a.tz) == str(e.tz) and a.unit == e.unit


DESCRIBE = '''
def describe(v):
    """Text fingerprint of a value: type, dtypes, labels with their types, freq, flags, attrs, cells."""
    import numpy as np, pandas as pd
    def cells(xs):
        return [(type(x).__name__, repr(x)) for x in xs]
    def index(ix):
        out = [type(ix).__name__, repr(ix.dtype), list(map(repr, ix.names)), cells(list(ix)),
               getattr(getattr(ix, 'freq', None), 'freqstr', None)]
        if isinstance(ix, pd.RangeIndex):
            out.append((ix.start, ix.stop, ix.step))
        return out
    if isinstance(v, (pd.DataFrame, pd.Series)):
        frame = v.to_frame('__s__') if isinstance(v, pd.Series) else v
        return repr([type(v).__name__, [repr(t) for t in frame.dtypes], index(frame.index),
                     index(frame.columns) if isinstance(v, pd.DataFrame) else repr(v.name),
                     v.flags.allows_duplicate_labels, repr(v.attrs),
                     [cells(frame.iloc[:, i].tolist()) for i in range(frame.shape[1])]])
    if isinstance(v, np.ndarray):
        return repr(['ndarray', v.dtype.str, v.shape, v.flags.f_contiguous, v.flags.c_contiguous,
                     cells(v.ravel(order='K').tolist())])
    return repr([type(v).__name__, repr(v)])
'''


def describe(value: Any) -> str:
    namespace: dict[str, Any] = {}
    exec(DESCRIBE, namespace)
    return namespace["describe"](value)
