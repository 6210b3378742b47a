"""How a project launches its scripts, read from its own shell scripts and docs.

A script that uses ``Accelerator`` only for its device and mixed precision, and that the project
runs as ``python eval.py`` (one process), has no ranks: a rule whose harm needs several
processes (a write every rank repeats, a collective under a rank guard) does not apply to it.
The project says how it runs a script in its shell scripts, Makefiles and READMEs. This module
reads them and answers, for each Python file, "launched as one process" when every command
line that names the file runs it with a plain ``python``, and no line runs it under a launcher
that starts several (``accelerate launch``, ``torchrun``, ``deepspeed``, ``srun``, ...) unless the
line says one (``--num_processes 1``, a config file with ``num_processes: 1``, or one visible GPU,
``CUDA_VISIBLE_DEVICES=1``, and no process count or config of its own). A file no command names,
or named both ways, is unknown, and every rule applies as usual. A script written for several
processes (it trains, tests its rank) is taken at its launch commands' word only where they all
run it with a plain ``python`` and the project starts no script on several processes anywhere
(:func:`one_process_project_scripts`).
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

# text files that carry launch commands; each read up to this size
_COMMAND_FILES = (".sh", ".bash", ".zsh", ".md", ".rst", ".txt", ".slurm", ".sbatch", ".job", ".yaml", ".yml")
_COMMAND_NAMES = ("Makefile", "makefile", "Justfile")
_MAX_BYTES = 512 * 1024
_MAX_FILES = 5000
_SKIPPED_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache", "site-packages",
                 ".accel_lint_cache"}

# a launcher that starts several processes (or may: its process count comes from elsewhere)
_MULTI = re.compile(r"accelerate(?:\.commands\.launch|\s+launch)\b|\btorchrun\b|torch\.distributed\.(?:launch|run)\b"
                    r"|\bdeepspeed\b|\bsrun\b|\bmpirun\b|\bmpiexec\b|\bnotebook_launcher\b|\bcolossalai\s+run\b")
# ... told to start exactly one
_ONE_PROCESS = re.compile(r"--(?:num_processes|nproc_per_node|num_gpus)[= ]1\b")
# ... run with one GPU visible (`CUDA_VISIBLE_DEVICES=1 accelerate launch train.py`): with no
# process count of its own the launcher starts one process per visible GPU
_ONE_GPU = re.compile(r"\bCUDA_VISIBLE_DEVICES=['\"]?\d+['\"]?(?=\s)")
_SEVERAL = re.compile(r"--multi_gpu\b|--(?:num_processes|nproc_per_node|num_gpus|num_machines|nnodes)[= ](?!1\b)\d+"
                      r"|--config[_-]file\b")
_SCRIPT = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.py)\b")
# a module run as a script: `python -m pkg.train` (the launcher modules are _MULTI's business)
_MODULE = re.compile(r"(?:^|\s)-m\s+(?!torch\.distributed\.|accelerate\.commands\.)"
                     r"(?!(?:pip|pytest|venv|ensurepip|unittest|build|twine|ipykernel|jupyter|http|json|spacy|nltk)\b)"
                     r"([A-Za-z_]\w*(?:\.\w+)*)(?=[\s\"'`;)]|$)")
_PYTHON = re.compile(r"(?:^|[\s;&|(`])(?:[\w./-]*/)?python(?:3(?:\.\d+)?)?(?:\s+-[uBOW]\w*)*\s+$")

SINGLE = "single"
MULTI = "multi"
# a launch under DeepSpeed: `accelerate launch --use_deepspeed`, the `deepspeed` launcher, or an
# Accelerate config file with `distributed_type: DEEPSPEED`
_USES_DEEPSPEED = re.compile(r"--use_deepspeed\b|(?:^|[\s;&|(`])deepspeed\s")
_DISTRIBUTED_TYPE = re.compile(r"^distributed_type:\s*['\"]?(\w+)", re.MULTILINE)


def _command_lines(text: str) -> list[str]:
    """Lines of commands, with backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append(pending + stripped)
        pending = ""
    if pending:
        out.append(pending)
    return out


_CONFIG_FILE = re.compile(r"--config[_-]file[= ](\S+)")
_NUM_PROCESSES = re.compile(r"^num_processes:\s*(\d+)\s*$", re.MULTILINE)


def _config_processes(line: str, folders: list[Path]) -> int | None:
    """``accelerate launch --config_file cfg.yaml ...``: the ``num_processes`` that file sets,
    looked up relative to ``folders`` (the command file's folder, the project root)."""
    found = _config_setting(line, folders, _NUM_PROCESSES)
    return int(found) if found else None


def _config_setting(line: str, folders: list[Path], setting: re.Pattern) -> str | None:
    """The value ``setting`` matches in the Accelerate config file the line names."""
    match = _CONFIG_FILE.search(line)
    if match is None:
        return None
    # (`$project_path/configs/x.yaml`: a shell variable, most often the folder the command runs in)
    named = re.sub(r"^\$\{?\w+\}?/", "", match.group(1).strip("'\""))
    for folder in folders:
        candidate = folder / named
        try:
            if candidate.is_file() and candidate.stat().st_size < _MAX_BYTES:
                found = setting.search(candidate.read_text(encoding="utf-8", errors="replace"))
                return found.group(1) if found else None
        except OSError:
            continue
    return None


def _runs(text: str):
    """(script as written, the command before it, the whole line) for every ``.py`` that a command
    line runs with ``python`` or under a launcher, and every module it runs as a script
    (``python -m pkg.train``, ``accelerate launch -m pkg.train``: ``pkg/train.py``)."""
    for line in _command_lines(text):
        if ".py" not in line and "-m" not in line:
            continue
        for match in _SCRIPT.finditer(line):
            before = line[:match.start()]
            if _MULTI.search(before) or _PYTHON.search(before):
                yield match.group(1), before, line
        for match in _MODULE.finditer(line):
            before = line[:match.start()] + " "
            if _MULTI.search(before) or _PYTHON.search(before):
                yield match.group(1).replace(".", "/") + ".py", before, line


def launch_backends(text: str, folders: list[Path] | None = None) -> list[tuple[str, str | None]]:
    """(script path as written, ``"DEEPSPEED"`` or ``None``) for every command line that runs a
    ``.py`` under a launcher: whether that launch runs it under DeepSpeed."""
    found: list[tuple[str, str | None]] = []
    for script, before, _ in _runs(text):
        deepspeed = bool(_MULTI.search(before)) and (
            bool(_USES_DEEPSPEED.search(before))
            or ("accelerate" in before and _config_setting(before, folders or [], _DISTRIBUTED_TYPE) == "DEEPSPEED"))
        found.append((script, "DEEPSPEED" if deepspeed else None))
    return found


def mentions(text: str, folders: list[Path] | None = None) -> list[tuple[str, str]]:
    """(script path as written, "single" or "multi") for every command line that runs a ``.py``.
    ``folders``: where an Accelerate config file the line names is looked up."""
    found: list[tuple[str, str]] = []
    for script, before, line in _runs(text):
        if _MULTI.search(before):
            one = _ONE_PROCESS.search(line) or (
                "accelerate" in before and _config_processes(before, folders or []) == 1) or (
                _ONE_GPU.search(before) and not _SEVERAL.search(line))
            found.append((script, SINGLE if one else MULTI))
        else:
            found.append((script, SINGLE))
    return found


def _plain_python_mentions(text: str, folders: list[Path] | None = None) -> list[tuple[str, str]]:
    """:func:`mentions`, where a launcher told to start one process counts as not plain python."""
    return [(script, MULTI if _MULTI.search(before) else SINGLE) for script, before, _ in _runs(text)]


def _walk(root: Path):
    """``os.walk`` of the project's own folders (no VCS, virtual environment or cache folders)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith(".")]
        yield folder, files


_TOO_MANY = None  # what _texts_under yields, last, for a tree with more such files than it reads


def _texts_under(root: Path, suffixes: tuple[str, ...], skipped: tuple[str, ...] = ()):
    """The text of every file under ``root`` whose name ends in one of ``suffixes``, up to
    ``_MAX_BYTES`` each; past ``_MAX_FILES`` such files, ``_TOO_MANY`` and no more. Files that
    also end in one of ``skipped`` (read already by the caller) count but are not read."""
    seen = 0
    for folder, files in _walk(root):
        for name in files:
            if not name.endswith(suffixes):
                continue
            seen += 1
            if seen > _MAX_FILES:
                yield _TOO_MANY
                return
            if name.endswith(skipped):
                continue
            path = Path(folder) / name
            try:
                if path.stat().st_size > _MAX_BYTES:
                    continue
                yield path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue


def _command_files(root: Path) -> list[Path]:
    out: list[Path] = []
    for folder, files in _walk(root):
        for name in files:
            if name.endswith(_COMMAND_FILES) or name in _COMMAND_NAMES:
                out.append(Path(folder) / name)
                if len(out) >= _MAX_FILES:
                    return out
    return out


Commands = list  # (text, folders where a config file it names is looked up), per command file


def command_texts(root: Path) -> Commands:
    """The command files under ``root``, read once: (text, the folders a config file that a
    command names is looked up in: the command file's folder or one above it, up to the root,
    as `bash shell/train.sh` run from the project's folder sees them)."""
    out: Commands = []
    for path in _command_files(root):
        try:
            if path.stat().st_size > _MAX_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out.append((text, [path.parent, *[p for p in path.parent.parents if p == root or root in p.parents]]))
    return out


def _read_command_files(commands: Commands, read) -> dict[str, set]:
    """script as written (``./`` removed) -> what ``read(text, folders)`` says of its launches, over
    every command file."""
    verdicts: dict[str, set] = {}
    for text, folders in commands:
        for script, how in read(text, folders):
            verdicts.setdefault(script.removeprefix("./"), set()).add(how)
    return verdicts


def _per_file(verdicts: dict[str, set], python_files: list[Path], unknown) -> dict[str, set]:
    """``file.as_posix()`` -> the verdicts of the command lines that name it (a bare name that
    several files share adds ``unknown``: which one is run is not known)."""
    by_name: dict[str, list[Path]] = {}
    for file in python_files:
        by_name.setdefault(file.name, []).append(file)
    out: dict[str, set] = {}
    for file in python_files:
        hows: set = set()
        resolved = file.resolve()
        for script, seen in verdicts.items():
            name = script.rsplit("/", 1)[-1]
            if name != file.name:
                continue
            if "/" in script:
                if not resolved.as_posix().endswith("/" + script.lstrip("/")):
                    continue
            elif len(by_name[file.name]) > 1:
                hows.add(unknown)
                continue
            hows |= seen
        out[file.as_posix()] = hows
    return out


def single_process_scripts(root: Path, python_files: list[Path], commands: Commands | None = None) -> frozenset[str]:
    """The files among ``python_files`` (as given, ``as_posix()``) that the project under
    ``root`` runs only as one process (see the module docstring). ``commands``: its command
    files as :func:`command_texts` read them, when the caller has them already."""
    verdicts = _read_command_files(command_texts(root) if commands is None else commands, mentions)
    if not verdicts:
        return frozenset()
    return frozenset(file for file, hows in _per_file(verdicts, python_files, MULTI).items() if hows == {SINGLE})


def one_process_project_scripts(root: Path, python_files: list[Path],
                                commands: Commands | None = None) -> frozenset[str]:
    """Of :func:`single_process_scripts`, the files every command line of which runs them with a
    plain ``python`` (no launcher, not even one told to start one process), in a project whose
    command files start no script at all under a launcher of several processes: the project
    shows only one-process runs (a README's "1 x A100" and ``python train.py``), so a script
    written for several processes is still run as one there."""
    commands = command_texts(root) if commands is None else commands
    verdicts = _read_command_files(commands, mentions)
    if not verdicts:
        return frozenset()
    several = [script for script, hows in verdicts.items() if MULTI in hows]
    if several:
        # (a launch of a script the tree no longer holds, in an old job file, says nothing of
        # how this project runs)
        present = _python_file_names(root)
        if any(script.rsplit("/", 1)[-1] in present for script in several):
            return frozenset()
    plain = _read_command_files(commands, _plain_python_mentions)
    return frozenset(file for file, hows in _per_file(plain, python_files, MULTI).items() if hows == {SINGLE})



_MIXED_PRECISION_FLAG = re.compile(r"--mixed[_-]precision[= ]['\"]?(\w+)")
_MIXED_PRECISION = re.compile(r"^mixed_precision:\s*['\"]?(\w+)", re.MULTILINE)


def launch_precisions(text: str, folders: list[Path] | None = None) -> list[tuple[str, str | None]]:
    """(script path as written, the mixed precision its ``Accelerator()`` gets from the launch, or
    ``None`` when the line does not say) for every command line that runs a ``.py``: ``accelerate
    launch`` gives its ``--mixed_precision`` flag or its config file's ``mixed_precision``; a
    plain ``python`` or ``torchrun`` sets none, so it is ``"no"`` unless the line sets
    ``ACCELERATE_MIXED_PRECISION``."""
    found: list[tuple[str, str | None]] = []
    for script, before, line in _runs(text):
        if "ACCELERATE_MIXED_PRECISION" in line:
            found.append((script, None))
        elif "accelerate" in before and _MULTI.search(before):
            flag = _MIXED_PRECISION_FLAG.search(before)
            found.append((script, flag.group(1).lower() if flag else _config_setting(before, folders or [],
                                                                                       _MIXED_PRECISION)))
        elif _MULTI.search(before) and not re.search(r"\btorchrun\b|torch\.distributed\.(?:launch|run)\b", before):
            found.append((script, None))  # (deepspeed, srun, mpirun: what they set is not read)
        else:
            found.append((script, "no"))
    return found


def fp16_free_scripts(root: Path, python_files: list[Path], commands: Commands | None = None) -> frozenset[str]:
    """The files among ``python_files`` that some command line runs and every one runs without
    fp16 (``--mixed_precision bf16``, a config file with ``mixed_precision: no``, a plain
    ``python``): an ``Accelerator()`` that does not choose its own precision runs no loss scaler
    there."""
    verdicts = _read_command_files(command_texts(root) if commands is None else commands, launch_precisions)
    if not verdicts:
        return frozenset()
    return frozenset(file for file, hows in _per_file(verdicts, python_files, None).items()
                     if hows and hows <= {"no", "bf16"})


def _python_file_names(root: Path) -> set[str]:
    """The names of the ``.py`` files under ``root`` (at most ``_MAX_FILES`` folders' worth)."""
    names: set[str] = set()
    for count, (folder, files) in enumerate(_walk(root)):
        names.update(name for name in files if name.endswith(".py"))
        if count > _MAX_FILES:
            break
    return names


def deepspeed_scripts(root: Path, python_files: list[Path], commands: Commands | None = None) -> frozenset[str]:
    """The files among ``python_files`` that every launch the project writes runs under
    DeepSpeed (``accelerate launch --use_deepspeed``, the ``deepspeed`` launcher, a config file
    with ``distributed_type: DEEPSPEED``), and that some launch names."""
    verdicts = _read_command_files(command_texts(root) if commands is None else commands, launch_backends)
    if not verdicts:
        return frozenset()
    return frozenset(file for file, hows in _per_file(verdicts, python_files, None).items() if hows == {"DEEPSPEED"})


# what names a backend that shards the weights or runs on TPU cores: FSDP (an Accelerate config,
# the launcher's flag, the plugin, torch's classes), DeepSpeed ZeRO-3 (or a stage the text does
# not give as a literal 0-2), XLA
_SHARDING = re.compile(
    r"distributed_type['\"]?\s*:\s*['\"]?(?:FSDP|XLA|TPU)\b|--(?:use_)?fsdp\b|\bfsdp_plugin\b|"
    r"FullyShardedDataParallel|\bfully_shard\b|\bfsdp_version\b|torch_xla|--tpu\b|"
    r"zero_stage['\"]?\s*[:=]\s*(?!['\"]?[012]\b)|['\"]stage['\"]\s*:\s*3\b|\bstage3_|\bzero3\b|"
    r"\bzero[_-]?stage[_-]?3\b|\bZeRO-3\b",
    re.IGNORECASE)
_SETTING_FILES = (".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini")


def names_sharding_backend(root: Path, commands: Commands | None = None) -> bool:
    """Whether anything under ``root`` (its command files, configs and sources) names FSDP,
    DeepSpeed ZeRO-3 (or a stage it does not give) or XLA: where nothing does, a finding whose
    harm exists only there (``Rule.sharding_only_variants``) describes a run the project never
    makes. A tree too large to read whole counts as naming one."""
    commands = command_texts(root) if commands is None else commands
    if any(_SHARDING.search(text) for text, _ in commands):
        return True
    # (job `.yaml` files are command files too: read once, above, unless that list was cut short)
    read = _COMMAND_FILES if len(commands) < _MAX_FILES else ()
    return any(text is _TOO_MANY or _SHARDING.search(text) for text in _texts_under(root, _SETTING_FILES, read))


# a loader that drops DDP's `module.` prefix from the keys it reads: a quick test of the text,
# then the tokens (comments and docstrings that quote such code are no loader)
_MENTIONS_MODULE_PREFIX = re.compile(r"""['"]\^?module|consume_prefix_in_state_dict_if_present""")
_STRIPPING_METHODS = frozenset({"replace", "removeprefix", "lstrip"})


def _strips_module_prefix_in(text: str) -> bool:
    """``{k.replace("module.", ""): v ...}``, ``k.removeprefix("module.")``, ``re.sub("^module",
    ...)``, torch's ``consume_prefix_in_state_dict_if_present``, or ``k.startswith("module")``
    with a ``k[7:]`` slice in the same file."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False

    def literal(token) -> str:
        if token.type != tokenize.STRING:
            return ""
        try:
            value = ast.literal_eval(token.string)
        except (ValueError, SyntaxError):
            return ""
        return value if isinstance(value, str) else ""

    tests_prefix = sliced = False
    for i, token in enumerate(tokens[:-2]):
        if token.type != tokenize.NAME:
            if token.string == "[" and tokens[i + 1].string == "7" and tokens[i + 2].string == ":":
                sliced = True
            continue
        if token.string == "consume_prefix_in_state_dict_if_present" and tokens[i + 1].string == "(":
            return True
        if tokens[i + 1].string != "(":
            continue
        first = literal(tokens[i + 2])
        if token.string in _STRIPPING_METHODS and first in ("module.", "module") and i and tokens[i - 1].string == ".":
            return True
        if token.string == "sub" and first.lstrip("^").startswith("module"):
            return True
        if token.string == "startswith" and first.startswith("module"):
            tests_prefix = True
    return tests_prefix and sliced


def strips_module_prefix(root: Path) -> bool:
    """Whether some Python file under ``root`` drops the ``module.`` prefix of state-dict keys
    when it loads them: the project reads back what a wrapper's ``state_dict()`` saved. A tree
    too large to read whole counts as not known to."""
    for text in _texts_under(root, (".py",)):
        if text is _TOO_MANY:
            return False
        if _MENTIONS_MODULE_PREFIX.search(text) and _strips_module_prefix_in(text):
            return True
    return False
