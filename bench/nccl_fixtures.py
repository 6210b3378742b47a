"""Benchmark (needs 2 GPUs): every runtime fixture under ``python -m runtime_checks``, once on
gloo (CPU ranks: CUDA hidden) and once on NCCL (one rank per GPU), on the same machine.

    python bench/nccl_fixtures.py --backend gloo    # any machine: CPU ranks
    python bench/nccl_fixtures.py --backend nccl    # 2 GPUs: one rank per GPU
    python bench/nccl_fixtures.py --compare         # the table: same verdict on both?

For each fixture: the verdict (kind, exit code), each rank's op and line, and the time to
diagnosis (the report's delay between the first rank reaching the bug and the verdict, and the
launcher's wall time). The NCCL row must name the same kind, op, rank and line as the gloo row.
Writes bench/results/runtime_fixtures_<backend>.json, and with --compare
bench/results/nccl_fixtures.json. Not a test: CI has no GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "runtime"
TIMEOUTS = {"hang.py": 5.0}  # --timeout for fixtures whose verdict is a hang


def run(script: Path, backend: str) -> dict:
    env = dict(os.environ)
    if backend == "gloo":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the launcher then sets ACCELERATE_USE_CPU=1: gloo ranks
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [sys.executable, "-m", "runtime_checks", "--nproc", "2", "--report", report]
        if script.name in TIMEOUTS:
            cmd += ["--timeout", str(TIMEOUTS[script.name])]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd + [str(script)], capture_output=True, text=True, timeout=240, env=env,
                                  cwd=HERE.parent)
            code, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, stderr = "timeout", (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        wall = time.perf_counter() - start
        data = json.load(open(report)) if os.path.exists(report) else {}
    finding = (data.get("findings") or [None])[0]
    rows = []
    for row in (finding or {}).get("rows", []):
        site = row.get("site") or {}
        rows.append({"rank": row["rank"], "state": row.get("state"), "op": row.get("op"),
                     "line": site.get("line"), "on_device": row.get("on_device")})
    return {"exit": code, "kind": finding["kind"] if finding else "ok", "culprit": (finding or {}).get("culprit"),
            "rows": rows, "detected_after_s": (finding or {}).get("detected_after"), "wall_s": round(wall, 2),
            "title": (finding or {}).get("title"), "stderr_tail": stderr[-600:] if code not in (0, 10, 11, 12, 13, 14, 15, 16) else ""}


def same(a: dict, b: dict) -> bool:
    key = lambda r: [(x["rank"], x["op"], x["line"]) for x in r["rows"]]  # noqa: E731
    return a["kind"] == b["kind"] and a["exit"] == b["exit"] and key(a) == key(b)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["gloo", "nccl"])
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    if args.compare:
        gloo = json.loads((results_dir / "runtime_fixtures_gloo.json").read_text())
        nccl = json.loads((results_dir / "runtime_fixtures_nccl.json").read_text())
        table = {}
        for name in sorted(gloo["results"]):
            a, b = gloo["results"][name], nccl["results"].get(name)
            table[name] = {"gloo": a["kind"], "nccl": b["kind"] if b else None, "same": bool(b) and same(a, b),
                           "nccl_detected_after_s": b["detected_after_s"] if b else None,
                           "nccl_wall_s": b["wall_s"] if b else None, "gloo_wall_s": a["wall_s"]}
            print(f"{name:<22} gloo {a['kind']:<15} nccl {table[name]['nccl']!s:<15} same={table[name]['same']}")
        (results_dir / "nccl_fixtures.json").write_text(json.dumps(
            {"gloo_machine": gloo["machine"], "nccl_machine": nccl["machine"], "table": table}, indent=2) + "\n")
        return
    import torch

    results = {}
    for script in sorted(FIXTURES.glob("*.py")):
        if args.backend == "gloo" and "GPU ONLY" in script.read_text()[:200]:
            continue  # Accelerate's FSDP plugin and DeepSpeed need GPUs: no gloo row to compare with
        if script.name.startswith("multinode_"):
            continue  # 2 nodes x 2 ranks, in network namespaces: tests/test_multinode.py runs them
        r = run(script, args.backend)
        results[script.name] = r
        after = r["detected_after_s"]
        print(f"{script.name:<22} {args.backend} {r['kind']:<15} exit {r['exit']!s:<4} rows "
              f"{[(x['rank'], x['op'], x['line']) for x in r['rows']]} detected after "
              f"{after if after is None else round(after, 3)} s, wall {r['wall_s']} s", flush=True)
    machine = {"gpu": torch.cuda.get_device_name() if args.backend == "nccl" else None,
               "gpus": torch.cuda.device_count() if args.backend == "nccl" else 0,
               "cores": os.cpu_count(), "torch": torch.__version__}
    (results_dir / f"runtime_fixtures_{args.backend}.json").write_text(
        json.dumps({"machine": machine, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
