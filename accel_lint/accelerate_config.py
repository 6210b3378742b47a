"""Configuration-aware severities: what an Accelerate config YAML says about the backend.

``--accelerate-config PATH`` (repeatable) or ``[tool.accel-lint] accelerate-configs`` names the
YAML files ``accelerate config`` writes. Without one, the backend is unknown and every rule keeps
its default severity, which assumes FSDP, DeepSpeed ZeRO-3, fp16 and several nodes are possible.
With several, a finding takes the highest severity any of them gives (the catalog's §2.9).

The linter must not need PyYAML (it is not a dependency): these files are flat ``key: value``
maps with one level of nested maps (``deepspeed_config:``, ``fsdp_config:``), which
:func:`parse_simple_yaml` reads; PyYAML is used when it is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .diagnostics import Diagnostic

_RANK = {"info": 0, "warning": 1, "error": 2}
_LEVEL = {v: k for k, v in _RANK.items()}


class AccelerateConfigError(Exception):
    pass


@dataclass(frozen=True)
class Backend:
    """The facts of one config file that change severities."""

    source: str
    distributed_type: str  # NO, MULTI_GPU, MULTI_CPU, FSDP, DEEPSPEED, XLA, MEGATRON_LM
    num_processes: int
    zero_stage: int | None
    mixed_precision: str
    gradient_accumulation: int
    fsdp_version: int | None = None  # 1 (Accelerate's default) or 2, under FSDP

    @property
    def fsdp1(self) -> bool:
        return self.distributed_type == "FSDP" and self.fsdp_version != 2

    @property
    def sharded(self) -> bool:
        return self.distributed_type == "FSDP" or (self.distributed_type == "DEEPSPEED" and self.zero_stage == 3)

    @property
    def single_process(self) -> bool:
        return self.distributed_type == "NO" or self.num_processes <= 1


def load(path: Path) -> Backend:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AccelerateConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        import yaml  # type: ignore[import-untyped]

        data = yaml.safe_load(text) or {}
    except ImportError:
        data = parse_simple_yaml(text)
    except Exception as exc:
        raise AccelerateConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or "distributed_type" not in data:
        raise AccelerateConfigError(f"{path}: not an Accelerate config (no distributed_type)")
    deepspeed = data.get("deepspeed_config") or {}
    zero = deepspeed.get("zero_stage")
    steps = deepspeed.get("gradient_accumulation_steps", data.get("gradient_accumulation_steps", 1))
    fsdp_version = (data.get("fsdp_config") or {}).get("fsdp_version", 1)
    try:
        return Backend(str(path), str(data["distributed_type"]).upper(), int(data.get("num_processes", 1) or 1),
                       int(zero) if zero is not None else None, str(data.get("mixed_precision", "no")).lower(),
                       int(steps) if str(steps).isdigit() else 1,
                       int(fsdp_version) if data["distributed_type"] == "FSDP" else None)
    except (TypeError, ValueError) as exc:
        raise AccelerateConfigError(f"{path}: unexpected value ({exc})") from None


def parse_simple_yaml(text: str) -> dict:
    """``key: value`` lines, nested one level deeper by indentation; scalars as ints, bools or str."""
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1] if stack else root
        value = value.strip()
        if not value:
            child: dict = {}
            parent[key.strip()] = child
            stack.append((indent, child))
        else:
            parent[key.strip()] = _scalar(value)
    return root


def _scalar(value: str):
    value = value.strip().strip("'\"")
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value.lower() in ("null", "~"):
        return None
    try:
        return int(value)
    except ValueError:
        return value


def severity_under(d: Diagnostic, backend: Backend) -> str:
    """The severity of ``d`` when the job runs with ``backend``."""
    code, tag, severity = d.code, d.tag, d.severity
    if backend.single_process and code[:3] in ("AL3", "AL4"):
        return "info"
    if code == "AL302":
        if backend.sharded:
            # a main-only state_dict() hangs under FSDP1 and returns shards under FSDP2 and ZeRO-3
            return "warning" if tag == "state_dict" and not backend.fsdp1 else "error"
        if backend.distributed_type in ("MULTI_GPU", "MULTI_CPU"):
            return {"save_model": "info", "get_state_dict": "info", "state_dict": "info",
                    "save_state": "warning"}.get(tag, "error")
        if backend.distributed_type == "DEEPSPEED":
            return "info" if tag in ("save_model", "get_state_dict", "state_dict") else "error"
    if code == "AL305" and tag == "unwrapped":
        if backend.sharded:
            return "error"
        if backend.distributed_type in ("MULTI_GPU", "MULTI_CPU"):
            return "info"  # main-only evaluation of the unwrapped model is fine under DDP
    elif code == "AL305":
        if backend.distributed_type == "DEEPSPEED" and backend.zero_stage != 3:
            return "info"  # ZeRO-1/2 shard no parameters: a main-only forward completed on 2 GPUs
        if backend.distributed_type == "MULTI_GPU":
            return "warning"  # NCCL paired the buffer broadcast with the other rank's barrier and went on (gloo hangs)
    if code == "AL307" and backend.distributed_type == "DEEPSPEED":
        return "info"  # the engine steps a prepared scheduler itself: the message names DDP and FSDP only
    if code == "AL501" and tag == "state_dict" and backend.sharded:
        # FSDP1's wrapper returns the full, unprefixed state dict (measured with both state-dict types)
        return "info" if backend.fsdp1 else "error"
    if code == "AL501" and tag == "attribute" and backend.distributed_type in ("MULTI_GPU", "MULTI_CPU"):
        return "error"  # AttributeError on DDP's wrapper
    if code == "AL503" and tag == "DataParallel" and backend.single_process:
        return "info"  # one process: DataParallel over the visible GPUs is what it is for
    zero3 = backend.distributed_type == "DEEPSPEED" and backend.zero_stage == 3
    if code == "AL503" and tag == "DistributedDataParallel" and not backend.single_process and not zero3:
        return "warning"  # DDP in DDP ran (gradients all-reduced twice); ZeRO-3 and one process fail
    if code == "AL504" and tag == "half" and zero3:
        return "error"  # ZeRO-3's forward fails on mixed dtypes
    if code == "AL103" and (backend.distributed_type == "FSDP" or backend.mixed_precision == "fp16"):
        return "error"
    if code == "AL101" and backend.mixed_precision == "fp16":
        return "error"
    if code == "AL104" and backend.mixed_precision == "fp16" and backend.gradient_accumulation > 1:
        return "error"
    if code in ("AL102", "AL105") and backend.gradient_accumulation > 1:
        return "error"
    return severity


def adjust(diagnostics: list[Diagnostic], backends: tuple[Backend, ...]) -> list[Diagnostic]:
    """Each finding at the highest severity the configured backends give it."""
    if not backends:
        return diagnostics
    from dataclasses import replace

    out = []
    for d in diagnostics:
        level = max(_RANK[severity_under(d, b)] for b in backends)
        out.append(d if _LEVEL[level] == d.severity else replace(d, severity=_LEVEL[level]))
    return out
