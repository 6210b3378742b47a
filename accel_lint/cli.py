"""``accel-lint``: arguments -> config -> engine -> reporter. Exit 0 clean, 1 findings, 2 error."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import click

from . import __version__
from .cache import CACHE_DIR_NAME
from .config import Config, ConfigError, find_pyproject, load_accelerate_configs, load_config, parse_size
from .discovery import discover
from .doclinks import base_url
from .engine import lint_paths
from . import baseline as baseline_io
from .report import FORMATS, Run, RuleInfo, render
from .rules import all_rules, rule_by_code, rule_table


PROGRESS_MIN_FILES = 200


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        out.extend(v.strip().upper() for v in value.split(",") if v.strip())
    return tuple(out)


def _check_codes(codes: tuple[str, ...], flag: str) -> None:
    known = [code for code, _ in rule_table()]
    for code in codes:
        if not code.startswith("AL") or not any(k.startswith(code) for k in known):
            raise click.UsageError(f"{flag}: unknown rule code or prefix {code!r} (see --list-rules)")


class _LinterCommand(click.Command):
    """``accel-lint server`` starts the language server and ``accel-lint docs`` says where the
    documentation is; any other arguments are the linter's (a folder named ``server`` or ``docs``
    is linted as ``accel-lint ./server``)."""

    def main(self, args=None, prog_name=None, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        if argv[:1] == ["server"]:
            return server_command.main(argv[1:], prog_name=f"{prog_name or 'accel-lint'} server", **extra)
        if argv[:1] == ["docs"]:
            from .site import docs_command

            return docs_command.main(argv[1:], prog_name=f"{prog_name or 'accel-lint'} docs", **extra)
        return super().main(args, prog_name, **extra)


@click.command("server", context_settings={"help_option_names": ["-h", "--help"]})
def server_command() -> None:
    """Run the language server (LSP over stdio) for editors: findings as you type, fixes as
    code actions, rule docs on hover. Needs the `lsp` extra: pip install 'accel-lint[lsp]'."""
    try:
        from .lsp.server import serve
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in ("pygls", "lsprotocol", "cattrs"):
            raise
        click.echo("accel-lint: error: the language server needs pygls, which is not installed; "
                   "install it with: pip install 'accel-lint[lsp]'", err=True)
        sys.exit(2)
    serve()


@click.command(cls=_LinterCommand, context_settings={"help_option_names": ["-h", "--help"]},
               epilog="Editors: `accel-lint server` runs the language server (see `accel-lint server --help`). "
                      "Docs: `accel-lint docs` prints where they are; `accel-lint docs --build` builds them.")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable (e.g. AL3,AL101); replaces the configured set.")
@click.option("--extend-select", multiple=True, help="Codes or prefixes to enable in addition.")
@click.option("--ignore", multiple=True, help="Codes or prefixes to disable.")
@click.option("--exclude", multiple=True, help="Globs to exclude; replaces the defaults.")
@click.option("--extend-exclude", multiple=True, help="Globs to exclude in addition to the defaults.")
@click.option("--accelerate-config", "accelerate_configs", multiple=True, type=click.Path(dir_okay=False),
              help="An Accelerate config YAML (repeatable): severities follow its backend (FSDP, DeepSpeed, DDP, fp16).")
@click.option("--extend-include", multiple=True, help="Globs of file names to lint besides *.py and *.ipynb.")
@click.option("--force-exclude", is_flag=True, help="Apply the excludes to files named on the command line too (for pre-commit).")
@click.option("--output-format", type=click.Choice(list(FORMATS)), default="text", show_default=True,
              help="text (with summary), concise, json, json-lines, github (annotations + text), sarif, junit.")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False), help="Write the report to a file instead of stdout.")
@click.option("--fix", "apply_fixes", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, also apply unsafe fixes.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the fixes as a unified diff and write nothing (exit 1 if any).")
@click.option("--show-fixes", is_flag=True, help="List the fixes applied.")
@click.option("--baseline", type=click.Path(dir_okay=False), help="Report only findings not recorded in this baseline file.")
@click.option("--update-baseline", is_flag=True, help="Write the current findings to the --baseline file and exit 0.")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every line with a finding (to adopt the linter on legacy code).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
@click.option("-v", "--verbose", is_flag=True, help="Print the traceback of internal errors.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule.")
@click.option("--show-evidence", is_flag=True,
              help="Under each finding, the facts it rests on: where the object was made, which prepare() returned it, the guard.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache (also ACCEL_LINT_NO_CACHE=1).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where to keep the cache (default: .accel_lint_cache next to the configuration).")
@click.option("--max-file-size", metavar="SIZE", default=None,
              help="Skip larger files with a notice, e.g. 2MB (default), 500kB.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: the number of CPUs).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="pyproject.toml to read instead of the nearest one.")
@click.option("--list-rules", is_flag=True, help="List every rule and exit.")
@click.option("--explain", metavar="CODE", help="Print a rule's documentation and exit.")
@click.version_option(__version__, prog_name="accel-lint")
def main(paths, select, extend_select, ignore, exclude, extend_exclude, accelerate_configs, extend_include, force_exclude, output_format, output_file, apply_fixes,
         unsafe_fixes, show_diff, show_fixes, baseline, update_baseline, add_noqa, exit_zero, quiet,
         verbose, statistics, show_evidence, no_cache, cache_dir, max_file_size, jobs, config_path, list_rules, explain) -> None:
    """Find distributed-training bugs in code that uses Hugging Face Accelerate."""
    if list_rules:
        for rule in all_rules():
            click.echo(f"{rule.code}  {rule.name:<34} {rule.severity:<8} {rule.summary}")
        return
    if explain:
        rule = rule_by_code(explain)
        if rule is None:
            raise click.UsageError(f"--explain: unknown rule {explain!r} (see --list-rules)")
        click.echo(f"# {rule.code} {rule.name} ({rule.severity})\n")
        click.echo(rule.docs())
        return
    try:
        pyproject = Path(config_path) if config_path else find_pyproject(Path.cwd())
        config = load_config(pyproject)
    except (ConfigError, OSError) as exc:
        click.echo(f"accel-lint: error: {exc}", err=True)
        sys.exit(2)
    config = _apply_flags(config, select, extend_select, ignore, exclude, extend_exclude)
    if extend_include:
        config = replace(config, include=config.include + tuple(extend_include))
    if accelerate_configs:
        try:
            config = replace(config, accelerate_configs=load_accelerate_configs(list(accelerate_configs)))
        except ConfigError as exc:
            click.echo(f"accel-lint: error: {exc}", err=True)
            sys.exit(2)
    if not (no_cache or os.environ.get("ACCEL_LINT_NO_CACHE")):
        config = replace(config, cache_dir=Path(cache_dir) if cache_dir else config.root / CACHE_DIR_NAME)
    if max_file_size is not None:
        try:
            config = replace(config, max_file_size=parse_size(max_file_size))
        except ConfigError as exc:
            raise click.UsageError(f"--{exc}") from None
    if update_baseline and not baseline:
        raise click.UsageError("--update-baseline needs --baseline FILE")
    if sum(map(bool, (apply_fixes, show_diff, add_noqa))) > 1:
        raise click.UsageError("--fix, --diff and --add-noqa do not combine")
    repo_root = _repository_root(config.root)
    files, missing = discover(list(paths) or ["."], config, force_exclude)
    for message in missing:
        click.echo(f"accel-lint: error: {message}", err=True)
    config = _with_launches(config, list(paths) or ["."], files)
    result = lint_paths(files, config, jobs or os.cpu_count() or 1, _progress_reporter(len(files)))
    diagnostics = result.diagnostics
    if add_noqa:
        from . import workflow

        added = workflow.add_noqa(diagnostics)
        click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
        _print_problems(result, verbose)
        sys.exit(2 if missing or result.errors else 0)
    fixed_anything = False
    if apply_fixes or show_diff:
        from . import workflow

        outcome = workflow.fix_files(result, config, unsafe_fixes, write=apply_fixes)
        result.notices.extend(outcome.notices)
        diagnostics = outcome.diagnostics
        if apply_fixes and outcome.applied:
            # what remains, with the analysis across modules (a fixed helper changes its callers)
            diagnostics = lint_paths(files, config, jobs or os.cpu_count() or 1).diagnostics
        fixed_anything = bool(outcome.applied)
        if show_diff:
            diff = outcome.diff()
            if diff:
                click.echo(diff, nl=False)
            click.echo(f"Would fix {outcome.applied_count} problem{'s' if outcome.applied_count != 1 else ''}.", err=True)
        elif outcome.applied_count or show_fixes:
            click.echo(outcome.summary(show_fixes), err=True)
    _print_problems(result, verbose)
    if baseline:
        baseline_path = Path(baseline)
        if update_baseline:
            written = baseline_io.write(baseline_path, diagnostics, repo_root)
            click.echo(f"accel-lint: baseline {baseline_path} written with {written} finding"
                       f"{'s' if written != 1 else ''}", err=True)
            sys.exit(2 if missing or result.errors else 0)
        try:
            filtered = baseline_io.filter_new(diagnostics, baseline_io.load(baseline_path), repo_root)
        except baseline_io.BaselineError as exc:
            click.echo(f"accel-lint: error: {exc}", err=True)
            sys.exit(2)
        diagnostics = filtered.new
        if filtered.stale:
            click.echo(f"accel-lint: note: {filtered.stale} baseline entr{'ies' if filtered.stale != 1 else 'y'} no "
                       f"longer occur; run with --update-baseline to tighten the baseline", err=True)
    docs_base = base_url(config.docs_url)
    run = Run(rules=_rule_infos(output_format == "sarif", docs_base), root=repo_root, version=__version__,
              files_checked=result.files_checked, quiet=quiet, statistics=statistics, show_fixes=show_fixes,
              unsafe_fixes=unsafe_fixes, show_evidence=show_evidence, docs_base=docs_base)
    report = render(output_format, diagnostics, run)
    if show_diff:
        pass  # the diff is the output
    elif output_file:
        Path(output_file).parent.mkdir(parents=True, exist_ok=True)
        Path(output_file).write_text(report + ("\n" if report else ""), encoding="utf-8")
    elif report:
        click.echo(report)
    if missing or result.errors:
        sys.exit(2)
    if show_diff:
        sys.exit(1 if fixed_anything else 0)
    failing = [d for d in diagnostics if d.severity in ("error", "warning")]
    sys.exit(1 if failing and not exit_zero else 0)


def _print_problems(result, verbose: bool) -> None:
    for notice in result.notices:
        click.echo(f"accel-lint: notice: {notice.path}: {notice.message}", err=True)
    for error in result.errors:
        click.echo(f"accel-lint: error: {error.path}: {error.message}", err=True)
        if verbose and error.detail:
            click.echo("  " + error.detail.replace("\n", "\n  "), err=True)


def _rule_infos(full: bool, docs_base: str) -> dict[str, RuleInfo]:
    """Every rule's metadata for the reporters; summaries and docs (which import the rule
    modules, and libcst with them) only for SARIF, the one format that embeds them."""
    if full:
        return {r.code: RuleInfo(r.code, r.name, r.severity, r.summary, r.docs(), docs_base) for r in all_rules()}
    return {code: RuleInfo(code, name, "", "", "", docs_base) for code, name in rule_table()}


def _with_launches(config: Config, arguments: list[str], files: list[Path]) -> Config:
    """The configuration, knowing which of ``files`` the project runs only as one process: read
    from the command files (shell scripts, READMEs) under the linted folders, or under the git
    repository that holds them."""
    from dataclasses import replace

    from .launches import (command_texts, deepspeed_scripts, fp16_free_scripts, names_sharding_backend,
                           one_process_project_scripts, single_process_scripts, strips_module_prefix)

    folders = [Path(a).resolve() if Path(a).is_dir() else Path(a).resolve().parent for a in arguments]
    folders = [f for f in folders if f.exists()]
    if not folders or not files:
        return config
    top = Path(os.path.commonpath([str(f) for f in folders]))
    repository = _repository_root(top)
    project = config.root.resolve()
    if repository != top and (repository / ".git").exists():
        top = repository
    elif top != project and project in top.parents and (project / "pyproject.toml").is_file():
        top = project  # the project's folder holds the linted one
    commands = command_texts(top)  # (the tree's command files, read once for the three questions)
    return replace(config, single_process_files=single_process_scripts(top, files, commands),
                   one_process_project_files=one_process_project_scripts(top, files, commands),
                   deepspeed_files=deepspeed_scripts(top, files, commands),
                   names_sharding_backend=names_sharding_backend(top, commands),
                   fp16_free_files=fp16_free_scripts(top, files, commands),
                   # (the linted code's own loaders, not the repository's other tools)
                   strips_module_prefix=any(strips_module_prefix(folder) for folder in folders))


def _repository_root(start: Path) -> Path:
    """The enclosing git repository's root (where SARIF URIs and baselines are relative to),
    else the configuration's folder."""
    here = start.resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return start


def _progress_reporter(total: int):
    """A progress line on stderr for long runs, only on a terminal and never in CI."""
    if total < PROGRESS_MIN_FILES or os.environ.get("CI") or not sys.stderr.isatty():
        return None
    import time

    last = [0.0]

    def report(done: int, of: int) -> None:
        now = time.monotonic()
        if done == of:
            sys.stderr.write("\r\x1b[2K")  # clear the line before the results are printed
        elif now - last[0] >= 0.1:
            last[0] = now
            sys.stderr.write(f"\raccel-lint: {done}/{of} files")
        sys.stderr.flush()

    return report


def _apply_flags(config: Config, select, extend_select, ignore, exclude, extend_exclude) -> Config:
    sel, ext, ign = _split(select), _split(extend_select), _split(ignore)
    for codes, flag in ((sel, "--select"), (ext, "--extend-select"), (ign, "--ignore")):
        _check_codes(codes, flag)
    if sel:
        # as in ruff, a selection on the command line starts a new layer: the configured
        # select and ignore no longer apply (per-file-ignores still do)
        config = replace(config, select=sel, ignore=())
    if ext:
        config = replace(config, select=config.select + ext)
    if ign:
        config = replace(config, ignore=config.ignore + ign)
    if exclude:
        config = replace(config, exclude=tuple(exclude))
    if extend_exclude:
        config = replace(config, exclude=config.exclude + tuple(extend_exclude))
    return config
