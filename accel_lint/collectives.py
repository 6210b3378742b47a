"""The one table of collectives, shared by the linter and by ``runtime_checks``.

Facts are read off the sources of accelerate 1.15.0 and torch 2.13 (which calls
communicate, under which backend). This module is pure data: importing it must not
import torch or accelerate, because the linter runs without them.

Op kinds normalise calls so that per-rank sequences can be compared: two ranks
that call ``accelerator.gather`` and ``accelerate.utils.gather`` agree.
"""

from __future__ import annotations

from typing import Final

BARRIER: Final = "BARRIER"
ALLGATHER: Final = "ALLGATHER"
ALLGATHER_OBJ: Final = "ALLGATHER_OBJ"
ALLREDUCE: Final = "ALLREDUCE"
BROADCAST: Final = "BROADCAST"
BROADCAST_OBJ: Final = "BROADCAST_OBJ"
CKPT: Final = "CKPT"  # backend-dependent checkpoint collectives (class B)
# what a caller passes for a parameter that receives an accelerator (across modules)
ACCELERATOR: Final = "accelerator"
BACKWARD: Final = "BACKWARD"  # gradient all-reduce under DDP (class C)
DL_ITER: Final = "DL_ITER"  # RNG broadcast when a shuffled prepared loader starts (class C)
END: Final = "END"  # destroys the process group (class D)
# not a collective: what a module's summary says of a function that returns an accelerator
ACCELERATOR_FACTORY: Final = "ACCELERATOR_FACTORY"
# not a collective: a function whose result is a rank predicate (`def is_main_process(): return
# dist.get_rank() == 0`); its detail is "main" or "local_main", where it is true
RANK_PREDICATE: Final = "RANK_PREDICATE"
# not a collective: a function or class of another module whose call makes a new object of a known
# kind; its detail is the kind ("model", "optimizer", "loader", "scheduler")
RETURNS_KIND: Final = "RETURNS_KIND"
# not a collective: a class of another module whose instances keep only this rank's share of
# the data (its methods fill `self.<rows>` under a test on the rank index); its detail is the
# test, as written
SPLITS_PER_RANK: Final = "SPLITS_PER_RANK"
# not a collective: a module function of another module that returns a sampler giving each rank
# its own part (`return DistributedSampler(ds, ...)`, or `None` where it builds none); no detail
RETURNS_SHARDING_SAMPLER: Final = "RETURNS_SHARDING_SAMPLER"
# not a collective: a module function of another module whose result is the same on every rank
# whatever it is given (it returns what an all_gather, all_reduce or broadcast put in place); no
# detail
RETURNS_UNIFORM: Final = "RETURNS_UNIFORM"
# not a collective: a module function of another module that clips the gradients on every call
# (no test on `sync_gradients` around the clip); its detail is the clip call, as written
CLIPS_GRADIENTS: Final = "CLIPS_GRADIENTS"
# not a collective: the methods of a model class of another module that run its forward
# (`def sample(self, ...): ... self(x) ...`); its detail is their names, space-separated
FORWARD_METHODS: Final = "FORWARD_METHODS"
# not a collective: a module function that writes a file whenever it runs (no condition, no
# rank guard around the write); its detail is "<parameter position or ->|<what>|<line>": which
# parameter holds the path ("-": a path of its own), the write, and its line in that module
WRITES_FILE: Final = "WRITES_FILE"
# not a collective: a function or class of another module that may download a dataset into a
# folder when it runs (a torchvision dataset with `download=True`, `urlretrieve`), in its own body
# or through the functions and classes of its module it calls; its detail is "<what>|<line>"
DOWNLOADS: Final = "DOWNLOADS"
# not a collective: a class of another module that iterates objects it was built from (a loader
# mixing two loaders; `prepare` returns such an object unchanged); its detail is the constructor
# parameters it iterates, "<position>:<name>" space-separated
ITERATES_ARGUMENTS: Final = "ITERATES_ARGUMENTS"
# not a collective: a class of another module with methods that write a file whenever they run
# (as WRITES_FILE, for a call `obj.method(...)` on an instance); its detail is
# "<method>|<parameter position, not counting self, or ->|<what>|<line>" space-separated
WRITING_METHODS: Final = "WRITING_METHODS"
# not a collective: a function or class of another module that starts an experiment tracker's run
# (`wandb.init`) whenever it runs, as DOWNLOADS finds downloads; its detail is "<what>|<line>"
STARTS_TRACKER: Final = "STARTS_TRACKER"
# not a collective: a function of another module that rebinds `builtins.print` (torchvision's
# `setup_for_distributed(is_main)`): after a call, `print` is the program's own choice on each
# rank; its detail is "<the assignment>|<line>"
REPLACES_PRINT: Final = "REPLACES_PRINT"
# not a collective, and not for the modules that import the name: a module function of this
# Accelerate program that writes a file, which nothing in its own module calls (a report helper
# the entry script calls): where another module calls it on every rank, it runs on every rank
# (the engine then tells this module so). Its detail is empty.
WAITS_FOR_CALLERS: Final = "WAITS_FOR_CALLERS"
# not a collective: a class of another module with methods whose last collective destroys the
# process group (`def train(self): ...; self.accelerator.end_training()`); its detail is their
# names, space-separated
ENDING_METHODS: Final = "ENDING_METHODS"
# not a collective: a model class of another module with methods that return what its own
# `generate()` returned (`def my_generate(self, ids): ...; return self.generate(ids, ...)`); its
# detail is their names, space-separated
GENERATING_METHODS: Final = "GENERATING_METHODS"
# not a collective: a class of another module whose methods bind some attributes of its
# instances to rank-local data, or on some ranks only (`if self.accelerator.is_main_process:
# self.should_stop = True`); its detail is the attribute names, space-separated
RANK_VARYING_ATTRIBUTES: Final = "RANK_VARYING_ATTRIBUTES"
# what a module summary may say of a name that is not an op it performs
NOT_OPS: Final = frozenset({ACCELERATOR_FACTORY, WAITS_FOR_CALLERS, ENDING_METHODS, GENERATING_METHODS, RANK_PREDICATE, RETURNS_KIND, SPLITS_PER_RANK, FORWARD_METHODS,
                            RETURNS_SHARDING_SAMPLER, RETURNS_UNIFORM, CLIPS_GRADIENTS,
                            WRITES_FILE, DOWNLOADS, ITERATES_ARGUMENTS, WRITING_METHODS,
                            STARTS_TRACKER, REPLACES_PRINT, RANK_VARYING_ATTRIBUTES})
# of those, what calling the name makes (read also from modules with no Accelerate in them)
MADE_FACTS: Final = frozenset({RETURNS_KIND, ENDING_METHODS, GENERATING_METHODS, SPLITS_PER_RANK, FORWARD_METHODS, DOWNLOADS, ITERATES_ARGUMENTS,
                               RETURNS_SHARDING_SAMPLER, RETURNS_UNIFORM, CLIPS_GRADIENTS,
                               WRITING_METHODS, STARTS_TRACKER, REPLACES_PRINT, RANK_VARYING_ATTRIBUTES})

#: Methods of an Accelerator / PartialState / AcceleratorState that are collectives
#: in every multi-process type (class A) or backend-dependent (class B), with their op kind.
ACCELERATOR_METHOD_OPS: Final[dict[str, str]] = {
    "wait_for_everyone": BARRIER,
    "gather": ALLGATHER,
    "gather_for_metrics": ALLGATHER,  # ALLGATHER_OBJ with use_gather_object=True
    "pad_across_processes": ALLGATHER,
    "gather_object": ALLGATHER_OBJ,
    "reduce": ALLREDUCE,
    "check_trigger": ALLREDUCE,
    "broadcast": BROADCAST,
    "broadcast_object_list": BROADCAST_OBJ,
    "save_state": CKPT,
    "load_state": CKPT,
    "save_model": CKPT,
    "get_state_dict": CKPT,
    "backward": BACKWARD,
    "end_training": END,
}

#: Free functions of ``accelerate.utils`` (and ``accelerate.utils.operations``) working on the same state.
ACCELERATE_FUNCTION_OPS: Final[dict[str, str]] = {
    "wait_for_everyone": BARRIER,
    "gather": ALLGATHER,
    "pad_across_processes": ALLGATHER,
    "gather_object": ALLGATHER_OBJ,
    "reduce": ALLREDUCE,
    "broadcast": BROADCAST,
    "broadcast_object_list": BROADCAST_OBJ,
}
ACCELERATE_FUNCTION_MODULES: Final = ("accelerate.utils", "accelerate.utils.operations", "accelerate.utils.other")

#: ``torch.distributed`` primitives that are collectives (point-to-point send/recv are not counted).
TORCH_DISTRIBUTED_OPS: Final[dict[str, str]] = {
    "barrier": BARRIER,
    "monitored_barrier": BARRIER,
    "all_reduce": ALLREDUCE,
    "all_reduce_coalesced": ALLREDUCE,
    "all_gather": ALLGATHER,
    "all_gather_into_tensor": ALLGATHER,
    "all_gather_coalesced": ALLGATHER,
    "all_gather_object": ALLGATHER_OBJ,
    "reduce": "REDUCE",
    "reduce_scatter": "REDUCE_SCATTER",
    "reduce_scatter_tensor": "REDUCE_SCATTER",
    "broadcast": BROADCAST,
    "broadcast_object_list": BROADCAST_OBJ,
    "gather": "GATHER",
    "gather_object": "GATHER",
    "scatter": "SCATTER",
    "scatter_object_list": "SCATTER",
    "all_to_all": "ALLTOALL",
    "all_to_all_single": "ALLTOALL",
    "new_group": "NEW_GROUP",
    "destroy_process_group": END,
}

#: Context managers of an Accelerator that synchronise: one barrier per rank, balanced.
ACCELERATOR_SYNC_CONTEXTS: Final = frozenset({"main_process_first", "local_main_process_first", "profile"})
# Accelerator lists only the main process fills: `init_trackers` is main-only, so a loop over
# `accelerator.trackers` runs its body on the main process alone
MAIN_ONLY_COLLECTIONS: Final = frozenset({"trackers"})

#: Accelerator APIs that are gated inside Accelerate and safe to call on every rank (facts §2),
#: and other methods that are not collectives.
NOT_COLLECTIVE_METHODS: Final = frozenset({
    "print", "save", "log", "init_trackers", "get_tracker", "unwrap_model", "set_trigger",
    "skip_first_batches", "accumulate", "no_sync", "free_memory", "split_between_processes",
})

#: Decorators of an Accelerator / PartialState whose function body runs on some ranks only.
RANK_GATING_DECORATORS: Final = frozenset({
    "on_main_process", "on_local_main_process", "on_last_process", "on_process", "on_local_process",
})
