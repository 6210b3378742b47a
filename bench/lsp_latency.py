"""Benchmark: ``accel-lint server`` latency from ``textDocument/didChange`` to the
``publishDiagnostics`` of that version, and its memory over a scripted hour of edits.

    python bench/lsp_latency.py [--edits 60] [--trainer-edits 20] [--hour-edits 3600]
                                [--corpus-root DIR] [--skip-hour]

* **small**: ``fixtures/lsp/train.py`` (100 lines), target median <= 50 ms;
* **trainer**: transformers 5.23.0's ``trainer.py`` (4,760 lines, the largest Accelerate file of
  the wheel corpus; unpacked with ``bench/lint_speed.py``'s ``corpus()`` into
  ``--corpus-root``, default ``~/.cache/accel-lint-ecosystem``), the workspace being the
  unpacked wheels, warm (after a few edits), target median <= 300 ms;
* **hour**: both files open, ``--hour-edits`` edits (one a second for an hour of typing, sent
  back to back), one in 60 to trainer.py; the server's RSS is sampled every 100 edits.

Each edit rewrites a statement that the bench inserted in a function in the middle of the file,
``edits = <number>`` (the code changes, the file stays valid Python and the content is new each
time, so nothing is served from a memo); the next edit is sent once the previous one's
diagnostics arrived. **trainer_finding** edits trainer.py the same way with a statement that
is a finding (a ``wait_for_everyone()`` under ``if self.accelerator.is_main_process``), so that
every lint also resolves the position of a diagnostic. The latency includes the
server's debounce. A client written with pygls runs the server as ``python -m accel_lint
server``. Writes bench/results/lsp_latency.json. Not a test.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SMALL = REPO / "fixtures" / "lsp" / "train.py"
TRAINER = "transformers/trainer.py"
TARGETS_MS = {"small": 50.0, "trainer": 300.0}
FINDING = "if self.accelerator.is_main_process and {n} >= 0: self.accelerator.wait_for_everyone()"


class Client(LanguageClient):
    """Records when each (uri, version) was published."""

    def __init__(self) -> None:
        super().__init__("lsp-latency", "1")
        self.arrived: dict[tuple[str, int | None], float] = {}
        self.waiters: dict[tuple[str, int | None], asyncio.Future] = {}
        self.internal: list[str] = []

        @self.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            key = (params.uri, params.version)
            self.arrived[key] = time.perf_counter()
            waiter = self.waiters.pop(key, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(len(params.diagnostics))

        @self.feature(types.WINDOW_LOG_MESSAGE)
        def logged(params: types.LogMessageParams) -> None:
            if params.type == types.MessageType.Error:
                self.internal.append(params.message)

        @self.feature(types.CLIENT_REGISTER_CAPABILITY)
        def register(params) -> None:
            return None

    def expect(self, uri: str, version: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.waiters[(uri, version)] = future
        return future


class Editor:
    """One open file and the edits typed into it: a statement inserted in the middle of the file
    (before the first simple statement of a function body at or after its middle line, with
    that statement's indentation), rewritten by every edit. ``template`` is the statement, with
    ``{n}`` for the edit's number."""

    def __init__(self, client: Client, path: Path, template: str = "edits = {n}") -> None:
        self.client, self.path, self.uri = client, path, path.as_uri()
        text = path.read_text(encoding="utf-8")
        self.lines = text.split("\n")
        self.version = 1
        self.template = template
        middle = len(self.lines) // 2
        anchor = min(
            (stmt for fn in ast.walk(ast.parse(text)) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for stmt in fn.body if isinstance(stmt, (ast.Assign, ast.Expr)) and stmt.lineno > middle),
            key=lambda stmt: stmt.lineno)
        self.line = anchor.lineno - 1
        self.indent = " " * anchor.col_offset
        self.lines.insert(self.line, self.indent + template.format(n=0))

    async def open(self) -> float:
        waiter = self.client.expect(self.uri, self.version)
        start = time.perf_counter()
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=self.uri, language_id="python", version=self.version, text="\n".join(self.lines))))
        await asyncio.wait_for(waiter, 600)
        return time.perf_counter() - start

    async def close(self) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            types.TextDocumentIdentifier(uri=self.uri)))
        self.version = 1

    async def edit(self, number: int) -> float:
        """Rewrite the inserted statement with ``number``; seconds until its diagnostics came
        (their count is left in ``self.diagnostics``)."""
        current = self.lines[self.line]
        new = self.indent + self.template.format(n=number)
        self.lines[self.line] = new
        self.version += 1
        waiter = self.client.expect(self.uri, self.version)
        start = time.perf_counter()
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=self.line, character=0),
                                  end=types.Position(line=self.line, character=len(current))),
                text=new)]))
        self.diagnostics = await asyncio.wait_for(waiter, 600)
        return time.perf_counter() - start


def engine_floor_ms(path: Path, runs: int) -> float:
    """Median of ``lint_source`` on the file in this process (new content each run): what one
    lint costs without the server, its debounce and the JSON over stdio."""
    from accel_lint.config import Config
    from accel_lint.engine import lint_source

    data = path.read_bytes()
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        lint_source(data + f"\n# floor {i}\n".encode(), str(path), Config(), want_fixes=True)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times[1:]) * 1000, 1)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def summary(seconds: list[float], target_ms: float | None = None) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    out = {"edits": len(ms), "median_ms": round(statistics.median(ms), 1),
           "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1), "min_ms": round(ms[0], 1), "max_ms": round(ms[-1], 1)}
    if target_ms is not None:
        out["target_median_ms"] = target_ms
        out["met"] = out["median_ms"] <= target_ms
    return out


async def start(root: Path) -> Client:
    client = Client()
    await client.start_io(sys.executable, "-m", "accel_lint", "server")
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="w")]))
    client.initialized(types.InitializedParams())
    return client


async def stop(client: Client) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


async def run(args) -> dict:
    sys.path.insert(0, str(HERE))
    from lint_speed import corpus

    src = corpus(Path(args.corpus_root).expanduser())
    trainer_path = src / TRAINER
    results: dict = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                                 "load_average_at_start": os.getloadavg()}}
    from accel_lint.lsp.server import DEBOUNCE_S

    results["debounce_ms"] = DEBOUNCE_S * 1000

    # small script, alone in its folder's workspace
    client = await start(SMALL.parent)
    small = Editor(client, SMALL)
    results["small_open_s"] = round(await small.open(), 3)
    for i in range(5):
        await small.edit(-1 - i)
    results["small"] = summary([await small.edit(i) for i in range(args.edits)], TARGETS_MS["small"])
    results["small"]["engine_alone_median_ms"] = engine_floor_ms(SMALL, 30)
    print("small script:", results["small"])
    await stop(client)

    # trainer.py, the workspace being the unpacked wheels
    client = await start(src)
    trainer = Editor(client, trainer_path)
    results["trainer_open_s"] = round(await trainer.open(), 3)  # cold: its imported modules are linted too
    for i in range(3):
        await trainer.edit(-1 - i)
    results["trainer"] = summary([await trainer.edit(i) for i in range(args.trainer_edits)], TARGETS_MS["trainer"])
    results["trainer"]["lines"] = len(trainer.lines)
    results["trainer"]["engine_alone_median_ms"] = engine_floor_ms(trainer_path, 5)
    print("trainer.py:", results["trainer"])
    await trainer.close()

    finding = Editor(client, trainer_path, FINDING)
    await finding.open()
    for i in range(3):
        await finding.edit(-1 - i)
    results["trainer_finding"] = summary([await finding.edit(i) for i in range(args.trainer_edits)],
                                         TARGETS_MS["trainer"])
    results["trainer_finding"]["diagnostics"] = finding.diagnostics
    print("trainer.py with a finding:", results["trainer_finding"])
    await finding.close()
    trainer = Editor(client, trainer_path)
    await trainer.open()

    if not args.skip_hour:
        small = Editor(client, SMALL)  # both open in one server
        await small.open()
        pid = client._server.pid
        samples = [(0, round(rss_mb(pid), 1))]
        began = time.perf_counter()
        latencies = []
        for n in range(1, args.hour_edits + 1):
            editor = trainer if n % 60 == 0 else small
            latencies.append(await editor.edit(10_000 + n))
            if n % 100 == 0:
                samples.append((n, round(rss_mb(pid), 1)))
        tail = [mb for n, mb in samples if n >= args.hour_edits // 2]
        results["hour"] = {
            "edits": args.hour_edits, "trainer_edits": args.hour_edits // 60, "wall_s": round(time.perf_counter() - began, 1),
            "rss_mb": samples, "rss_first_100_mb": samples[1][1] if len(samples) > 1 else None,
            "rss_last_mb": samples[-1][1], "rss_second_half_range_mb": [min(tail), max(tail)],
            "latency": summary(latencies),
        }
        print("hour of edits:", {k: v for k, v in results["hour"].items() if k != "rss_mb"})
    results["internal_errors"] = client.internal
    await stop(client)
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=60)
    parser.add_argument("--trainer-edits", type=int, default=20)
    parser.add_argument("--hour-edits", type=int, default=3600)
    parser.add_argument("--skip-hour", action="store_true")
    parser.add_argument("--corpus-root", default="~/.cache/accel-lint-ecosystem")
    parser.add_argument("--json", default=str(HERE / "results" / "lsp_latency.json"))
    args = parser.parse_args()
    results = asyncio.run(run(args))
    results["command"] = "python bench/lsp_latency.py " + " ".join(sys.argv[1:])
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
