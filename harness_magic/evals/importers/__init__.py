"""Importers that turn a public benchmark's published files into a suite in the project's format.

``python -m harness_magic.evals import dabench QUESTIONS LABELS TABLES_DIR --out SUITE_DIR``
(:mod:`.dabench`) and ``import dabstep TASKS CONTEXT_DIR --out SUITE_DIR``
(:mod:`.dabstep`). Each writes one task file per question (its tables as input
frames, the question with its constraints and answer format, the benchmark's
own grader, a reference script stating the labelled answer and wrong scripts),
copies the tables it uses, and reports what it skipped and why
(``import_report.json`` in the suite, and on the command line).
"""

from harness_magic.evals.importers.common import BenchmarkImportError, ImportReport

__all__ = ["BenchmarkImportError", "ImportReport", "import_dabench", "import_dabstep"]


def __getattr__(name):
    if name == "import_dabench":
        from harness_magic.evals.importers.dabench import import_dabench

        return import_dabench
    if name == "import_dabstep":
        from harness_magic.evals.importers.dabstep import import_dabstep

        return import_dabstep
    raise AttributeError(name)
