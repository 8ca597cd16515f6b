"""Evaluation harness: golden task suites, graders, a runner, reports and a regression gate.

``python -m harness_magic.evals run SUITE --model MODEL`` runs a suite (see
:mod:`.schema` for the task files, :mod:`.graders` for the graders, :mod:`.runner`
for how each task runs); ``report`` writes an HTML report and ``compare`` gates
one result file against another (:mod:`.compare`). The core never imports IPython.
"""

from harness_magic.evals.schema import FAILURE_CLASSES, Suite, SuiteError, Task, load_suite

__all__ = ["FAILURE_CLASSES", "Suite", "SuiteError", "Task", "load_suite", "run_suite"]


def __getattr__(name):
    if name == "run_suite":
        from harness_magic.evals.runner import run_suite

        return run_suite
    raise AttributeError(name)
