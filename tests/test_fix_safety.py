"""Fixes that move statements across a rank guard keep the program's meaning on every rank:
the def-use slice comes along when it may, the fix is refused with a reason when it may not,
and every round is linted again before it is kept."""

from __future__ import annotations

import textwrap

import pytest

from accel_lint.config import Config
from accel_lint.fixes import fix_source

HEAD = """\
import os
import shutil

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification


def train(args, dataset):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    model = AutoModelForSequenceClassification.from_pretrained(args.model_name_or_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    loader = DataLoader(dataset, batch_size=args.per_device_train_batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    global_step = 0
    for batch in loader:
        global_step += 1
"""


def fix(body: str, unsafe: bool = True):
    source = HEAD + textwrap.indent(textwrap.dedent(body), " " * 8)
    outcome = fix_source(source.encode(), "train.py", Config(), unsafe)
    return source, outcome


def notices(outcome) -> str:
    return "\n".join(n.message for n in outcome.notices)


def test_checkpoint_rotation_brings_the_path_along_and_keeps_the_rotation_guarded():
    source, outcome = fix("""\
        if accelerator.is_main_process:
            if args.checkpoints_total_limit is not None:
                checkpoints = sorted(os.listdir(args.output_dir))
                for old in checkpoints[: -args.checkpoints_total_limit]:
                    shutil.rmtree(os.path.join(args.output_dir, old))
            save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")
            accelerator.save_state(save_path)
            print(f"Saved state to {save_path}")
    """)
    assert [d.code for d, _ in outcome.applied] == ["AL302"], notices(outcome)
    fixed = outcome.fixed[len(HEAD):]
    assert fixed == textwrap.indent(textwrap.dedent("""\
        if accelerator.is_main_process:
            if args.checkpoints_total_limit is not None:
                checkpoints = sorted(os.listdir(args.output_dir))
                for old in checkpoints[: -args.checkpoints_total_limit]:
                    shutil.rmtree(os.path.join(args.output_dir, old))
        accelerator.wait_for_everyone()
        save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")
        accelerator.save_state(save_path)
        if accelerator.is_main_process:
            print(f"Saved state to {save_path}")
    """), " " * 8)
    assert not [d for d in outcome.remaining.diagnostics if d.code == "AL302"]


def test_a_path_a_guarded_statement_reads_goes_ahead_of_the_guard():
    _, outcome = fix("""\
        if accelerator.is_main_process:
            save_path = os.path.join(args.output_dir, "last")
            os.makedirs(save_path, exist_ok=True)
            accelerator.save_state(save_path)
    """)
    fixed = outcome.fixed[len(HEAD):]
    assert fixed == textwrap.indent(textwrap.dedent("""\
        save_path = os.path.join(args.output_dir, "last")
        if accelerator.is_main_process:
            os.makedirs(save_path, exist_ok=True)
        accelerator.wait_for_everyone()
        accelerator.save_state(save_path)
    """), " " * 8)


def test_a_path_from_a_helper_call_is_refused_with_the_reason():
    source, outcome = fix("""\
        if accelerator.is_main_process:
            save_path = make_checkpoint_dir(args.output_dir, global_step)
            accelerator.save_state(save_path)
    """)
    assert outcome.fixed == source
    assert "not fixed" in notices(outcome) and "`make_checkpoint_dir`" in notices(outcome)
    assert "by hand" in notices(outcome)


def test_a_rank_dependent_path_is_refused():
    source, outcome = fix("""\
        if accelerator.is_main_process:
            save_path = os.path.join(args.output_dir, f"rank{accelerator.process_index}")
            accelerator.save_state(save_path)
    """)
    assert outcome.fixed == source
    assert "differs between ranks" in notices(outcome)


def test_a_name_other_ranks_also_set_is_not_rebound_for_them():
    source, outcome = fix("""\
        save_path = args.output_dir
        if accelerator.is_main_process:
            save_path = os.path.join(save_path, "main")
            accelerator.save_state(save_path)
    """)
    assert outcome.fixed == source
    assert "rebinds `save_path`" in notices(outcome)


def test_a_name_bound_under_an_earlier_guard_is_caught_by_linting_the_result():
    source, outcome = fix("""\
        if accelerator.is_main_process:
            path = os.path.join(args.output_dir, "x")
        if global_step % 100 == 0:
            if accelerator.is_main_process:
                accelerator.save_state(path)
    """)
    assert outcome.fixed == source
    assert "leave `path` unbound" in notices(outcome)


def test_a_read_under_an_equivalent_guard_is_not_unbound():
    """`if is_main: tracker = ...` then `if is_main: tracker.log()`: the same ranks bind and read."""
    from accel_lint.engine import lint_source
    from accel_lint.model.moves import reads_bound_on_some_ranks

    source = HEAD + textwrap.indent(textwrap.dedent("""\
        if accelerator.is_main_process:
            tracker = open("log.txt", "a")
        if accelerator.is_main_process:
            tracker.write("step")
        print(tracker)
    """), " " * 8)
    model = lint_source(source.encode(), "train.py", Config(), want_fixes=True).model
    assert reads_bound_on_some_ranks(model) == {("train", "tracker"): 1}  # the print only


def test_a_fix_whose_follow_up_finding_a_later_fix_removes_is_kept():
    """AL101's fix makes a manual division double scaling (AL102); AL102's fix removes it."""
    _, outcome = fix("""\
        with accelerator.accumulate(model):
            loss = model(**batch).loss / args.gradient_accumulation_steps
            loss.backward()
            optimizer.step()
    """)
    assert sorted(d.code for d, _ in outcome.applied) == ["AL101", "AL102"], notices(outcome)
    assert "accelerator.backward(loss)" in outcome.fixed and "/ args.gradient_accumulation_steps" not in outcome.fixed


def test_a_follow_up_finding_no_fix_removes_drops_the_fix_that_brought_it(monkeypatch):
    """Were AL102's finding not fixable, AL101's fix would leave double scaling behind: it is
    dropped with a notice, and the file keeps its manual division and raw backward."""
    from accel_lint import fixes

    monkeypatch.setattr(fixes._Rounds, "_fixable", lambda self, key, result: False)
    source, outcome = fix("""\
        with accelerator.accumulate(model):
            loss = model(**batch).loss / args.gradient_accumulation_steps
            loss.backward()
            optimizer.step()
    """)
    assert "AL101" not in [d.code for d, _ in outcome.applied]
    assert "loss.backward()" in outcome.fixed
    assert "AL101 fix not applied: it would introduce a new AL102 finding in `train`" in notices(outcome)


def test_a_write_in_a_branch_no_rank_reaches_is_not_wrapped_again_and_again():
    """Found by fuzzing: `torch.save` under `if is_main: if not is_local_main:` (no rank runs
    it, so the op walk records no guard) was reported by AL401 and wrapped in a new guard
    every round, until the fix loop gave up."""
    source, outcome = fix("""\
        if accelerator.is_main_process:
            if not accelerator.is_local_main_process:
                shutil.rmtree("old-checkpoints")
    """)
    assert outcome.fixed == source and not outcome.notices
    assert "AL401" not in [d.code for d in outcome.remaining.diagnostics]


def test_a_guard_wrap_is_not_offered_inside_the_same_guard():
    from accel_lint.engine import lint_source
    from accel_lint.rules.base import guard_statement_fix

    source = HEAD + "        if accelerator.is_main_process:\n            wandb.log({})\n"
    model = lint_source(source.encode(), "train.py", Config(), want_fixes=True).model
    call = next(c for c in model.index.calls if model.code(c.func) == "wandb.log")
    assert guard_statement_fix(model, call, "accelerator", "is_main_process", "unsafe") is None
    assert guard_statement_fix(model, call, "accelerator", "sync_gradients", "unsafe") is not None


def test_many_findings_sharing_one_dropped_fix_do_not_exhaust_the_rounds():
    """Found on sd-scripts: a helper with many writes, called unguarded, gives one AL401 finding
    per write, all fixed by wrapping the same call, which would gate the helper's save_state
    (a new AL302). One is tried per round (they overlap) and each is dropped: those rounds
    change nothing and must not count toward the limit ("did not converge")."""
    writes = "".join(f"    torch.save(state, 'part{i}.pt')\n" for i in range(14))
    source = ("import torch\nfrom accelerate import Accelerator\n\n\n"
              f"def save_everything(accelerator, state, path):\n{writes}    accelerator.save_state(path)\n\n\n"
              "def main():\n    accelerator = Accelerator()\n    save_everything(accelerator, {}, 'out')\n")
    outcome = fix_source(source.encode(), "train.py", Config(), True)
    messages = notices(outcome)
    assert "converge" not in messages, messages
    assert outcome.fixed == source
    assert messages.count("AL401 fix not applied: it would introduce a new AL302 finding") == 14


def test_a_read_before_the_first_binding_is_a_problem_the_relint_rejects():
    """What a fix must not add: `accelerator.print(...)` above `accelerator = Accelerator()` in the
    same function raises UnboundLocalError; the same read after the binding, or in a loop that
    binds the name on a later line (the next pass reads it), is fine."""
    from accel_lint.engine import lint_source
    from accel_lint.fixes import _describe, _introduced, _problems

    def problems(body: str):
        result = lint_source(textwrap.dedent(body).encode(), "x.py", Config(), want_fixes=True)
        return _problems(result)

    fine = problems("""\
        from accelerate import Accelerator
        def main(model):
            accelerator = Accelerator()
            accelerator.print("ready")
            for step in range(3):
                if step:
                    print(last)
                last = step
    """)
    broken = problems("""\
        from accelerate import Accelerator
        def main(model):
            accelerator.print("starting")
            accelerator = Accelerator()
            accelerator.print("ready")
            for step in range(3):
                if step:
                    print(last)
                last = step
    """)
    added = _introduced(fine, broken)
    assert added == [("before-binding", "main", "accelerator")]
    assert "read `accelerator` in `main` where some path has not bound it" in _describe(added[0])


def test_a_read_after_a_binding_in_one_branch_only_is_a_problem_the_relint_rejects():
    """Source order is not enough: `accelerator` bound under `if args.track:` comes earlier in the
    file than the read, but the path through the missing `else` reaches the read unbound."""
    from accel_lint.engine import lint_source
    from accel_lint.fixes import _introduced, _problems

    def problems(body: str):
        result = lint_source(textwrap.dedent(body).encode(), "x.py", Config(), want_fixes=True)
        return _problems(result)

    head = textwrap.dedent("""\
        from accelerate import Accelerator
        def main(args):
            if args.track:
                accelerator = Accelerator(log_with="wandb")
            elif args.cpu:
                accelerator = Accelerator(cpu=True)
                return
    """)
    fine = problems(head + "    print('ready')\n")
    broken = problems(head + "    accelerator.print('ready')\n")
    assert _introduced(fine, broken) == [("before-binding", "main", "accelerator")]
    both = problems(head.replace("return", "pass") + "    else:\n        accelerator = Accelerator()\n"
                    "    accelerator.print('ready')\n")
    assert _introduced(fine, both) == []


def test_the_per_rank_print_fix_is_not_offered_where_a_path_leaves_the_accelerator_unbound():
    from accel_lint.engine import lint_source

    source = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        def main(args):
            if args.track:
                accelerator = Accelerator(log_with="wandb")
            model = accelerator.prepare(torch.nn.Linear(2, 2))
            print("ready")
        def other(args):
            if args.track:
                accelerator = Accelerator(log_with="wandb")
            else:
                accelerator = Accelerator()
            model = accelerator.prepare(torch.nn.Linear(2, 2))
            print("ready")
    """)
    result = lint_source(source.encode(), "x.py", Config(), want_fixes=True)
    fixes = {d.line: f for d, f in result.fixes if d.code == "AL403"}
    assert [d.line for d in result.diagnostics if d.code == "AL403"] == [7, 14]
    assert 7 not in fixes and fixes[14].applicability == "safe"


@pytest.mark.parametrize("gathered, safe", [
    ("batch['labels']", True),
    ("model(**batch).logits.argmax(dim=-1)", True),
    ("(logits - batch['labels']).abs()", True),
    ("(logits, batch['labels'])", True),
    ("logits.float().cpu()", True),
    ("loss", False),                       # one scalar per rank
    ("loss.mean()", False),
    ("logits.argmax()", False),            # no dimension: one value
    ("logits.sum(dim=0)", False),
    ("logits[0]", False),                  # the first sample only
    ("unknown(batch)", False),
])
def test_the_gather_fix_is_safe_only_on_a_value_with_one_row_per_sample(gathered, safe):
    """AL203's precondition, from the model's values: `gather_for_metrics` cuts the last round by
    counting rows, which is right only where the rows are the batch's samples."""
    from accel_lint.engine import lint_source

    source = textwrap.dedent(f"""\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model, eval_dl = accelerator.prepare(model, DataLoader(eval_ds, batch_size=8))
        model.eval()
        for batch in eval_dl:
            with torch.no_grad():
                out = model(**batch)
            logits = out.logits
            loss = out.loss
            metric.append(accelerator.gather({gathered}))
    """)
    result = lint_source(source.encode(), "x.py", Config(), want_fixes=True)
    fixes = [f.applicability for d, f in result.fixes if d.code == "AL203"]
    assert fixes == ["safe" if safe else "unsafe"]


def test_safe_fixes_leave_rank_local_prints_and_training_scopes_alone():
    """From the review of safe fixes on outside code: `accelerator.print` of a value that differs
    between ranks keeps only the main process's value (unsafe), and `unwrap_model(m).part` where
    the function runs a backward pass may feed a loss term the wrapper never sees (unsafe); the
    same fixes stay safe on a uniform value and under `no_grad`."""
    from accel_lint.engine import lint_source

    source = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(ds, batch_size=2))
        def train_step(batch):
            head = model.head
            loss = model(batch).sum() + head(batch).sum()
            accelerator.backward(loss)
            return loss
        def sample(batch):
            with torch.no_grad():
                return model.head(batch)
        total = 0.0
        for batch in loader:
            total += train_step(batch).item()
        print(f"loss {total}")
        print("finished")
    """)
    result = lint_source(source.encode(), "x.py", Config(), want_fixes=True)
    fixes = {(d.code, d.line): f.applicability for d, f in result.fixes}
    assert fixes[("AL501", 9)] == "unsafe" and fixes[("AL501", 15)] == "safe"
    assert fixes[("AL403", 19)] == "unsafe" and fixes[("AL403", 20)] == "safe"


@pytest.mark.parametrize("accumulate, steps, safe", [
    (True, "4", True),      # inside accumulate(): accelerator.backward's division is what the loop expects
    (False, "1", True),     # no accumulation: the division is by 1
    (False, "4", False),    # outside accumulate(): the optimizer steps every micro-step on gradients / 4
])
def test_the_raw_backward_fix_assumes_no_accumulation_outside_accumulate(accumulate, steps, safe):
    from accel_lint.engine import lint_source

    body = ("    with accelerator.accumulate(model):\n        loss = model(batch).sum()\n        loss.backward()\n"
            if accumulate else "    loss = model(batch).sum()\n    loss.backward()\n")
    source = textwrap.dedent(f"""\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator(gradient_accumulation_steps={steps})
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(ds, batch_size=2))
        for batch in loader:
    """) + body + "    optimizer.step()\n"
    result = lint_source(source.encode(), "x.py", Config(), want_fixes=True)
    assert [f.applicability for d, f in result.fixes if d.code == "AL101"] == ["safe" if safe else "unsafe"]
