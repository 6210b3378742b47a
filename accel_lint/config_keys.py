"""Every key of ``[tool.accel-lint]``: its type, default and meaning.

This table is the one list of keys: :mod:`accel_lint.config` rejects any other key, and
``python -m accel_lint.docs`` renders it as ``docs/configuration.md``. ``tests/test_site.py``
checks that every key the loaders read (``config.load_config``, ``library.parse_extension``)
has a row here, so a new key cannot ship undocumented.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    type: str
    default: str
    doc: str
    example: str


KEYS: dict[str, Key] = {
    "select": Key("list of codes or prefixes", '["AL"] (every rule)',
                  "The rules to run. A code (`AL301`) or a prefix (`AL3`, `AL`). `--select` on the command "
                  "line replaces it, and the configured `ignore` with it (as in ruff).", 'select = ["AL1", "AL3"]'),
    "extend-select": Key("list of codes or prefixes", "[]", "Rules to run in addition to `select`.",
                         'extend-select = ["AL403"]'),
    "ignore": Key("list of codes or prefixes", "[]",
                  "Rules not to run. Between `select` and `ignore` the longest matching prefix wins; on a tie, "
                  "`ignore` wins. `--ignore` adds to it.", 'ignore = ["AL401"]'),
    "per-file-ignores": Key("table of glob = list of codes", "{}",
                            "Rules not to run in the files a glob matches (the glob is tried on the path "
                            "relative to the configuration's folder and on the file name).",
                            '[tool.accel-lint.per-file-ignores]\n"tests/*" = ["AL3"]'),
    "exclude": Key("list of globs", "`.git`, virtualenvs, `build`, `dist`, caches, `site-packages`, ...",
                   "Files and folders a directory walk skips; replaces the defaults. A file named on the "
                   "command line is still checked unless `--force-exclude` is given.", 'exclude = ["third_party"]'),
    "extend-exclude": Key("list of globs", "[]", "Globs to skip in addition to the defaults.",
                          'extend-exclude = ["vendored"]'),
    "include": Key("list of globs", '["*.py", "*.ipynb"]',
                   "The file names a directory walk picks up; replaces the defaults.", 'include = ["*.py"]'),
    "extend-include": Key("list of globs", "[]", "File names to pick up in addition to `*.py` and `*.ipynb`.",
                          'extend-include = ["*.pyw"]'),
    "accelerator-names": Key("list of names", "[]",
                             "Names of parameters and attributes that hold an `Accelerator` where nothing in the "
                             "code shows it (its maker is out of sight and it is used through no member only an "
                             "accelerator has).", 'accelerator-names = ["acc"]'),
    "accelerate-config": Key("path", "none",
                             "The YAML `accelerate config` writes (relative to the `pyproject.toml`): severities "
                             "follow that backend. See [configuration-aware severities](severities.md).",
                             'accelerate-config = "configs/ddp.yaml"'),
    "accelerate-configs": Key("list of paths", "[]",
                              "Several accelerate configs: a finding takes the highest severity any of them gives.",
                              'accelerate-configs = ["configs/ddp.yaml", "configs/fsdp.yaml"]'),
    "max-file-size": Key("size (bytes, or a string such as \"2MB\", \"500kB\")", '"2MB"',
                         "Larger files (generated code) are skipped with a notice; the exit code is unchanged. "
                         "A notebook counts 20 times larger (outputs are not code).", 'max-file-size = "4MB"'),
    "docs-url": Key("URL", "the local build: `file://<checkout>/site/`",
                    "The base URL of the built documentation site. Rule links (SARIF `helpUri`, the JSON `url`, "
                    "GitHub annotations, JUnit, the language server's `codeDescription` and hover) are "
                    "`<docs-url>rules/<CODE>.html`. The environment variable `ACCEL_LINT_DOCS_URL` overrides "
                    "it. `accel-lint docs` prints the URL in use and builds the local site.",
                    'docs-url = "https://docs.example.org/accel-lint/"'),
    "extend-writes": Key("table of qualified name = position", "{}",
                         "Your functions that write a file: the position of the path argument. See "
                         "[Library models](library-models.md).", 'extend-writes = { "mylib.io.dump" = 1 }'),
    "extend-rank-predicates": Key('table of qualified name = "main" | "local_main"', "{}",
                                  "Your functions that tell the rank: where they return True. See "
                                  "[Library models](library-models.md).",
                                  'extend-rank-predicates = { "mylib.dist.is_rank0" = "main" }'),
    "extend-collectives": Key("table of qualified name = op kind", "{}",
                              "Your functions that every rank must call together (an op kind of accelerate's "
                              "table: `CKPT`, `BARRIER`, `ALLGATHER`, ...). See [Library models](library-models.md).",
                              'extend-collectives = { "mylib.ckpt.save_all" = "CKPT" }'),
    "extend-rank-unique-sources": Key("list of qualified names", "[]",
                                      "Calls whose result differs on every rank: a path built from one is the "
                                      "rank's own. See [Library models](library-models.md).",
                                      'extend-rank-unique-sources = ["mylib.paths.run_scratch_dir"]'),
    "extend-loader-classes": Key("list of qualified names", "[]",
                                 "Your subclasses of torch's `DataLoader`. See [Library models](library-models.md).",
                                 'extend-loader-classes = ["mylib.data.FastLoader"]'),
}
