"""runtime_checks: the runtime guard for multi-process Accelerate launches.

It shares the table of collectives with the linter: ``accel_lint.collectives``. Entry points: ``python -m runtime_checks`` (launcher), ``python -m runtime_checks.rank`` (in-rank guard), the ``distributed_run`` pytest fixture.
"""


def __getattr__(name: str):
    # `from runtime_checks import notebook_launch` without importing torch for everything else
    if name in ("notebook_launch", "NotebookReport"):
        from . import notebook

        return getattr(notebook, name)
    raise AttributeError(name)
