"""SARIF 2.1.0 for code-scanning uploads: rule metadata with help and ``helpUri``, URIs
relative to the repository root (``%SRCROOT%``), and ``partialFingerprints`` that survive
line shifts (see :mod:`accel_lint.fingerprints`)."""

from __future__ import annotations

import json

from ..diagnostics import Diagnostic
from ..doclinks import home_url
from ..fingerprints import fingerprints_with_occurrence, relative_path

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def log(diagnostics: list[Diagnostic], run) -> str:
    used = sorted({d.code for d in diagnostics} | set(run.rules)) if run.rules else sorted({d.code for d in diagnostics})
    index = {code: i for i, code in enumerate(used)}
    rules = []
    for code in used:
        info = run.rules.get(code)
        if info is None:
            rules.append({"id": code})
            continue
        rules.append({
            "id": info.code,
            "name": info.name,
            "shortDescription": {"text": info.summary},
            "fullDescription": {"text": info.summary},
            "help": {"text": info.docs, "markdown": info.docs},
            "helpUri": info.url,
            "defaultConfiguration": {"level": _LEVEL.get(info.severity, "warning")},
            "properties": {"tags": ["accelerate", "distributed"]},
        })
    results = []
    for d, (fp, occurrence) in zip(diagnostics, fingerprints_with_occurrence(diagnostics, run.root)):
        region = {"startLine": d.line, "startColumn": d.column, "endLine": d.end_line, "endColumn": d.end_column}
        properties = {}
        if d.cell is not None:  # a notebook: the region is the line of the .ipynb text; the cell position aside
            region = {"startLine": d.file_line or 1}
            properties = {"cell": d.cell, "cellLine": d.line, "cellColumn": d.column}
        results.append({
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": _LEVEL.get(d.severity, "warning"),
            "message": {"text": d.message},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": relative_path(d.path, run.root), "uriBaseId": "%SRCROOT%"},
                    "region": region,
                },
            }],
            "partialFingerprints": {"accelLintFingerprint/v1": f"{fp}:{occurrence}"},
            **({"relatedLocations": [{
                "id": i,
                "physicalLocation": {
                    "artifactLocation": {"uri": relative_path(d.path, run.root), "uriBaseId": "%SRCROOT%"},
                    "region": {"startLine": line},
                },
                "message": {"text": fact},
            } for i, (line, fact) in enumerate(d.evidence)]} if d.evidence and d.cell is None else {}),
            **({"properties": properties} if properties else {}),
        })
    document = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "accel-lint", "version": run.version, "semanticVersion": run.version,
                                "informationUri": home_url(run.docs_base or None), "rules": rules}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": run.root.resolve().as_uri() + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    return json.dumps(document, indent=2)
