"""Benchmark (needs 2 GPUs): the NCCL flight recorder in the guard's report, on real NCCL ranks.

    python bench/nccl_flight_recorder.py --label h100x2     # 2 GPUs, one NCCL rank each
    python bench/nccl_flight_recorder.py --label cpu --cpu  # smoke test of this script: gloo ranks
                                                            # with RUNTIME_CHECKS_FLIGHT_RECORDER=1

Needs torch and this repository (and accelerate, which the fixtures use); no network. Runs, on 2 ranks:

* ``hang``: fixtures/runtime/hang.py under ``python -m runtime_checks --timeout 5`` (rank 1 sleeps,
  rank 0 waits in the second barrier);
* ``divergence``: fixtures/runtime/divergence.py under ``python -m runtime_checks`` (rank 0 makes
  an extra barrier, rank 1 goes on to gather);
* ``hang_inrank``: hang.py under ``torchrun -m runtime_checks.rank`` (the watcher is a process of
  its own), ``RUNTIME_CHECKS_TIMEOUT=5``;
* ``hang_buffer_off``: hang.py with the user's ``TORCH_NCCL_TRACE_BUFFER_SIZE=0``, which the guard
  must leave alone (the dumps then hold no entries).

For each: the guard's output, report, timeline, the raw dumps (``report.flight_recorder/``), and
what torch's analyzer prints on them (the command the report prints, run as
``python -m torch.distributed.flight_recorder.fr_trace`` and, if on PATH, as ``torchfrtrace``),
under bench/results/flight_recorder_<label>/<case>/; the checks and the machine in
bench/results/flight_recorder_<label>/summary.json. Not a test: CI has no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIXTURES = REPO / "fixtures" / "runtime"
CAP_S = 240.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases() -> dict[str, dict]:
    guard = [sys.executable, "-m", "runtime_checks", "--nproc", "2"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                "-m", "runtime_checks.rank"]
    return {
        "hang": {"cmd": guard + ["--timeout", "5", "--report", "{report}", str(FIXTURES / "hang.py")],
                 "env": {}, "kind": "hang"},
        "divergence": {"cmd": guard + ["--report", "{report}", str(FIXTURES / "divergence.py")],
                       "env": {}, "kind": "divergence"},
        "hang_inrank": {"cmd": torchrun + [str(FIXTURES / "hang.py")],
                        "env": {"RUNTIME_CHECKS_TIMEOUT": "5", "RUNTIME_CHECKS_REPORT": "{report}",
                                "RUNTIME_CHECKS_PORT": "{port}"}, "kind": "hang"},
        "hang_buffer_off": {"cmd": guard + ["--timeout", "5", "--report", "{report}", str(FIXTURES / "hang.py")],
                            "env": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, "kind": "hang", "buffer_off": True},
    }


def run(cmd: list[str], env: dict, cwd: Path, cap: float = CAP_S) -> tuple[object, str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=cap)
        code: object = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # our own process group only
        out, _ = proc.communicate()
        code = "timeout"
    return code, out.decode(errors="replace"), round(time.perf_counter() - start, 2)


def analyze(section: dict | None, case_dir: Path, env: dict) -> dict:
    """Run the command the report prints (torch's analyzer) on the saved dumps."""
    if not section or not section.get("command"):
        return {"ran": False}
    args = shlex.split(section["command"])[1:]
    results = {"ran": True, "command": section["command"]}
    code, out, wall = run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", *args], env, case_dir,
                          cap=120)
    (case_dir / "fr_trace.txt").write_text(out)
    results.update(exit=code, wall_s=wall, missing_ranks_line=next(
        (line for line in out.splitlines() if "missing ranks" in line), None),
        first_lines=out.splitlines()[:12])
    script = shutil.which("torchfrtrace")
    if script:
        code, out, _ = run([script, *args], env, case_dir, cap=120)
        (case_dir / "torchfrtrace.txt").write_text(out)
        results["torchfrtrace_exit"] = code
    return results


def checks(name: str, spec: dict, code: object, report: dict, section: dict | None, cpu: bool) -> dict:
    finding = (report.get("findings") or [None])[0] or {}
    rows = {r["rank"]: r for r in (section or {}).get("ranks", [])}
    out = {"verdict": finding.get("kind") == spec["kind"], "section": section is not None,
           "every_rank_has_a_row": sorted(rows) == [0, 1]}
    files = sorted(os.listdir(section["dir"])) if section and section.get("dir") else []
    if spec.get("buffer_off"):
        out["user_setting_kept_no_entries"] = bool(rows) and all("no entries" in (r.get("error") or "")
                                                               for r in rows.values())
        return out
    out["dumps_saved"] = files == ["nccl_trace_rank_0", "nccl_trace_rank_1"] if name != "divergence" else bool(files)
    if name.startswith("hang"):
        last0, last1 = (rows.get(0) or {}).get("last") or {}, (rows.get(1) or {}).get("last") or {}
        out["rank0_waits_in_a_later_collective"] = (last0.get("collective_seq_id") or 0) > (
            last1.get("collective_seq_id") or 0)
        if not cpu:  # gloo's recorder never leaves "scheduled"
            out["rank0_not_completed"] = last0.get("state") in ("scheduled", "started")
            out["rank1_completed"] = last1.get("state") == "completed"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True, help="names the results folder, e.g. h100x2")
    parser.add_argument("--cpu", action="store_true", help="gloo ranks (CUDA hidden), recorder forced on")
    parser.add_argument("--cases", nargs="*", default=None, help="a subset of: " + " ".join(cases()))
    args = parser.parse_args()
    import torch

    if not args.cpu and torch.cuda.device_count() < 2:
        raise SystemExit("needs 2 GPUs (or --cpu for a smoke test of this script)")
    out_dir = HERE / "results" / f"flight_recorder_{args.label}"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNTIME_CHECKS_", "TORCH_FR_"))
                and k not in ("TORCH_NCCL_TRACE_BUFFER_SIZE",)}
    base_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base_env.get("PYTHONPATH", "")) if p)
    if args.cpu:
        base_env.update(CUDA_VISIBLE_DEVICES="", RUNTIME_CHECKS_FLIGHT_RECORDER="1", ACCELERATE_USE_CPU="1")
    results = {}
    for name, spec in cases().items():
        if args.cases and name not in args.cases:
            continue
        case_dir = out_dir / name
        case_dir.mkdir()
        report_path = case_dir / "report.json"
        port = str(free_port())
        fill = {"report": str(report_path), "port": port}
        cmd = [part.format(**fill) for part in spec["cmd"]]
        env = {**base_env, **{k: v.format(**fill) for k, v in spec["env"].items()}}
        code, output, wall = run(cmd, env, REPO)
        (case_dir / "output.txt").write_text(output)
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        finding = (report.get("findings") or [None])[0] or {}
        section = (finding.get("extra") or {}).get("flight_recorder")
        analysis = analyze(section, case_dir, base_env)
        results[name] = {"command": cmd, "env": spec["env"], "exit": code, "wall_s": wall, "kind": finding.get("kind"),
                         "detected_after_s": finding.get("detected_after"),
                         "flight_recorder_groups": (section or {}).get("groups"),
                         "flight_recorder_errors": {r["rank"]: r["error"] for r in (section or {}).get("ranks", [])
                                                    if r.get("error")},
                         "report_section": [line for line in output.splitlines()
                                            if "NCCL" in line or line.startswith("    rank")],
                         "analyzer": analysis, "checks": checks(name, spec, code, report, section, args.cpu)}
        r = results[name]
        print(f"{name:<16} exit {code!s:<4} {r['kind']!s:<11} wall {wall:>6.1f} s  checks "
              f"{'ALL OK' if all(r['checks'].values()) else r['checks']}", flush=True)
        for line in r["report_section"]:
            print(f"    {line}")
        if analysis.get("ran"):
            print(f"    analyzer exit {analysis.get('exit')}: {analysis.get('missing_ranks_line')}")
    machine = {"torch": torch.__version__, "cuda": torch.version.cuda,
               "gpu": None if args.cpu else torch.cuda.get_device_name(0),
               "gpus": 0 if args.cpu else torch.cuda.device_count(), "cores": os.cpu_count()}
    try:
        machine["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if not args.cpu else None
    except Exception:
        machine["nccl"] = None
    try:
        import accelerate

        machine["accelerate"] = accelerate.__version__
    except ImportError:
        machine["accelerate"] = None
    (out_dir / "summary.json").write_text(json.dumps({"machine": machine, "cpu_smoke_test": args.cpu,
                                                      "results": results}, indent=2, default=str) + "\n")
    print(f"results: {out_dir}")


if __name__ == "__main__":
    main()
