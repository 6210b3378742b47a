"""``python -m runtime_checks [--nproc N] [--timeout S] [--report PATH] [--trace PATH] [--] script.py [args...]``
(or ``-m module [args...]``): run a script on N guarded ranks and report the first problem.

``python -m runtime_checks view REPORT.json``: write the report's timeline as a self-contained
HTML page next to it and print its path."""

from __future__ import annotations

import argparse
import sys

from . import protocol as P

EPILOG = """exit codes: 0 clean, 2 usage, 3 internal error, 10 divergence, 11 shape_mismatch, 12 hang,
13 rank_exception, 14 rank_died, 15 trigger_misuse, 16 not_distributed"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["view"]:
        from .view import main as view_main

        return view_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m runtime_checks", epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=None, help="ranks to start (default: GPUs, or 2 on CPU)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds a rank may wait in a collective while a peer is elsewhere (default: 20x the "
                             "slowest observed interval between collectives, at least 30)")
    parser.add_argument("--report", default=None,
                        help="write the JSON report here (default: runtime_checks_report.json, written only when "
                             "there is a finding)")
    parser.add_argument("--trace", default=None,
                        help="write the run's per-rank collectives here as a Chrome trace (Perfetto, chrome://tracing); "
                             "with a finding one is always written next to the report")
    parser.add_argument("-m", dest="module", default=None, help="run a module instead of a script")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="script.py [args...]")
    ns = parser.parse_args(argv)
    target = list(ns.target)
    if target and target[0] == "--":
        target = target[1:]
    if ns.module:
        target = [ns.module, *target]
    if not target:
        parser.print_usage(sys.stderr)
        print("python -m runtime_checks: error: a script or -m module is required", file=sys.stderr)
        return P.EXIT_CODES["usage"]
    if ns.nproc is not None and ns.nproc < 1:
        print("python -m runtime_checks: error: --nproc must be at least 1", file=sys.stderr)
        return P.EXIT_CODES["usage"]
    from .launch import launch

    return launch(target, module=bool(ns.module), nproc=ns.nproc, timeout=ns.timeout, report=ns.report,
                  trace=ns.trace)


if __name__ == "__main__":
    sys.exit(main())
