"""NCCL flight recorder in the report, without a GPU: torch-shaped synthetic dumps (the pickled
dict of ``torch._C._distributed_c10d._dump_nccl_trace()``) parsed, grouped and rendered; the
folder layout read by torch's own analyzer; the settings the launcher passes on; and, on real gloo
ranks, the dump taken by each rank's watchdog thread while its main thread waits in a barrier."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import time

import pytest

from conftest import REPO
from runtime_checks import flight_recorder as fr
from runtime_checks import protocol as P
from runtime_checks.report import Finding, render_text, to_json
from runtime_checks.watch import RankState, Watcher

HANG = REPO / "fixtures" / "runtime" / "hang.py"


def entry(record_id, seq, name="nccl:all_reduce_barrier", state="completed", pg=("0", "default_pg"), **extra):
    """One entry as torch 2.11-2.13 writes it (FlightRecorderDetail.hpp, getCollectiveTrace)."""
    done = state == "completed"
    return {"frames": [{"name": "<module>", "filename": str(HANG), "line": 10},
                       {"name": "barrier", "filename": "torch/distributed/distributed_c10d.py", "line": 4800}],
            "record_id": record_id, "pg_id": 0, "process_group": pg, "thread_name": "pt_main_thread",
            "thread_id": "140000000000000", "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": name, "time_created_ns": 1_700_000_000_000_000_000 + record_id,
            "input_sizes": [[1]], "input_dtypes": ["Float"], "output_sizes": [[1]], "output_dtypes": ["Float"],
            "state": state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": 1_700_000_000_100_000_000 if done else None, "retired": done,
            "timeout_ms": 600000, "is_p2p": False, **extra}


def nccl_dump(entries, world=2, completed=None):
    """The whole pickled dict of one rank (version, pg_config, pg_status, entries)."""
    last = max((e["collective_seq_id"] for e in entries), default=-1)
    return {"version": "2.10", "comm_lib_version": "2.27.5",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
            "pg_status": {"0": {"last_enqueued_collective": last, "last_started_collective": -1,
                                "last_completed_collective": last if completed is None else completed}},
            "entries": entries}


def raw(dump):
    return pickle.dumps(dump, protocol=2)  # what torch's pickler writes: plain dicts, lists, tuples


def hang_dumps(world=2, culprit=1):
    """Every rank completed barrier seq 1; all but the culprit enqueued barrier seq 2 and wait in it."""
    dumps = {}
    for rank in range(world):
        entries = [entry(0, 1)]
        if rank != culprit:
            entries.append(entry(1, 2, state="scheduled"))
        dumps[rank] = raw(nccl_dump(entries, world, completed=1))
    return dumps


class FakeStore:
    """set/check/get like a TCPStore; the ranks' answers appear once the request is set."""

    def __init__(self, answers):
        self.data, self.answers = {}, answers

    def set(self, key, value):
        self.data[key] = value
        if key == P.FR_REQUEST:
            for rank, answer in self.answers.items():
                self.data[P.FR_KEY.format(rank=rank)] = answer

    def check(self, keys):
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]


def hang_watcher(answers, world=2, culprit=1, flags=None):
    watcher = Watcher(FakeStore(answers), world_size=world, timeout=None)
    now = time.time()
    for rank in range(world):
        r = watcher.ranks[rank] = RankState(rank, pid=1000 + rank, host="node0")
        r.stack = {"stack": [], "site": None, "flight_recorder": True if flags is None else flags.get(rank, True)}
        if rank != culprit:
            record = {"seq": 1, "op": "accelerator.wait_for_everyone", "op_kind": "BARRIER",
                      "site": {"file": str(HANG), "line": 10}, "args": [], "entered": now, "on_device": False}
            r.collectives[1] = r.in_flight[1] = record
    watcher.finding = Finding(kind="hang", title="collective #1 has not completed", seq=1,
                              rows=[watcher._row(r, 1) for r in watcher.ranks.values()], culprit=culprit,
                              why="...", hint="...")
    return watcher


def text_of(finding, report="r.json"):
    buffer = io.StringIO()
    render_text(finding, report, stream=buffer)
    return buffer.getvalue().splitlines()


# -- parsing ---------------------------------------------------------------------------------------------
def test_a_rank_row_is_its_last_collective_with_nccl_sequence_number_and_state():
    row = fr.summarize(fr.load(hang_dumps()[0]))
    assert row["error"] is None and row["entries"] == 2 and row["version"] == "2.10"
    last = row["last"]
    assert (last["profiling_name"], last["collective_seq_id"], last["state"], last["record_id"]) == (
        "nccl:all_reduce_barrier", 2, "scheduled", 1)
    assert last["process_group"] == ["0", "default_pg"] and "frames" not in last  # the frames stay in the raw dump
    assert row["oldest_incomplete"]["collective_seq_id"] == 2
    assert row["pg_status"]["0"]["last_completed_collective"] == 1
    assert fr.state_of(row) == "nccl:all_reduce_barrier seq 2 scheduled (completed up to seq 1)"
    done = fr.summarize(fr.load(hang_dumps()[1]))
    assert fr.state_of(done) == "nccl:all_reduce_barrier seq 1 completed" and done["oldest_incomplete"] is None


def test_p2p_entries_show_their_p2p_sequence_number():
    send = entry(3, 0, name="nccl:send 0->1", state="started", is_p2p=True, p2p_seq_id=4)
    row = fr.summarize(fr.load(raw(nccl_dump([send]))))
    assert fr.state_of(row) == "nccl:send 0->1 p2p seq 4 started"


@pytest.mark.parametrize("answer, error", [
    (b"\x80\x02garbage", "unreadable dump"),
    (b'{"error": "RuntimeError: no NCCL"}', "RuntimeError: no NCCL"),
    (b"{not json", "unreadable answer"),
    (pickle.dumps([1, 2], protocol=2), "not a dict"),
    (pickle.dumps({"entries": [], "when": __import__("datetime").date(2026, 1, 1)}, protocol=2), "unreadable dump"),
    (raw(nccl_dump([])), "no entries"),
    (raw({"entries": "not a list"}), "no entries"),
])
def test_bad_or_empty_answers_are_a_row_with_an_error_never_an_exception(answer, error):
    row = fr.summarize(fr.load(answer))
    assert error in row["error"]
    empty = error == "no entries"
    assert fr.state_of(row).startswith("no entries (the flight recorder is off" if empty else "no dump: ")


def test_a_user_who_turned_the_recorder_off_gets_empty_dumps_and_no_analyzer_command(tmp_path):
    empty = raw(nccl_dump([]))
    watcher = hang_watcher({0: empty, 1: empty})
    watcher.collect_flight_recorder(str(tmp_path / "r.json"))
    section = watcher.finding.extra["flight_recorder"]
    assert section["command"] is None and len(os.listdir(section["dir"])) == 2
    assert [g["ranks"] for g in section["groups"]] == [[0, 1]]
    assert "TORCH_FR_BUFFER_SIZE/TORCH_NCCL_TRACE_BUFFER_SIZE = 0?" in section["groups"][0]["text"]


def test_missing_keys_are_unknown():
    row = fr.summarize(fr.load(raw({"entries": [{"record_id": 7}, "not an entry"]})))
    assert row["error"] is None and row["entries"] == 1 and row["version"] is None and row["pg_status"] is None
    assert fr.state_of(row) == "? seq ? ?"
    assert row["oldest_incomplete"] is None  # no state: not known to be incomplete


# -- the section: text (grouped), JSON (every rank), HTML ---------------------------------------------------------
def test_section_saves_the_dumps_where_torchfrtrace_reads_them_and_groups_the_ranks(tmp_path):
    report = str(tmp_path / "report.json")
    os.makedirs(fr.dump_dir(report))
    stale = os.path.join(fr.dump_dir(report), "nccl_trace_rank_7")  # an earlier run's dump: not this run's
    open(stale, "wb").write(b"old")
    watcher = hang_watcher(hang_dumps())
    watcher.collect_flight_recorder(report)
    section = watcher.finding.extra["flight_recorder"]
    folder = str(tmp_path / "report.flight_recorder")
    assert section["dir"] == folder and section["prefix"] == "nccl_trace_rank_"
    assert sorted(os.listdir(folder)) == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    assert open(os.path.join(folder, "nccl_trace_rank_0"), "rb").read() == hang_dumps()[0]  # unmodified
    assert section["command"] == f"torchfrtrace {folder} --prefix nccl_trace_rank_"
    assert [(r["rank"], r["last"]["collective_seq_id"], r["last"]["state"]) for r in section["ranks"]] == [
        (0, 2, "scheduled"), (1, 1, "completed")]
    assert [(g["ranks"], g["role"], g["seq"], g["state"]) for g in section["groups"]] == [
        ([1], "culprit", 1, "completed"), ([0], None, 2, "scheduled")]
    lines = text_of(watcher.finding)
    start = lines.index("  NCCL flight recorder, each rank's last collective (NCCL's sequence number, state):")
    assert lines[start + 1:start + 4] == [
        "    rank 1  nccl:all_reduce_barrier seq 1 completed",
        "    rank 0  nccl:all_reduce_barrier seq 2 scheduled (completed up to seq 1)",
        f"  NCCL dumps: torchfrtrace {folder} --prefix nccl_trace_rank_"]
    data = to_json(watcher.finding)["findings"][0]["extra"]["flight_recorder"]
    assert json.loads(json.dumps(data)) == data and len(data["ranks"]) == 2


def test_torchs_analyzer_reads_the_saved_folder_and_finds_the_missing_rank(tmp_path):
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    report = str(tmp_path / "report.json")
    watcher = hang_watcher(hang_dumps(world=4, culprit=3), world=4, culprit=3)
    watcher.collect_flight_recorder(report)
    section = watcher.finding.extra["flight_recorder"]
    # the command the report prints, as a module (the torchfrtrace script may not be on PATH)
    args = section["command"].split()[1:]
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", *args],
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Not all ranks joining collective" in out and "missing ranks: {3}" in out
    assert "collective: nccl:all_reduce_barrier" in out and "collective state: scheduled" in out


def test_the_text_stays_short_at_scale_and_the_json_keeps_every_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(fr, "WAIT_S", 0.2)
    world, answers = 64, {}
    for rank in range(world):  # 7 states: rank r % 7 enqueued barrier seq 1..7
        seq = 1 + rank % 7
        entries = [entry(i, i + 1) for i in range(seq - 1)] + [entry(seq - 1, seq, state="scheduled")]
        answers[rank] = raw(nccl_dump(entries, world, completed=seq - 1))
    del answers[5]  # asked and silent
    watcher = hang_watcher(answers, world=world, culprit=None, flags={63: False})
    watcher.ranks[62].stack = None  # its Python threads never answered the stack request: not asked
    watcher.collect_flight_recorder(str(tmp_path / "r.json"))
    section = watcher.finding.extra["flight_recorder"]
    assert len(section["ranks"]) == 64 and len(os.listdir(tmp_path / "r.flight_recorder")) == 61
    errors = {r["rank"]: r["error"] for r in section["ranks"] if r["error"]}
    assert errors[5] == "no answer within 0.2 s"
    assert errors[62].startswith("its Python threads did not answer")
    assert errors[63] == "no NCCL process group on this rank"
    assert section["command"].endswith(" --allow-incomplete-ranks")
    lines = [line for line in text_of(watcher.finding) if line.startswith("    ")]
    assert len(lines) == 5 and lines[-1].endswith("other states: see the report's \"flight_recorder\"")


def test_html_view_shows_the_groups_and_the_command(tmp_path):
    from runtime_checks.view import _page

    watcher = hang_watcher(hang_dumps())
    watcher.collect_flight_recorder(str(tmp_path / "r.json"))
    page = _page(to_json(watcher.finding)["findings"][0], 1, 2, 2, "<svg/>")
    assert "NCCL flight recorder" in page and "nccl:all_reduce_barrier seq 2 scheduled" in page
    assert "torchfrtrace" in page


# -- nothing changes under gloo -------------------------------------------------------------------------------
def test_no_rank_with_an_nccl_recorder_means_no_request_no_section_no_folder(tmp_path):
    store = FakeStore(hang_dumps())
    watcher = hang_watcher({}, flags={0: False, 1: False})
    watcher.store = store
    before = text_of(watcher.finding)
    watcher.collect_flight_recorder(str(tmp_path / "r.json"))
    assert "flight_recorder" not in watcher.finding.extra and P.FR_REQUEST not in store.data
    assert os.listdir(tmp_path) == [] and text_of(watcher.finding) == before


def test_a_verdict_with_no_rank_left_in_a_collective_asks_nothing(tmp_path):
    watcher = hang_watcher(hang_dumps())
    for r in watcher.ranks.values():
        r.in_flight.clear()
    watcher.collect_flight_recorder(str(tmp_path / "r.json"))
    assert "flight_recorder" not in watcher.finding.extra and P.FR_REQUEST not in watcher.store.data


def test_a_rank_without_a_process_group_cannot_dump(monkeypatch):
    monkeypatch.delenv(fr.ENV_MODE, raising=False)
    assert fr.can_dump() is False  # the test process has no process group
    monkeypatch.setenv(fr.ENV_MODE, "1")
    assert fr.can_dump() is False


# -- settings ----------------------------------------------------------------------------------------------
@pytest.fixture
def clean_env(monkeypatch):
    for name in (*fr.BUFFER_ENV, fr.ENV_MODE):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_gpu_ranks_get_the_recorder_unless_the_user_chose(clean_env):
    environ = {}
    fr.prepare_environment(environ, cuda=True)
    assert environ == {fr.buffer_variable(): "2000"}
    for user in ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, {"TORCH_FR_BUFFER_SIZE": "64"},
                 {"TORCH_NCCL_TRACE_BUFFER_SIZE": "100", "TORCH_FR_BUFFER_SIZE": "0"}):
        environ = dict(user)
        fr.prepare_environment(environ, cuda=True)
        assert environ == user
    clean_env.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")  # set in the process the ranks inherit (a notebook's)
    environ = {}
    fr.prepare_environment(environ, cuda=True)
    assert environ == {}


def test_cpu_ranks_and_the_off_switch_change_nothing(clean_env):
    environ = {}
    fr.prepare_environment(environ, cuda=False)
    assert environ == {}
    environ = {fr.ENV_MODE: "0"}
    fr.prepare_environment(environ, cuda=True)
    assert environ == {fr.ENV_MODE: "0"}
    environ = {fr.ENV_MODE: "1"}  # any backend: gloo ranks record too
    fr.prepare_environment(environ, cuda=False)
    assert environ[fr.buffer_variable()] == "2000"


def test_the_launcher_turns_the_recorder_on_for_gpu_ranks_only(clean_env):
    from runtime_checks.launch import prepare_environment

    on_gpu, on_cpu = {}, {}
    prepare_environment(on_gpu, cuda=True)
    prepare_environment(on_cpu, cuda=False)
    assert on_gpu[fr.buffer_variable()] == "2000" and "ACCELERATE_USE_CPU" not in on_gpu
    assert not any(k.startswith(("TORCH_NCCL", "TORCH_FR", "NCCL")) for k in on_cpu)


@pytest.mark.parametrize("version, name", [("2.7.1+cu126", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
                                           ("2.8.0", "TORCH_FR_BUFFER_SIZE"),
                                           ("2.11.0+cu130", "TORCH_FR_BUFFER_SIZE"),
                                           ("2.13.0.dev20260101+cpu", "TORCH_FR_BUFFER_SIZE")])
def test_the_buffer_variable_is_the_name_this_torch_reads_first(version, name):
    assert fr.buffer_variable(version) == name


# -- on real ranks (gloo keeps a flight recorder too) --------------------------------------------------------
def test_each_ranks_watchdog_thread_dumps_while_its_main_thread_waits(distributed_run, tmp_path):
    """Under gloo only on request (RUNTIME_CHECKS_FLIGHT_RECORDER=1): the same path as NCCL's."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch._C._distributed_c10d, "_dump_fr_trace"):
        pytest.skip("this torch keeps no flight recorder for gloo")
    script = tmp_path / "stuck_in_barrier.py"  # hang.py, under a name the signal tests do not sweep
    script.write_text(HANG.read_text())
    result = distributed_run(script, timeout=2, env={fr.ENV_MODE: "1"})
    assert (result.exit_code, result.kind) == (12, "hang")
    section = result.finding["extra"]["flight_recorder"]
    rows = {r["rank"]: r for r in section["ranks"]}
    assert rows[0]["last"]["profiling_name"] == "gloo:barrier" and rows[0]["last"]["collective_seq_id"] == 2
    assert rows[1]["last"]["collective_seq_id"] == 1  # rank 1 sleeps after the first barrier
    assert sorted(os.listdir(section["dir"])) == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    assert "NCCL dumps: torchfrtrace " in result.stderr
    assert "Environment variable TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated" not in result.stderr
    assert result.leftover_pids == []


def test_the_section_comes_below_the_verdict_and_the_report_is_written_again(tmp_path, capsys):
    from runtime_checks.report import write_json

    report = str(tmp_path / "r.json")
    watcher = hang_watcher(hang_dumps())
    trace = write_json(watcher.finding, report, None, "r.trace.json")  # the verdict's report, as written first
    fr.add_to_report(watcher, report, trace)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "[runtime_checks] NCCL flight recorder, each rank's last collective (NCCL's sequence number, state):"
    assert err[1:3] == ["    rank 1  nccl:all_reduce_barrier seq 1 completed",
                        "    rank 0  nccl:all_reduce_barrier seq 2 scheduled (completed up to seq 1)"]
    data = json.loads(open(report).read())
    assert data["trace"] == "r.trace.json" and len(data["findings"][0]["extra"]["flight_recorder"]["ranks"]) == 2
