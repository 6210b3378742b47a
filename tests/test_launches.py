"""How a project launches its scripts (accel_lint.launches), and the rules it turns off."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_lint.cli import main
from accel_lint.launches import (MULTI, SINGLE, deepspeed_scripts, launch_backends, mentions, names_sharding_backend,
                                 single_process_scripts)

SCRIPT = textwrap.dedent("""\
    import torch
    from accelerate import Accelerator
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    print("scoring")
    with open("scores.json", "w") as f:
        f.write("{}")
    model.half()
""")


def test_command_lines_are_read_as_single_or_several_processes(tmp_path: Path):
    (tmp_path / "one.yaml").write_text("distributed_type: 'NO'\nnum_processes: 1\n")
    text = textwrap.dedent("""\
        CUDA_VISIBLE_DEVICES=0 python scripts/eval.py --model x
        accelerate launch --num_processes 4 \\
            train.py --lr 1e-4
        torchrun --nproc_per_node=1 tune.py
        accelerate launch --config_file one.yaml infer.py
        python -u -m pip install x.py-lib
    """)
    assert mentions(text, [tmp_path]) == [("scripts/eval.py", SINGLE), ("train.py", MULTI), ("tune.py", SINGLE),
                                          ("infer.py", SINGLE)]


def _project(tmp_path: Path, readme: str) -> Path:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "eval.py").write_text(SCRIPT)
    (tmp_path / "README.md").write_text(readme)
    return tmp_path


def test_a_script_run_only_with_plain_python_is_single_process(tmp_path: Path):
    root = _project(tmp_path, "Run `python scripts/eval.py --model m`.\n")
    assert single_process_scripts(root, [root / "scripts" / "eval.py"]) == {(root / "scripts" / "eval.py").as_posix()}


def test_a_script_also_run_under_a_launcher_is_not(tmp_path: Path):
    root = _project(tmp_path, "python scripts/eval.py\n\naccelerate launch scripts/eval.py\n")
    assert single_process_scripts(root, [root / "scripts" / "eval.py"]) == frozenset()


def _codes(root: Path) -> list[str]:
    result = CliRunner().invoke(main, ["--no-cache", "--output-format", "json", str(root)])
    return sorted(d["code"] for d in json.loads(result.output))


def test_only_rules_that_hold_in_one_process_report_in_a_single_process_script(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    launched = _project(tmp_path / "a", "python scripts/eval.py\n")
    unknown = _project(tmp_path / "b", "See the docs.\n")
    assert _codes(unknown) == ["AL401", "AL403", "AL504"]
    assert _codes(launched) == ["AL504"]  # a move of the prepared model under it: harmful in one process too


def test_a_script_that_starts_its_own_processes_keeps_every_rule(tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "eval.py").write_text(SCRIPT + "notebook_launcher(run, num_processes=2)\n")
    (tmp_path / "README.md").write_text("python scripts/eval.py\n")
    assert "AL401" in _codes(tmp_path)


def test_a_script_written_for_several_processes_keeps_every_rule_whatever_its_readme_shows(tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    training = SCRIPT.replace('print("scoring")', 'accelerator.backward(model(torch.ones(2)).sum())\nprint("scoring")')
    (tmp_path / "scripts" / "eval.py").write_text(training)
    # (the project launches several processes elsewhere: the README's line is one way to run it)
    (tmp_path / "README.md").write_text("python scripts/eval.py\n\naccelerate launch --multi_gpu other.py\n")
    (tmp_path / "other.py").write_text("print('other')\n")
    assert "AL401" in _codes(tmp_path)


def test_a_training_script_of_a_project_that_launches_nothing_on_several_processes_is_one_process(tmp_path: Path):
    """`python train.py` is how the project runs its training script, and nothing in the
    project starts any script on several processes: one process, whatever the script is written
    for. One launch of several processes anywhere in the project (here of another script), or a
    launcher told to start one, and the `python` line is one way to run it: every rule stays."""
    (tmp_path / "scripts").mkdir()
    training = SCRIPT.replace('print("scoring")', 'accelerator.backward(model(torch.ones(2)).sum())\nprint("scoring")')
    (tmp_path / "scripts" / "eval.py").write_text(training)
    (tmp_path / "scripts" / "other.py").write_text("print('other')\n")
    (tmp_path / "README.md").write_text("Trained on 1 GPU: `python scripts/eval.py --lr 1e-3`\n")
    assert _codes(tmp_path) == []
    (tmp_path / "multi.sh").write_text("accelerate launch --multi_gpu scripts/other.py\n")
    assert "AL401" in _codes(tmp_path)
    (tmp_path / "multi.sh").unlink()
    (tmp_path / "one.sh").write_text("torchrun --nproc_per_node 1 scripts/eval.py\n")
    assert "AL401" in _codes(tmp_path)


def test_a_helper_of_another_module_called_only_from_a_one_process_script_is_not_run_on_every_rank(tmp_path: Path):
    (tmp_path / "helpers.py").write_text(textwrap.dedent("""\
        import torch

        def save_checkpoint(state, path):
            torch.save(state, path)

        def first_layer(model):
            return model.fc
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from helpers import first_layer, save_checkpoint

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(2, 2)

        accelerator = Accelerator()
        model, optimizer = accelerator.prepare(Net(), optimizer)
        accelerator.backward(model(torch.ones(2)).sum())
        layer = first_layer(model)
        save_checkpoint(layer.state_dict(), "last.pt")
    """))
    (tmp_path / "README.md").write_text("python train.py\n")
    assert _codes(tmp_path) == []  # (there `prepare` returned the bare model: `.fc` is there)
    (tmp_path / "README.md").write_text("python train.py\naccelerate launch --multi_gpu train.py\n")
    assert {"AL401", "AL501"} <= set(_codes(tmp_path))


def test_a_torch_clip_in_a_single_process_script_reports_only_where_a_constructor_may_ask_for_fp16(tmp_path: Path):
    """In one process a torch clip's only harm is fp16's scaled gradients, and a `python`
    launch reads no launcher config: only the constructor can ask for fp16."""
    (tmp_path / "scripts").mkdir()
    clipping = SCRIPT.replace('print("scoring")', 'torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nprint("scoring")')
    (tmp_path / "README.md").write_text("python scripts/eval.py\n")
    (tmp_path / "scripts" / "eval.py").write_text(clipping)
    assert _codes(tmp_path) == ["AL504"]
    (tmp_path / "scripts" / "eval.py").write_text(clipping.replace("Accelerator()", 'Accelerator(mixed_precision="fp16")'))
    assert _codes(tmp_path) == ["AL103", "AL504"]


def test_a_script_that_pins_one_gpu_at_import_runs_as_one_process():
    """`os.environ["CUDA_VISIBLE_DEVICES"] = "3"` at the top of the module: the second GPU
    process of any launch has no device, so only what harms one process is reported. Two GPUs
    made visible, or the pin inside a function, keep every rule."""
    from accel_lint.config import Config
    from accel_lint.engine import lint_source

    body = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        if accelerator.is_main_process:
            accelerator.save_state("ckpt")
        model.half()
    """)

    def codes(source: str) -> list[str]:
        return sorted(d.code for d in lint_source(source, "train.py", Config()).diagnostics)

    assert codes('import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "3"\n' + body) == ["AL504"]
    assert codes("import os\nos.environ.setdefault('CUDA_VISIBLE_DEVICES', '0')\n" + body) == ["AL504"]
    assert codes('import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0,1"\n' + body) == ["AL302", "AL504"]
    assert codes('import os\ndef pin():\n    os.environ["CUDA_VISIBLE_DEVICES"] = "3"\n' + body) == ["AL302", "AL504"]


def test_a_launcher_given_one_visible_gpu_and_no_process_count_starts_one_process():
    text = textwrap.dedent("""\
        CUDA_VISIBLE_DEVICES=1 accelerate launch --mixed_precision bf16 src/finetune.py --epochs 3
        CUDA_VISIBLE_DEVICES=0,1 accelerate launch src/pretrain.py
        CUDA_VISIBLE_DEVICES=0 accelerate launch --multi_gpu src/joint.py
        CUDA_VISIBLE_DEVICES=3 torchrun --nproc_per_node 2 src/probe.py
        CUDA_VISIBLE_DEVICES=2 accelerate launch --config_file eight.yaml src/sweep.py
    """)
    assert mentions(text) == [("src/finetune.py", SINGLE), ("src/pretrain.py", MULTI), ("src/joint.py", MULTI),
                              ("src/probe.py", MULTI), ("src/sweep.py", MULTI)]


DEEPSPEED_SCRIPT = textwrap.dedent("""\
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM
    accelerator = Accelerator()
    model = accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"))
    out = model.generate(**inputs)
    weights = model.state_dict()
""")


def test_launches_under_deepspeed_are_read_from_flags_and_config_files(tmp_path: Path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "zero2.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 8\n")
    (tmp_path / "configs" / "ddp.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 8\n")
    text = textwrap.dedent("""\
        accelerate launch --use_deepspeed --zero_stage 2 a.py
        accelerate launch --config_file $root/configs/zero2.yaml b.py
        deepspeed --num_gpus 8 c.py --deepspeed ds.json
        accelerate launch --config_file configs/ddp.yaml d.py
        torchrun --nproc_per_node 8 e.py
    """)
    assert launch_backends(text, [tmp_path]) == [("a.py", "DEEPSPEED"), ("b.py", "DEEPSPEED"), ("c.py", "DEEPSPEED"),
                                                 ("d.py", None), ("e.py", None)]


def test_a_script_every_launch_runs_under_deepspeed_gets_no_attribute_finding(tmp_path: Path):
    """DeepSpeed's engine forwards the attributes it lacks to the model: `model.generate` works
    there. Its `state_dict()` keys still carry `module.`, so that finding stays; and a script
    also launched without DeepSpeed keeps both."""
    (tmp_path / "ds_train.py").write_text(DEEPSPEED_SCRIPT)
    (tmp_path / "both.py").write_text(DEEPSPEED_SCRIPT)
    (tmp_path / "run.sh").write_text("accelerate launch --use_deepspeed ds_train.py\n"
                                     "accelerate launch --use_deepspeed both.py\naccelerate launch --multi_gpu both.py\n")
    files = [tmp_path / "ds_train.py", tmp_path / "both.py"]
    assert deepspeed_scripts(tmp_path, files) == frozenset({(tmp_path / "ds_train.py").as_posix()})
    result = CliRunner().invoke(main, [str(tmp_path), "--no-cache", "--output-format", "json", "--select", "AL501"])
    found = sorted((Path(f["path"]).name, f["line"]) for f in json.loads(result.output))
    assert found == [("both.py", 5), ("both.py", 6), ("ds_train.py", 6)]


BF16_CLIP_SCRIPT = """\
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="bf16")
model = accelerator.prepare(torch.nn.Linear(2, 2))
for batch in loader:
    accelerator.backward(model(batch).sum())
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if accelerator.is_main_process:
        weights = accelerator.get_state_dict(model)
"""


@pytest.mark.parametrize("setting", [
    "configs/fsdp.yaml: distributed_type: FSDP",
    "run.sh: accelerate launch --use_fsdp train.py",
    "ds.json: {\"zero_optimization\": {\"stage\": 3}}",
    "train_cfg.py: plugin = DeepSpeedPlugin(zero_stage=args.stage)",
    "tpu.yaml: distributed_type: XLA",
])
def test_a_sharding_backend_is_named_by_configs_flags_and_code(tmp_path: Path, setting: str):
    name, _, text = setting.partition(": ")
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text + "\n")
    assert names_sharding_backend(tmp_path)


def test_a_project_of_ddp_and_zero2_names_no_sharding_backend(tmp_path: Path):
    # Accelerate's default config file lists empty fsdp/deepspeed sections; a ZeRO-2 file and a
    # dict with a "stage" key of another meaning name no sharding either
    (tmp_path / "default.yaml").write_text("distributed_type: MULTI_GPU\nfsdp_config: {}\ndeepspeed_config: {}\n")
    (tmp_path / "zero2.json").write_text('{"zero_optimization": {"stage": 2}}\n')
    (tmp_path / "util.py").write_text("info = {'stage': dataset.stage}\n")
    (tmp_path / "run.sh").write_text("accelerate launch --use_deepspeed --zero_stage 2 train.py\n")
    assert not names_sharding_backend(tmp_path)


def test_a_harm_that_needs_a_sharding_backend_is_not_reported_where_the_project_names_none(tmp_path: Path):
    """A torch clip under a constructor that fixes bf16 clips differently only under FSDP or XLA:
    a project that never names one gets no finding; naming one anywhere brings it back. A
    main-only get_state_dict, a hang there, is reported either way."""
    (tmp_path / "train.py").write_text(BF16_CLIP_SCRIPT)
    (tmp_path / "run.sh").write_text("accelerate launch --multi_gpu --num_processes 2 train.py\n")

    def codes() -> list[str]:
        result = CliRunner().invoke(main, [str(tmp_path), "--no-cache", "--output-format", "json",
                                           "--select", "AL103,AL302"])
        return sorted(f["code"] for f in json.loads(result.output))

    assert codes() == ["AL302"]
    (tmp_path / "fsdp.yaml").write_text("distributed_type: FSDP\n")
    assert codes() == ["AL103", "AL302"]


def test_a_module_run_as_a_script_is_read_as_its_file():
    text = textwrap.dedent("""\
        uv run python -m signal_lab.training.diffusion config.toml --output-dir runs/a
        accelerate launch --multi_gpu -m signal_lab.training.classify
        python -u -m train
        python -m pip install -e .
        python -m torch.distributed.run --nproc_per_node 2 fit.py
        #  --launch-command "accelerate launch --num_processes {n} -m signal_lab.evaluate"
    """)
    assert mentions(text) == [("signal_lab/training/diffusion.py", SINGLE), ("signal_lab/training/classify.py", MULTI),
                              ("train.py", SINGLE), ("fit.py", MULTI), ("signal_lab/evaluate.py", MULTI)]


def test_job_yaml_files_carry_launch_commands(tmp_path: Path):
    """A SkyPilot or Kubernetes job file's `run:` block is a shell script."""
    (tmp_path / "gen.py").write_text("from accelerate import Accelerator\nacc = Accelerator()\n")
    (tmp_path / "sky.yaml").write_text("resources:\n  accelerators: A100:1\nrun: |\n  source .venv/bin/activate\n"
                                       "  python gen.py -n 50000 --overwrite\n")
    assert single_process_scripts(tmp_path, [tmp_path / "gen.py"]) == frozenset({(tmp_path / "gen.py").as_posix()})


def test_a_launch_of_a_script_the_tree_no_longer_holds_says_nothing(tmp_path: Path):
    """An old job file that starts a deleted script on several processes does not make the
    project one that launches several: its training script, run only with python, is one process."""
    from accel_lint.launches import one_process_project_scripts

    (tmp_path / "train.py").write_text("from accelerate import Accelerator\nacc = Accelerator()\n")
    (tmp_path / "README.md").write_text("python train.py --config a.toml\n")
    (tmp_path / "old.sh").write_text("accelerate launch --multi_gpu train_text_to_image.py\n")
    files = [tmp_path / "train.py"]
    assert one_process_project_scripts(tmp_path, files) == frozenset({(tmp_path / "train.py").as_posix()})
    (tmp_path / "train_text_to_image.py").write_text("")
    assert one_process_project_scripts(tmp_path, files) == frozenset()


def test_a_launch_that_fixes_bf16_leaves_a_torch_clip_only_a_sharding_harm(tmp_path: Path):
    """`accelerate launch --mixed_precision bf16`: an `Accelerator()` that chooses no precision
    runs no loss scaler, so a torch clip differs only under FSDP or XLA, which the project never
    names; a launch that may give fp16 keeps the finding."""
    from accel_lint.launches import launch_precisions

    assert launch_precisions("accelerate launch --mixed_precision=bf16 a.py\naccelerate launch b.py\n"
                             "python c.py\ntorchrun --nproc_per_node 2 d.py\n") == [
        ("a.py", "bf16"), ("b.py", None), ("c.py", "no"), ("d.py", "no")]
    (tmp_path / "train.py").write_text(BF16_CLIP_SCRIPT.replace('Accelerator(mixed_precision="bf16")', "Accelerator()"))
    (tmp_path / "run.sh").write_text("accelerate launch --multi_gpu --mixed_precision bf16 train.py\n")

    def codes() -> list[str]:
        result = CliRunner().invoke(main, [str(tmp_path), "--no-cache", "--output-format", "json", "--select", "AL103"])
        return sorted(f["code"] for f in json.loads(result.output))

    assert codes() == []
    (tmp_path / "run.sh").write_text("accelerate launch --multi_gpu --mixed_precision bf16 train.py\n"
                                     "accelerate launch --multi_gpu train.py\n")
    assert codes() == ["AL103"]


def test_a_project_whose_loaders_strip_the_module_prefix_gets_no_state_dict_finding(tmp_path: Path):
    """Saving a prepared model's `state_dict()` writes `module.`-prefixed keys under DDP; a
    project that drops the prefix where it loads them reads them back fine. Its attribute reads
    on the wrapper still fail, and stay."""
    from accel_lint.launches import strips_module_prefix

    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        if accelerator.is_main_process:
            torch.save(model.state_dict(), "net.pt")
            print(model.weight)
    """))
    (tmp_path / "run.sh").write_text("accelerate launch --multi_gpu train.py\n")

    def findings() -> list[tuple[int, str]]:
        result = CliRunner().invoke(main, [str(tmp_path), "--no-cache", "--output-format", "json", "--select", "AL501"])
        return sorted((f["line"], f["code"]) for f in json.loads(result.output))

    assert not strips_module_prefix(tmp_path)
    assert findings() == [(6, "AL501"), (7, "AL501")]
    (tmp_path / "load.py").write_text("sd = {k.replace('module.', ''): v for k, v in torch.load('net.pt').items()}\n")
    assert strips_module_prefix(tmp_path)
    assert findings() == [(7, "AL501")]


@pytest.mark.parametrize("code,strips", [
    ("sd = {k.replace('module.', ''): v for k, v in ckpt.items()}\n", True),
    ("if key.startswith('module'):\n    name = key[7:]\n", True),
    ("name = key.removeprefix('module.')\n", True),
    ("import re\nname = re.sub(r'^module\\.', '', key)\n", True),
    ("consume_prefix_in_state_dict_if_present(sd, 'module.')\n", True),
    ("wrapped = any(k.startswith('module.') for k in sd)\n", False),  # a test, no strip
    ("name = key.replace('modules', '')\n", False),
    ("# sd = {k.replace('module.', ''): v ...}\n", False),  # a comment
    ("def load():\n    '''Keys: {k.replace(\"module.\", \"\")}'''\n", False),  # a docstring
])
def test_a_loader_that_strips_the_module_prefix_is_read_from_code_not_text(code: str, strips: bool):
    from accel_lint.launches import _strips_module_prefix_in

    assert _strips_module_prefix_in(code) is strips
