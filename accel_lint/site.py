"""``accel-lint docs``: where the documentation is, and the local build of the site.

The site's sources (``docs/``, ``mkdocs.yml``) live in the checkout, not in the installed
package; so does the default target of every rule link (:mod:`accel_lint.doclinks`). Building
needs the ``docs`` extra (mkdocs-material).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from .config import ConfigError, find_pyproject, load_config
from .doclinks import CHECKOUT, SITE, base_url, home_url, rule_url

MKDOCS_YML = CHECKOUT / "mkdocs.yml"


def build(site: Path = SITE, strict: bool = True) -> subprocess.CompletedProcess:
    """``mkdocs build`` of this checkout's docs into ``site`` (strict: a warning fails; never
    with ``-q``, under which mkdocs drops warnings before strict mode counts them)."""
    command = [sys.executable, "-m", "mkdocs", "build", "-f", str(MKDOCS_YML), "-d", str(site)]
    return subprocess.run(command + (["--strict"] if strict else []), capture_output=True, text=True)


@click.command("docs", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--build", "do_build", is_flag=True, help="Build the local site (needs the `docs` extra).")
@click.option("--serve", is_flag=True, help="Serve the docs with live reload (mkdocs serve).")
@click.argument("code", required=False)
def docs_command(do_build: bool, serve: bool, code: str | None) -> None:
    """Print the URL of the documentation (or of rule CODE's page) that rule links use;
    --build builds the local site that the default links point at."""
    try:
        configured = load_config(find_pyproject(Path.cwd())).docs_url
    except (ConfigError, OSError) as exc:
        click.echo(f"accel-lint: error: {exc}", err=True)
        sys.exit(2)
    base = base_url(configured)
    local = base == base_url(None) and not configured
    if (do_build or serve) and not MKDOCS_YML.is_file():
        click.echo("accel-lint: error: the docs sources are not installed with the package; build them from a "
                   "checkout, or set docs-url (or ACCEL_LINT_DOCS_URL) to a hosted copy", err=True)
        sys.exit(2)
    if serve:
        sys.exit(subprocess.call([sys.executable, "-m", "mkdocs", "serve", "-f", str(MKDOCS_YML)]))
    if do_build:
        proc = build()
        if proc.returncode != 0:
            click.echo(proc.stdout + proc.stderr, err=True, nl=False)
            click.echo("accel-lint: error: the build failed (is the `docs` extra installed? "
                       "pip install -e '.[docs]')", err=True)
            sys.exit(2)
    click.echo(rule_url(code.upper(), base) if code else home_url(base))
    if local and not (SITE / "index.html").is_file():
        click.echo("accel-lint: note: the local site is not built yet; run `accel-lint docs --build`", err=True)
