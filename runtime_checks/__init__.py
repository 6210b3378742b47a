"""runtime_checks: the runtime guard for multi-process Accelerate launches (issue #3; not built yet).

It will share the table of collectives with the linter: ``accel_lint.collectives``.
"""
