"""Benchmark (needs 2 GPUs): what each rank-gated and unwrap rule's bug really does per backend.

    python bench/backend_matrix.py                      # every fixture x every config, 2 GPUs
    python bench/backend_matrix.py --cpu                # DDP on 2 gloo CPU ranks and one process
    python bench/backend_matrix.py --fixtures al301 --configs ddp,zero3
    python bench/backend_matrix.py --render             # docs/backends.md from the JSON

Each fixture of ``fixtures/matrix/`` (a bad and a good script per AL3xx/AL5xx rule, each a few
training steps of a toy model) runs under ``accelerate launch --config_file
fixtures/matrix/configs/<config>.yaml -m runtime_checks.rank`` (the in-rank guard), with a hard
time cap. A cell's outcome is one of:

* ``ok``: every rank finished and the observations show nothing wrong;
* ``hang``: the guard's verdict was a hang, a divergence or a trigger misuse (ranks waiting in
  collectives that never match), or the cap was reached with no verdict;
* ``crash``: a rank raised (the exception) or died;
* ``silent``: every rank finished, but what the fixture observed is wrong: a checkpoint with
  rank 0's RNG state only, a saved state dict with ``module.`` keys, sharded (DTensor) or empty
  tensors, replicas holding different weights.

Writes ``bench/results/backend_matrix.json`` (with the GPUs and the torch, accelerate and
DeepSpeed versions) and, with ``--render``, ``docs/backends.md``. Not a test: CI has no GPU
(``tests/test_backend_matrix.py`` checks the fixtures and the classification on CPU).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURES = ROOT / "fixtures" / "matrix"
CONFIGS = FIXTURES / "configs"
RESULTS = HERE / "results" / "backend_matrix.json"
DOC = ROOT / "docs" / "backends.md"

# the configs in the order of the table's columns
CONFIG_ORDER = ["ddp", "fsdp2_sharded", "fsdp2_full", "fsdp1_sharded", "fsdp1_full", "zero2", "zero3", "single"]
CONFIG_TITLES = {"ddp": "DDP", "fsdp2_sharded": "FSDP2 sharded", "fsdp2_full": "FSDP2 full",
                 "fsdp1_sharded": "FSDP1 sharded", "fsdp1_full": "FSDP1 full", "zero2": "ZeRO-2",
                 "zero3": "ZeRO-3", "single": "1 process", "cpu_ddp": "DDP (gloo, CPU)", "cpu_single": "1 process (CPU)"}
HANG_KINDS = {"hang", "divergence", "trigger_misuse"}
_port = itertools.count(0)


def fixtures(selected: list[str] | None) -> list[Path]:
    found = sorted(p for p in FIXTURES.glob("al*.py"))
    if selected:
        found = [p for p in found if any(p.stem.startswith(s) for s in selected)]
    return found


def command(config: str, script: Path, out: Path, port: int, guarded: bool = True) -> tuple[list[str], dict[str, str]]:
    """The launch command and environment of one cell."""
    env = dict(os.environ, MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
    guard = ["-m", "runtime_checks.rank", str(script), str(out)] if guarded else [str(script), str(out)]
    if config == "cpu_ddp":
        env.update(ACCELERATE_USE_CPU="1", CUDA_VISIBLE_DEVICES="")
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(port), *guard], env
    if config == "cpu_single":
        env.update(ACCELERATE_USE_CPU="1", CUDA_VISIBLE_DEVICES="")
        return [sys.executable, *guard], env
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / f"{config}.yaml")]
    if config != "single":
        launch += ["--main_process_port", str(port)]
    return [*launch, *guard], env


def run_cell(config: str, script: Path, cap: float, guard_timeout: float, work: Path, guarded: bool = True) -> dict:
    out = work / f"{script.stem}__{config}{'' if guarded else '__plain'}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    port = 21000 + 10 * next(_port)
    cmd, env = command(config, script, out, port, guarded)
    env.update(RUNTIME_CHECKS_TIMEOUT=str(guard_timeout), RUNTIME_CHECKS_REPORT=str(out / "report.json"))
    start = time.perf_counter()
    # output to a file, not a pipe: a hung worker that outlives its launcher must not block us
    with open(out / "log.txt", "w") as sink:
        proc = subprocess.Popen(cmd, cwd=out, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=cap)
            capped = False
        except subprocess.TimeoutExpired:
            capped = True
        _kill_tree(proc.pid)  # torchrun starts its workers in sessions of their own
        proc.wait()
    log = (out / "log.txt").read_text(errors="replace")
    wall = round(time.perf_counter() - start, 1)
    observed = {}
    for path in sorted(out.glob("observed_rank*.json")):
        observed[path.stem.removeprefix("observed_rank")] = json.loads(path.read_text())
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    cell = classify(proc.returncode, capped, report, observed, log)
    cell.update(fixture=script.stem, config=config, mode="guarded" if guarded else "plain", wall_s=wall,
                exit=proc.returncode)
    if cell["outcome"] == "crash" or os.environ.get("MATRIX_KEEP_LOGS"):
        cell["log_tail"] = _first_traceback(log) + log[-1500:]
    return cell


def _kill_tree(root: int) -> None:
    """SIGKILL ``root`` and every process descended from it (only those this cell started)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    todo, tree = [root], []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _first_traceback(log: str) -> str:
    """The first traceback a rank printed (the launcher's own comes last and says less)."""
    start = log.find("Traceback (most recent call last)")
    return log[start:start + 2500] + "\n...\n" if start >= 0 else ""


def classify(code: int | None, capped: bool, report: dict | None, observed: dict, log: str) -> dict:
    """A cell's outcome from the launcher's exit, the guard's report and the observations."""
    finding = (report or {}).get("findings") or []
    finding = finding[0] if finding else None
    if finding is not None and finding.get("kind") in HANG_KINDS:
        rows = [{"rank": r.get("rank"), "state": r.get("state"), "op": r.get("op"),
                 "line": (r.get("site") or {}).get("line")} for r in finding.get("rows", [])]
        return {"outcome": "hang", "verdict": finding["kind"], "detected_after_s": finding.get("detected_after"),
                "detail": finding.get("title", ""), "rows": rows}
    if finding is not None and finding.get("kind") not in (None, "not_distributed"):
        return {"outcome": "crash", "verdict": finding["kind"], "detail": _exception(finding, log)}
    if capped:
        return {"outcome": "hang", "verdict": "cap reached, no verdict", "detail": ""}
    if code != 0:
        return {"outcome": "crash", "verdict": f"exit {code}", "detail": _exception(None, log)}
    problems = silent_problems(observed)
    if problems:
        return {"outcome": "silent", "detail": "; ".join(problems)}
    return {"outcome": "ok", "detail": ""}


def _exception(finding: dict | None, log: str) -> str:
    """What went wrong: the guard's title ("rank 1 raised ValueError: ..."), else the log's last
    exception line."""
    if finding and finding.get("title"):
        why = f" ({finding['why'][:200]})" if finding.get("kind") == "shape_mismatch" else ""
        return (finding["title"] + why)[:300]
    lines = [ln.strip() for ln in log.splitlines()]
    raised = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b.*:", ln)]
    return raised[-1][:300] if raised else ""


def silent_problems(observed: dict) -> list[str]:
    """What is wrong in the ranks' observations, in words."""
    problems: list[str] = []
    ranks = sorted(observed)
    for rank in ranks:
        facts = observed[rank]
        files = facts.get("checkpoint_files")
        if files is not None:
            states = [f for f in files if re.fullmatch(r"random_states_\d+\.pkl", f)]
            if len(states) < facts.get("num_processes", 1):
                problems.append(f"checkpoint holds {len(states)} of {facts['num_processes']} ranks' RNG states")
                break
    replicas = {observed[r].get("replica") for r in ranks if observed[r].get("replica")}
    if len(replicas) > 1:
        problems.append("the ranks' replicas hold different weights")
    held_out = {tuple(observed[r]["held_out"]) for r in ranks if observed[r].get("held_out") is not None}
    if len(held_out) > 1:
        trained = set().union(*(observed[r].get("trained", ()) for r in ranks))
        leaked = trained & set().union(*map(set, held_out))
        problems.append(f"the ranks split the data differently ({len(leaked)} held-out samples trained on by some rank)")
    for rank in ranks:
        saved = observed[rank].get("saved")
        if saved:
            problems.extend(_saved_problems(saved))
    return list(dict.fromkeys(problems))


def _saved_problems(saved: dict) -> list[str]:
    problems = []
    keys, expected = saved["keys"], saved["expected_keys"]
    if not keys:
        problems.append("saved state dict is empty")
    elif any(k.startswith("module.") for k in keys):
        problems.append("saved keys carry a `module.` prefix")
    elif set(keys) != set(expected):
        problems.append(f"saved keys differ from the model's ({len(keys)} vs {len(expected)})")
    for sharded in ("DTensor", "ShardedTensor"):
        if sharded in saved.get("value_types", []):
            problems.append(f"saved tensors are {sharded} shards")
    shapes, want = saved.get("shapes", {}), saved.get("expected_shapes", {})
    for key, shape in shapes.items():
        name = key.removeprefix("module.")
        if name in want and shape != want[name]:
            numel = 1
            for n in shape:
                numel *= n
            problems.append("saved tensors are empty" if numel == 0 else "saved tensors are shards")
            break
    return problems


def environment() -> dict:
    info: dict = {"python": sys.version.split()[0]}
    for name in ("torch", "accelerate", "deepspeed"):
        try:
            module = __import__(name)
            info[name] = module.__version__
        except Exception as exc:  # noqa: BLE001 - absent, or broken: say which
            info[name] = f"not importable ({type(exc).__name__})"
    try:
        import torch

        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001
        info["gpus"] = []
    return info


def run_matrix(configs: list[str], scripts: list[Path], jobs: int, cap: float, guard_timeout: float,
               out: Path, resume: bool = False, guarded: bool = True, only: set[str] | None = None) -> dict:
    """Run the cells, writing ``out`` after each one (a run stopped by a time limit keeps what it
    measured; ``resume`` skips the cells ``out`` already holds)."""
    old = json.loads(out.read_text()) if out.exists() else None
    mode = "guarded" if guarded else "plain"
    held = (old or {}).get("cells", [])
    done = {(c["fixture"], c["config"]) for c in held if _mode(c) == mode} if resume else set()
    if only:  # e.g. plain runs of the cells whose guarded outcome was a hang
        wanted = {(c["fixture"], c["config"]) for c in held if _mode(c) == "guarded" and c["outcome"] in only}
    else:
        wanted = None
    work = Path(tempfile.mkdtemp(prefix="backend-matrix-"))
    cells = [(c, s) for s in scripts for c in configs
             if (s.stem, c) not in done and (wanted is None or (s.stem, c) in wanted)]
    result = {"environment": environment(), "cap_s": cap, "guard_timeout_s": guard_timeout, "cells": []}
    out.parent.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_cell, c, s, cap, guard_timeout, work, guarded) for c, s in cells]
        for future in futures:
            cell = future.result()
            result["cells"].append(cell)
            print(f"{cell['fixture']:45s} {cell['config']:14s} {mode:7s} {cell['outcome']:7s} {cell['wall_s']:6.1f}s "
                  f"{cell.get('verdict', '')} {cell['detail'][:110]}", flush=True)
            out.write_text(json.dumps(merge(old, result), indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return merge(old, result)


def merge(old: dict | None, new: dict) -> dict:
    """New cells replace old ones of the same fixture and config; the rest are kept."""
    if not old:
        return new
    keep = {(c["fixture"], c["config"], _mode(c)): c for c in old.get("cells", [])}
    keep.update({(c["fixture"], c["config"], _mode(c)): c for c in new["cells"]})
    merged = dict(new, cells=sorted(keep.values(), key=lambda c: (c["fixture"], c["config"], _mode(c))))
    if old.get("notes"):
        merged["notes"] = old["notes"]
    return merged


def _mode(cell: dict) -> str:
    return cell.get("mode", "guarded")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", help="comma-separated config names (default: all)")
    parser.add_argument("--fixtures", help="comma-separated fixture name prefixes (default: all)")
    parser.add_argument("--cpu", action="store_true", help="DDP on 2 gloo CPU ranks and one CPU process")
    parser.add_argument("--jobs", type=int, default=6, help="cells run at the same time")
    parser.add_argument("--cap", type=float, default=150.0, help="hard time cap per cell, seconds")
    parser.add_argument("--guard-timeout", type=float, default=20.0, help="the guard's hang timeout, seconds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--resume", action="store_true", help="skip the cells --out already holds")
    parser.add_argument("--plain", action="store_true", help="without the guard: what the bug does on its own")
    parser.add_argument("--only", help="comma-separated guarded outcomes: run only those cells (with --plain)")
    parser.add_argument("--render", action="store_true", help="write docs/backends.md from --out and stop")
    args = parser.parse_args(argv)
    if args.render:
        DOC.write_text(render(json.loads(args.out.read_text())))
        print(DOC)
        return 0
    configs = args.configs.split(",") if args.configs else (["cpu_ddp", "cpu_single"] if args.cpu else CONFIG_ORDER)
    scripts = fixtures(args.fixtures.split(",") if args.fixtures else None)
    only = set(args.only.split(",")) if args.only else None
    run_matrix(configs, scripts, args.jobs, args.cap, args.guard_timeout, args.out, args.resume, not args.plain, only)
    print(args.out)
    return 0


# -- docs/backends.md ------------------------------------------------------------------------
_SYMBOL = {"ok": "ran fine", "hang": "**hang**", "crash": "**crash**", "silent": "**silent**"}


def render(data: dict) -> str:
    env = data["environment"]
    cells = {(c["fixture"], c["config"]): c for c in data["cells"] if _mode(c) == "guarded"}
    plain = {(c["fixture"], c["config"]): c for c in data["cells"] if _mode(c) == "plain"}
    configs = [c for c in [*CONFIG_ORDER, "cpu_ddp", "cpu_single"] if any(k[1] == c for k in cells)]
    names = sorted({k[0] for k in cells})
    lines = [
        "# What each rule's bug does on each backend",
        "",
        "Measured by `bench/backend_matrix.py`: every script of `fixtures/matrix/` (a bad and a good",
        "one per rank-gated and unwrap rule, each a few training steps of a small model with a",
        "BatchNorm buffer) under `accelerate launch --config_file fixtures/matrix/configs/<config>.yaml",
        "-m runtime_checks.rank`, each run under a hard time cap (`--cap`), the guard's hang timeout",
        f"at {data['guard_timeout_s']:.0f} s.",
        "",
        f"Machine: {', '.join(env.get('gpus') or ['CPU only'])}; Python {env['python']}, torch {env['torch']}, "
        f"accelerate {env['accelerate']}, DeepSpeed {env['deepspeed']}. Results: "
        "`bench/results/backend_matrix.json`.",
        "",
        "Outcomes: *ran fine*; **hang** (the guard's verdict: ranks wait in collectives that never",
        "match, or the cap with no verdict); **crash** (a rank raised: the exception); **silent**",
        "(every rank finished, but the result is wrong: what is wrong). Every cell the guard called a",
        "hang was run again without the guard (`--plain --only hang`): *without the guard* says",
        "whether the job really hung (until the cap) or finished, so a guard verdict is never the only",
        "evidence of a deadlock. The row a rule's documentation cites is its fixture's name.",
        "",
        "| fixture | " + " | ".join(CONFIG_TITLES.get(c, c) for c in configs) + " |",
        "|---|" + "---|" * len(configs),
    ]
    for name in names:
        row = [f"`{name}`"]
        for config in configs:
            cell = cells.get((name, config))
            text = _cell_text(cell) if cell else "not run"
            alone = plain.get((name, config))
            if alone is not None:
                text += f"; without the guard: {_plain_text(alone)}"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    if data.get("notes"):
        lines += ["", "## Notes on these runs", ""] + [f"- {note}" for note in data["notes"]]
    lines += ["", "## Details", ""]
    for name in names:
        for config in configs:
            for cell, how in ((cells.get((name, config)), "guarded"), (plain.get((name, config)), "without the guard")):
                if cell and cell["outcome"] != "ok":
                    lines.append(f"- `{name}` / {CONFIG_TITLES.get(config, config)}, {how}: {cell['outcome']}"
                                 f"{' (' + cell['verdict'] + ')' if cell.get('verdict') else ''}"
                                 f"{': ' + _escape(cell['detail']) if cell.get('detail') else ''}")
    return "\n".join(lines) + "\n"


def _cell_text(cell: dict) -> str:
    text = _SYMBOL[cell["outcome"]]
    if cell["outcome"] == "hang" and cell.get("detected_after_s") is not None:
        text += f" ({cell['verdict']}, {cell['detected_after_s']:.1f} s)"
    elif cell["outcome"] == "crash":
        text += f": {_short(cell['detail'])}"
    elif cell["outcome"] == "silent":
        text += f": {_escape(cell['detail'])}"
    return text


def _plain_text(cell: dict) -> str:
    if cell["outcome"] == "hang":
        return f"**hang** ({cell['wall_s']:.0f} s cap)"
    return _cell_text(cell)


def _short(detail: str) -> str:
    head = detail.split(":")[0] if detail else "error"
    return _escape(head)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


if __name__ == "__main__":
    raise SystemExit(main())
