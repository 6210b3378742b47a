"""The library table (accel_lint/library.toml) and the rows a project adds in [tool.accel-lint]."""

from __future__ import annotations

import textwrap
from pathlib import Path

from accel_lint.library import default_library
from conftest import json_findings, run_cli

TRAIN = textwrap.dedent("""\
    import torch
    from accelerate import Accelerator
    from mylib.ckpt import save_all
    from mylib.dist import is_rank0
    from mylib.io import dump

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    if is_rank0():
        save_all(accelerator)
    dump({"step": 1}, "weights.bin")
    if is_rank0():
        dump({"step": 1}, "weights.bin")
    """)


def _project(root: Path, settings: str) -> Path:
    """Two modules: a training script and the project's own library, which the linter reads
    nothing from (its functions do not look like what the user declares them to be)."""
    (root / "mylib").mkdir()
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "dist.py").write_text("import os\n\n\ndef is_rank0():\n    return os.environ.get('MY_RANK') == '0'\n")
    (root / "mylib" / "ckpt.py").write_text("def save_all(accelerator):\n    pass\n")
    (root / "mylib" / "io.py").write_text("def dump(obj, where):\n    pass\n")
    (root / "train.py").write_text(TRAIN)
    (root / "pyproject.toml").write_text("[tool.accel-lint]\n" + settings)
    return root


def _codes(root: Path) -> list[tuple[int, str]]:
    _, found = json_findings("--no-cache", str(root), cwd=root)
    return [(f["line"], f["code"]) for f in found]


def test_a_projects_own_predicates_collectives_and_writers_are_used(tmp_path):
    root = _project(tmp_path, textwrap.dedent("""\
        extend-rank-predicates = { "mylib.dist.is_rank0" = "main" }
        extend-collectives = { "mylib.ckpt.save_all" = "CKPT" }
        extend-writes = { "mylib.io.dump" = 1 }
        """))
    # the checkpoint collective under the declared predicate hangs (AL302); the declared writer on
    # every rank races (AL401); under the predicate it is fine
    assert _codes(root) == [(10, "AL302"), (11, "AL401")]


def test_without_the_rows_the_same_calls_are_unknown_and_silent(tmp_path):
    assert _codes(_project(tmp_path, "")) == []


def test_a_malformed_row_is_a_configuration_error(tmp_path):
    root = _project(tmp_path, 'extend-rank-predicates = { "mylib.dist.is_rank0" = "rank zero" }\n')
    proc = run_cli("--no-cache", str(root), cwd=root)
    assert proc.returncode == 2
    assert "extend-rank-predicates" in proc.stderr and "main" in proc.stderr


def test_the_packaged_table_knows_paths_and_tolerant_keywords():
    library = default_library()
    assert library.writes["torch.save"].path == 1
    assert library.writes["shutil.rmtree"].tolerant == ("ignore_errors",)
    assert library.writes["os.makedirs"].tolerant == ("exist_ok",)
    assert library.write_methods["mkdir"].path == "self"
    assert "uuid.uuid4" in library.rank_unique_sources


REPLAY = """\
import torch
from accelerate import Accelerator
from memmap_replay_buffer import ReplayBuffer

accelerator = Accelerator()
policy = accelerator.prepare(torch.nn.Linear(4, 2))
{guard}buffer = ReplayBuffer("./replay", max_episodes=8, max_timesteps=16, fields=dict(reward="float"))
"""


def test_a_memory_mapped_replay_buffer_built_on_every_rank_on_one_folder_is_a_write(tmp_path):
    """A row of the table, not code: every rank opening the same memmap folder for writing."""
    every_rank = tmp_path / "every_rank.py"
    every_rank.write_text(REPLAY.format(guard=""))
    guarded = tmp_path / "guarded.py"
    guarded.write_text(REPLAY.format(guard="if accelerator.is_main_process:\n    "))
    _, found = json_findings("--no-cache", "--select", "AL401", str(tmp_path))
    assert [(Path(d["path"]).name, d["line"]) for d in found] == [("every_rank.py", 7)], found


CAST = """\
from typing import cast
import datasets
import torch
from accelerate import Accelerator
from datasets import load_dataset

accelerator = Accelerator()
train = load_dataset("imagefolder", split="train")
train = {wrap}
train = train.filter(lambda row: row["width"] > 64)
loader = accelerator.prepare(torch.utils.data.DataLoader(train))
"""


def test_a_call_that_returns_its_argument_keeps_what_the_value_is(tmp_path):
    """`typing.cast` is a row of [identity-calls]: after `cast(Dataset, train)` the model still
    knows `train` is a Hugging Face dataset, so its `.filter` on every rank is AL404; through an
    unknown function it is not known, and nothing is reported."""
    (tmp_path / "cast.py").write_text(CAST.format(wrap="cast(datasets.Dataset, train)"))
    (tmp_path / "unknown.py").write_text(CAST.format(wrap="narrow(datasets.Dataset, train)"))
    _, found = json_findings("--no-cache", "--select", "AL404", str(tmp_path))
    assert [(Path(d["path"]).name, d["line"]) for d in found] == [("cast.py", 10)], found
    assert default_library().identity_calls["typing.cast"] == 1


def test_a_projects_own_loader_class_is_a_loader_and_without_the_row_unknown(tmp_path):
    """A third-party DataLoader subclass the analysis cannot see into: declared in
    `extend-loader-classes`, one built in the file and iterated in training without `prepare`
    is AL201; undeclared, it is unknown (its name ends in `Loader`, which decides nothing)."""
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from fastdata import FastLoader

        accelerator = Accelerator()
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        loader = FastLoader(dataset, batch_size=8)
        for batch in loader:
            accelerator.backward(model(batch).sum())
        """))
    (tmp_path / "pyproject.toml").write_text('[tool.accel-lint]\nextend-loader-classes = ["fastdata.FastLoader"]\n')
    assert _codes(tmp_path) == [(10, "AL201")]
    (tmp_path / "pyproject.toml").write_text("[tool.accel-lint]\n")
    assert _codes(tmp_path) == []
    (tmp_path / "pyproject.toml").write_text('[tool.accel-lint]\nextend-loader-classes = "fastdata.FastLoader"\n')
    proc = run_cli("--no-cache", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "extend-loader-classes" in proc.stderr


def test_an_object_the_table_says_writes_by_a_method_is_a_write(tmp_path):
    """`writer-objects`: a PIL image made by `Image.fromarray` (also through `.convert`, or bound
    to a name) writes with `.save(path)`; an object of unknown making does not."""
    (tmp_path / "save_images.py").write_text(textwrap.dedent("""\
        from PIL import Image
        from accelerate import Accelerator

        accelerator = Accelerator()
        accelerator.wait_for_everyone()
        Image.fromarray(frame).convert("L").save("frame.png")
        picture = Image.open("in.png").resize((8, 8))
        picture.save("small.png")
        thing = make_thing()
        thing.save("thing.png")
    """))
    _, found = json_findings("--no-cache", "--select", "AL401", ".", cwd=tmp_path)
    assert [f["line"] for f in found] == [6, 8]
