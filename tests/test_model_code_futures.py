"""Spec: model code compiles with its own ``from __future__`` statements only, in process and in the sandbox.

``interpreter.py`` itself starts with ``from __future__ import annotations``; ``compile`` passes a caller's
future flags on unless told not to, so model code's annotations came back as strings (``{'x': 'int'}``), unlike
the same code in a notebook cell. A dataclass or pydantic model the agent defines reads them as objects.
"""

from __future__ import annotations

import warnings

import pytest

from harness_magic.core.execution.interpreter import InProcessInterpreter, split_trailing_expression
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement

ANNOTATED = "def f(x: int) -> list[str]:\n    return [str(x)]\nsorted((k, repr(v)) for k, v in f.__annotations__.items())"
OBJECTS = [("return", "list[str]"), ("x", "<class 'int'>")]
STRINGS = [("return", "'list[str]'"), ("x", "'int'")]
ASKING = "from __future__ import annotations\n" + ANNOTATED


def test_split_code_gets_no_future_flag_of_the_module_that_compiles_it():
    namespace: dict = {}
    body, last = split_trailing_expression(ANNOTATED)
    exec(body, namespace)
    assert eval(last, namespace) == OBJECTS
    body, last = split_trailing_expression(ASKING)
    exec(body, namespace)
    assert eval(last, namespace) == STRINGS, "code that asks for string annotations gets them"


def _backends():
    yield "inprocess", InProcessInterpreter()
    if probe_confinement()["confined"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield "sandbox", SandboxedInterpreter()


def test_model_codes_annotations_are_what_a_notebook_cell_gets_in_either_interpreter():
    for name, backend in _backends():
        try:
            result = backend.execute(ANNOTATED, {}, set())
            assert result.error is None, (name, result.error)
            assert result.value == OBJECTS, name
        finally:
            close = getattr(backend, "close", None)
            if close is not None:
                close()


def test_in_process_code_that_asks_for_string_annotations_gets_them():
    """(The sandbox's import list does not offer ``__future__``: there the question does not arise.)"""
    result = InProcessInterpreter().execute(ASKING, {}, set())
    assert result.error is None and result.value == STRINGS
