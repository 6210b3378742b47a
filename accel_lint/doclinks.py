"""Where a rule's documentation page is.

One base URL serves every link to the docs (SARIF ``helpUri`` and ``informationUri``, the JSON
``url``, GitHub annotations, JUnit, the language server's ``codeDescription`` and hover), so
pointing them at a hosted copy of the site is one setting: ``ACCEL_LINT_DOCS_URL``, else
``docs-url`` in ``[tool.accel-lint]``, else the local build of this checkout's site.

The site is built with ``use_directory_urls: false`` (``mkdocs.yml``), so a rule's page is
``rules/<CODE>.html`` both on a web server and opened from disk through a ``file://`` URI.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "ACCEL_LINT_DOCS_URL"
CHECKOUT = Path(__file__).resolve().parent.parent
SITE = CHECKOUT / "site"  # where `mkdocs build` writes with mkdocs.yml at the checkout's root


def base_url(configured: str | None = None) -> str:
    """The docs site's base URL, ending in ``/``. The environment wins over the project's
    setting so that a CI job can point links at a hosted copy without editing pyproject.toml."""
    value = os.environ.get(ENV, "").strip() or (configured or "").strip() or SITE.as_uri()
    return value if value.endswith("/") else value + "/"


def rule_url(code: str, base: str | None = None) -> str:
    """The page of rule ``code`` under ``base`` (default: :func:`base_url` with no setting)."""
    return f"{base or base_url()}rules/{code}.html"


def home_url(base: str | None = None) -> str:
    return f"{base or base_url()}index.html"
