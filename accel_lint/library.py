"""What the analyzer knows about outside functions, as data: ``library.toml`` plus the rows a
project adds in ``[tool.accel-lint]``.

The model reads every fact about a call it cannot see into from here: which calls write or
delete files (and which argument is the path, and which keywords make them safe on every rank),
which library savers write on every rank, which calls return something unique to the rank, and
which of the user's own functions are rank predicates or collectives."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef]

from .collectives import ACCELERATOR_METHOD_OPS, ACCELERATE_FUNCTION_OPS

RANK_PREDICATE_VALUES = ("main", "local_main")


@dataclass(frozen=True)
class WriteModel:
    """One writing call: where its path is, and what makes it tolerant of every rank running it."""

    path: int | str | None  # a position, "self" (the receiver), or None (unknown)
    path_keyword: str | None = None
    tolerant: tuple[str, ...] = ()
    creates_directory: bool = False
    # the call writes only when one of these keywords is passed (`Repository(d, clone_from=url)`)
    only_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class Library:
    """The table. ``writes`` is keyed by qualified function name, ``write_methods`` by method name."""

    writes: dict[str, WriteModel] = field(default_factory=dict)
    write_methods: dict[str, WriteModel] = field(default_factory=dict)
    unguarded_saver_suffixes: tuple[str, ...] = ()
    unguarded_model_attributes: tuple[str, ...] = ()  # `model.generation_config.save_pretrained(...)`
    unguarded_saver_packages: tuple[str, ...] = ()  # every class of these packages
    unguarded_saver_mixins: frozenset[str] = frozenset()  # classes of the tree deriving from these
    rank_unique_sources: frozenset[str] = frozenset()
    rank_predicates: dict[str, str] = field(default_factory=dict)  # qualified name -> "main" | "local_main"
    collectives: dict[str, str] = field(default_factory=dict)  # qualified name -> op kind
    # qualified name -> (short name, holds the model as `.module`)
    manual_wrappers: dict[str, tuple[str, bool]] = field(default_factory=dict)
    # top-level package -> (class-name suffixes, classmethods that build one)
    bare_model_consumers: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    accelerator_protocol: frozenset[str] = frozenset()  # members only accelerators have
    keeps_frozen_methods: frozenset[str] = frozenset()
    keeps_frozen_calls: frozenset[str] = frozenset()
    identity_calls: dict[str, int] = field(default_factory=dict)  # qualified name -> position of what it returns
    loader_classes: frozenset[str] = frozenset()  # DataLoader subclasses beside torch's own
    attribute_dicts: frozenset[str] = frozenset()  # dicts whose items are also attributes (Munch)
    # scheduler factory -> {position of a positional argument: the horizon parameter it binds}
    scheduler_horizons: dict[str, dict[int, str]] = field(default_factory=dict)
    trackers: frozenset[str] = frozenset()  # calls that log to an experiment tracker
    tracker_starts: frozenset[str] = frozenset()  # of those, the ones that create a run
    tracker_writers: frozenset[str] = frozenset()  # of those, the ones whose result logs by `add_*`
    tracker_ends: frozenset[str] = frozenset()  # of those, the ones that end this rank's run
    # the current run of a tracker (`wandb.run`; `mlflow.active_run()`): `None` on a rank that started none
    tracker_runs: frozenset[str] = frozenset()
    # objects whose method writes a file, by the call that makes them: qualified maker ->
    # (the writing method, how it writes, the object's methods that return another such object)
    writer_objects: dict[str, tuple[str, WriteModel, frozenset[str]]] = field(default_factory=dict)
    # packages whose `...Trainer` classes run a training loop of their own on every launched
    # process (transformers' Trainer, trl's SFTTrainer): a file that builds one trains on several
    distributed_trainer_packages: tuple[str, ...] = ()

    def extended(self, extension: tuple) -> Library:
        """This table with a project's rows (``Config.library_extension``) added."""
        if not extension:
            return self
        rows = dict(extension)
        writes = dict(self.writes)
        for name, position in rows.get("extend-writes", ()):
            writes[name] = WriteModel(position)
        return Library(
            writes=writes,
            write_methods=self.write_methods,
            unguarded_saver_suffixes=self.unguarded_saver_suffixes,
            unguarded_model_attributes=self.unguarded_model_attributes,
            unguarded_saver_packages=self.unguarded_saver_packages,
            unguarded_saver_mixins=self.unguarded_saver_mixins,
            rank_unique_sources=self.rank_unique_sources | frozenset(rows.get("extend-rank-unique-sources", ())),
            rank_predicates={**self.rank_predicates, **dict(rows.get("extend-rank-predicates", ()))},
            collectives={**self.collectives, **dict(rows.get("extend-collectives", ()))},
            manual_wrappers=self.manual_wrappers,
            bare_model_consumers=self.bare_model_consumers,
            accelerator_protocol=self.accelerator_protocol,
            keeps_frozen_methods=self.keeps_frozen_methods,
            keeps_frozen_calls=self.keeps_frozen_calls,
            identity_calls=self.identity_calls,
            loader_classes=self.loader_classes | frozenset(rows.get("extend-loader-classes", ())),
            attribute_dicts=self.attribute_dicts,
            scheduler_horizons=self.scheduler_horizons,
            trackers=self.trackers,
            tracker_starts=self.tracker_starts,
            tracker_writers=self.tracker_writers,
            tracker_runs=self.tracker_runs,
            tracker_ends=self.tracker_ends,
            writer_objects=self.writer_objects,
            distributed_trainer_packages=self.distributed_trainer_packages,
        )


def _write_model(row: dict) -> WriteModel:
    return WriteModel(row.get("path"), row.get("path-keyword"), tuple(row.get("tolerant", ())),
                      bool(row.get("creates-directory", False)), tuple(row.get("only-with", ())))


@lru_cache(maxsize=1)
def default_library() -> Library:
    """The packaged table."""
    data = tomllib.loads(resources.files("accel_lint").joinpath("library.toml").read_text(encoding="utf-8"))
    return Library(
        writes={name: _write_model(row) for name, row in data.get("writes", {}).items()},
        write_methods={name: _write_model(row) for name, row in data.get("write-methods", {}).items()},
        writer_objects={name: (row["method"], _write_model(row), frozenset(row.get("keeps", ())))
                        for name, row in data.get("writer-objects", {}).items()},
        unguarded_saver_suffixes=tuple(data.get("unguarded-savers", {}).get("class-suffixes", ())),
        unguarded_model_attributes=tuple(data.get("unguarded-savers", {}).get("model-attributes", ())),
        unguarded_saver_packages=tuple(data.get("unguarded-savers", {}).get("packages", ())),
        unguarded_saver_mixins=frozenset(data.get("unguarded-savers", {}).get("mixins", ())),
        rank_unique_sources=frozenset(data.get("rank-unique-sources", {}).get("calls", ())),
        rank_predicates=dict(data.get("rank-predicates", {})),
        collectives=dict(data.get("collectives", {})),
        manual_wrappers={name: (row["name"], bool(row.get("has-module", False)))
                         for name, row in data.get("manual-wrappers", {}).items()},
        bare_model_consumers={package: (tuple(row.get("class-suffixes", ())), tuple(row.get("methods", ())))
                              for package, row in data.get("bare-model-consumers", {}).items()},
        accelerator_protocol=frozenset(data.get("accelerator-protocol", {}).get("members", ())),
        keeps_frozen_methods=frozenset(data.get("keeps-frozen", {}).get("methods", ())),
        keeps_frozen_calls=frozenset(data.get("keeps-frozen", {}).get("calls", ())),
        identity_calls=dict(data.get("identity-calls", {})),
        distributed_trainer_packages=tuple(data.get("distributed-trainers", {}).get("packages", ())),
        loader_classes=frozenset(data.get("loader-classes", {}).get("classes", ())),
        attribute_dicts=frozenset(data.get("attribute-dicts", {}).get("classes", ())),
        scheduler_horizons={name: {int(position): parameter for position, parameter in row.items()}
                            for name, row in data.get("scheduler-horizons", {}).items()},
        trackers=frozenset(data.get("trackers", {})),
        tracker_starts=frozenset(name for name, row in data.get("trackers", {}).items() if row.get("starts")),
        tracker_writers=frozenset(name for name, row in data.get("trackers", {}).items() if row.get("writer")),
        tracker_runs=frozenset(data.get("tracker-runs", {}).get("handles", ())),
        tracker_ends=frozenset(name for name, row in data.get("trackers", {}).items() if row.get("ends")),
    )


@lru_cache(maxsize=8)
def library_for(extension: tuple) -> Library:
    return default_library().extended(extension)


# the op kinds a user may give a collective of their own
COLLECTIVE_KINDS = frozenset(ACCELERATOR_METHOD_OPS.values()) | frozenset(ACCELERATE_FUNCTION_OPS.values())


def parse_extension(data: dict, where: str) -> tuple:
    """The ``extend-*`` keys of ``[tool.accel-lint]`` as a hashable tuple, checked; raises
    ``ValueError`` with a message naming the key on a malformed row."""
    out = []
    writes = data.get("extend-writes", {})
    if writes:
        if not isinstance(writes, dict) or not all(isinstance(v, int) and v >= 0 for v in writes.values()):
            raise ValueError(f"{where}: extend-writes must be a table of \"module.function\" = <position of the path argument>")
        out.append(("extend-writes", tuple(sorted(writes.items()))))
    predicates = data.get("extend-rank-predicates", {})
    if predicates:
        if not isinstance(predicates, dict) or not all(v in RANK_PREDICATE_VALUES for v in predicates.values()):
            raise ValueError(f"{where}: extend-rank-predicates must be a table of \"module.function\" = "
                             f"\"main\" or \"local_main\" (where it returns True)")
        out.append(("extend-rank-predicates", tuple(sorted(predicates.items()))))
    collectives = data.get("extend-collectives", {})
    if collectives:
        if not isinstance(collectives, dict) or not all(v in COLLECTIVE_KINDS for v in collectives.values()):
            raise ValueError(f"{where}: extend-collectives must be a table of \"module.function\" = one of "
                             f"{', '.join(sorted(COLLECTIVE_KINDS))}")
        out.append(("extend-collectives", tuple(sorted(collectives.items()))))
    sources = data.get("extend-rank-unique-sources", [])
    if sources:
        if not isinstance(sources, list) or not all(isinstance(v, str) for v in sources):
            raise ValueError(f"{where}: extend-rank-unique-sources must be a list of \"module.function\" names")
        out.append(("extend-rank-unique-sources", tuple(sorted(sources))))
    loaders = data.get("extend-loader-classes", [])
    if loaders:
        if not isinstance(loaders, list) or not all(isinstance(v, str) for v in loaders):
            raise ValueError(f"{where}: extend-loader-classes must be a list of \"module.Class\" names")
        out.append(("extend-loader-classes", tuple(sorted(loaders))))
    return tuple(out)
