"""JUnit XML: one test case per finding (a failure), grouped in one suite per file, as CI
test-report viewers expect; a clean run is one passing case."""

from __future__ import annotations

from collections import defaultdict
from xml.etree import ElementTree as ET

from ..diagnostics import Diagnostic
from . import text


def xml(diagnostics: list[Diagnostic], run) -> str:
    root = ET.Element("testsuites", name="accel-lint", tests=str(max(len(diagnostics), 1)),
                      failures=str(len(diagnostics)))
    by_file: dict[str, list[Diagnostic]] = defaultdict(list)
    for d in diagnostics:
        by_file[d.path].append(d)
    if not by_file:
        suite = ET.SubElement(root, "testsuite", name="accel-lint", tests="1", failures="0")
        ET.SubElement(suite, "testcase", name="accel-lint", classname="accel-lint")
    for path, found in by_file.items():
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(found)), failures=str(len(found)))
        for d in found:
            where = f"cell {d.cell}, " if d.cell is not None else ""
            case = ET.SubElement(suite, "testcase", name=f"{d.code} {d.name} at {where}line {d.line}, column {d.column}",
                                 classname=path, file=path, line=str(d.line))
            failure = ET.SubElement(case, "failure", message=d.message, type=d.code)
            info = run.rules.get(d.code)
            failure.text = f"{text.location(d)}: {d.code} {d.message}" + (f"\n{info.url}" if info else "")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
