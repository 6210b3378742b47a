"""runtime_checks: the runtime guard for multi-process Accelerate launches.

It shares the table of collectives with the linter: ``accel_lint.collectives``. Entry points: ``python -m runtime_checks`` (launcher), ``python -m runtime_checks.rank`` (in-rank guard), the ``distributed_run`` pytest fixture.
"""
