"""Advice that fits the tf.data pipeline XProf read: what it lacks, and what it already has.

XProf's input pipeline analyzer names each iterator by its path from the root, after tf.data's
own rewrites (`map` + `batch` become `MapAndBatch`; a deterministic `map` may be made parallel):
`Iterator::Root::Prefetch::MapAndBatch::Range`. The path says whether the pipeline ends with
`Prefetch`, which maps run in parallel (`ParallelMapV2`) or not (`Map`), and where a cache sits;
the capture's iterator events add the parallelism a `MapAndBatch` name hides (input_pipeline.py).

The self time of an asynchronous iterator (prefetch, parallel map) is mostly waiting for its
input, so the iterator nearest the root always looks slowest. The expensive stage is taken as
the one furthest from the root whose self time is still a large part of the largest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from profiler_service.analysis.models import InputIterator, InputPipeline

# An iterator with at least this share of the largest self time is a candidate for the
# expensive stage; the one furthest upstream wins. On our jobs the expensive parallel decode
# sat at 40-51 % of the largest self time (its consumer's waiting), the cheap stages under 1 %.
EXPENSIVE_STAGE_MIN_SHARE_OF_MAX = 0.25

MAP_KINDS = ("Map", "ParallelMap", "ParallelMapV2", "MapAndBatch")
PARALLEL_KINDS = (
    "ParallelMap",
    "ParallelMapV2",
    "MapAndBatch",
    "ParallelInterleave",
    "ParallelInterleaveV2",
    "ParallelInterleaveV3",
    "ParallelInterleaveV4",
    "ParallelBatch",
)
# A `.map()` written without `num_parallel_calls` (the dataset the job built, before tf.data's
# rewrites), as the iterator events name it: `MapDataset:1`, `fused(MapDataset:1,Batch...)`.
_WRITTEN_SEQUENTIAL = re.compile(r"(?<!Parallel)MapDataset:")
FILE_SOURCES = ("TFRecord", "TextLine", "FixedLengthRecord", "SSTable", "ArrayRecord")

GENERIC_CODES = ("parallel_calls", "prefetch", "cache", "parallel_reads")
GENERIC_ADVICE = (
    "parallelise the map: `.map(fn, num_parallel_calls=tf.data.AUTOTUNE)`",
    "overlap input with training: end the pipeline with `.prefetch(tf.data.AUTOTUNE)`",
    "`.cache()` what does not change between epochs (after decoding, before augmentation)",
    "store records as TFRecord and read them with `interleave(..., num_parallel_calls=...)`",
)


def kind(iterator: InputIterator) -> str:
    """`Iterator::Root::Prefetch::MapAndBatch` -> `MapAndBatch`."""
    return iterator.path.rsplit("::", 1)[-1]


def depth(iterator: InputIterator) -> int:
    return iterator.path.count("::")


def sequential(iterator: InputIterator) -> bool:
    """A map or interleave that handles one element at a time."""
    k = kind(iterator)
    if k in ("Map", "Interleave"):
        return True
    return k in PARALLEL_KINDS and iterator.parallelism == 1


# Iterators tf.data puts around the user's pipeline, never a stage to optimise: the root, the
# autotuning model (`Iterator::Model`, the root of older TF versions' paths) and the options'
# threading wrappers.
WRAPPERS = frozenset({"Root", "Model", "MaxIntraOpParallelism", "PrivateThreadPool"})


def expensive_stage(iterators: list[InputIterator]) -> InputIterator | None:
    stages = [i for i in iterators if kind(i) not in WRAPPERS and i.self_time_ms > 0]
    if not stages:
        return None
    largest = max(i.self_time_ms for i in stages)
    candidates = [i for i in stages if i.self_time_ms >= EXPENSIVE_STAGE_MIN_SHARE_OF_MAX * largest]
    return max(candidates, key=lambda i: (depth(i), i.self_time_ms))


# The method of `tf.data.Dataset` that builds each dataset op (the iterator events' `MapDataset:2`,
# XProf's `Map`), so the advice speaks of the user's code, not of tf.data's internals.
_METHODS = {
    "Map": ".map()", "ParallelMap": ".map()", "MapAndBatch": ".map()` + `.batch()",
    "Batch": ".batch()", "ParallelBatch": ".batch()", "PaddedBatch": ".padded_batch()",
    "Interleave": ".interleave()", "ParallelInterleave": ".interleave()",
    "FlatMap": ".flat_map()", "Filter": ".filter()", "Shuffle": ".shuffle()",
    "Cache": ".cache()", "MemoryCache": ".cache()", "Prefetch": ".prefetch()",
    "Repeat": ".repeat()", "Take": ".take()", "Skip": ".skip()", "Shard": ".shard()",
    "Unbatch": ".unbatch()", "Window": ".window()", "Scan": ".scan()", "Zip": "zip()",
    "Concatenate": ".concatenate()", "Range": "range()", "TensorSlice": "from_tensor_slices()",
    "Generator": "from_generator()", "FromGenerator": "from_generator()",
    "TFRecord": "TFRecordDataset", "TextLine": "TextLineDataset",
    "FixedLengthRecord": "FixedLengthRecordDataset",
}  # fmt: skip
_DATASET = re.compile(r"(?P<name>[A-Za-z]+?)Dataset(?:V\d+)?:\d+")
_VERSION = re.compile(r"V\d+$")


def _method(name: str) -> str | None:
    return _METHODS.get(_VERSION.sub("", name))


def _label(iterator: InputIterator, whose: str = "your ") -> str:
    """The stage as the user wrote it, XProf's name beside it: "your `.map()` + `.batch()`
    (tf.data runs them fused; XProf: `MapAndBatch`)"; XProf's alone where no method is known."""
    k = kind(iterator)
    built = [m for m in (_method(d) for d in _DATASET.findall(iterator.datasets)) if m]
    methods = list(dict.fromkeys(built)) or [m for m in [_method(k)] if m]
    if not methods:
        return f"`{k}`"
    fused = "tf.data runs them fused; " if len(methods) > 1 else ""
    return f"{whose}`{'` + `'.join(methods)}` ({fused}XProf: `{k}`)"


@dataclass
class PipelineAdvice:
    """What to change (the most useful first), what is already there, and the reading."""

    lacks: list[str] = field(default_factory=list)  # sentences, the most useful first
    has: list[str] = field(default_factory=list)
    lacks_codes: list[str] = field(default_factory=list)  # the same, short, for the evidence
    has_codes: list[str] = field(default_factory=list)
    expensive_stage: str | None = None
    generic: bool = False  # no iterators were named: the usual remedies, said as such

    def need(self, code: str, sentence: str) -> None:
        self.lacks_codes.append(code)
        self.lacks.append(sentence)

    def got(self, code: str, sentence: str) -> None:
        self.has_codes.append(code)
        self.has.append(sentence)

    @property
    def evidence(self) -> dict:
        return {
            "expensive_stage": self.expensive_stage,
            "pipeline_lacks": self.lacks_codes,
            "pipeline_has": self.has_codes,
            "generic_advice": self.generic,
        }


def advise(pipeline: InputPipeline) -> PipelineAdvice:
    advice = PipelineAdvice()
    python = (
        "move the Python in the pipeline (tf.py_function / tf.numpy_function) into TensorFlow "
        "ops: Python holds the GIL while it runs, so a parallel map speeds it up only as far as "
        "it waits or calls code that lets the GIL go (NumPy on large arrays, I/O)"
    )
    iterators = pipeline.iterators
    stage = expensive_stage(iterators)
    if stage is None:
        advice.generic = True
        if pipeline.python_in_pipeline:
            advice.need("python", python)
        for code, sentence in zip(GENERIC_CODES, GENERIC_ADVICE, strict=True):
            advice.need(code, sentence)
        return advice
    advice.expensive_stage = stage.path
    if pipeline.python_in_pipeline:
        advice.need("python", python)
    k = kind(stage)
    last_resort = (
        f"the slowest stage, {_label(stage)}, needs to be cheaper: simplify its work or "
        "preprocess offline"
    )
    if k in MAP_KINDS or k == "Interleave" or k.startswith("ParallelInterleave"):
        if sequential(stage):
            verb = "interleave" if "Interleave" in k else "map"
            advice.need(
                "parallel_calls",
                f"the slowest stage, {_label(stage)}, runs its {verb} one element at a time: "
                f"give that `.{verb}()` `num_parallel_calls=tf.data.AUTOTUNE`",
            )
        else:
            how = "autotuned" if stage.autotune else "fixed"
            width = f" ({how}, {stage.parallelism} at a time)" if stage.parallelism else ""
            if _WRITTEN_SEQUENTIAL.search(stage.datasets):
                advice.got(
                    "parallel_calls",
                    f"the slowest stage's `.map()` was written without `num_parallel_calls`, "
                    f"but tf.data already runs it in parallel{width}: setting it yourself "
                    "changes nothing here",
                )
            else:
                advice.got(
                    "parallel_calls", f"the slowest stage, {_label(stage)}, runs in parallel{width}"
                )
            last_resort = (
                f"the slowest stage, {_label(stage)}, is parallel and still too slow: make its "
                "function cheaper, preprocess offline, or give the input more CPU cores "
                "(tf.data service)"
            )
    elif k.startswith(FILE_SOURCES):
        advice.need(
            "parallel_reads",
            f"the slowest stage reads files ({_label(stage)}): read several at once with "
            "`interleave(..., num_parallel_calls=tf.data.AUTOTUNE)` and larger read buffers",
        )
    kinds_by_depth = sorted(iterators, key=depth)
    prefetches = [i for i in kinds_by_depth if kind(i) == "Prefetch"]
    top = next((i for i in kinds_by_depth if kind(i) not in WRAPPERS), None)
    if not prefetches:
        advice.need(
            "prefetch",
            "nothing overlaps input with training: end the pipeline with "
            "`.prefetch(tf.data.AUTOTUNE)`",
        )
    elif top is not None and kind(top) != "Prefetch":
        advice.need(
            "prefetch_last",
            f"`prefetch` is not the last step ({_label(top, whose='')} runs after it, on the "
            "training thread): move `.prefetch(tf.data.AUTOTUNE)` to the end",
        )
    else:
        advice.got("prefetch", "it ends with `prefetch`")
    caches = [i for i in iterators if "Cache" in kind(i)]
    later_maps = [
        i
        for i in iterators
        if kind(i) in MAP_KINDS and depth(i) < depth(stage) and stage.path.startswith(i.path)
    ]
    if caches:
        advice.got("cache", f"it caches (`{kind(caches[0])}`)")
    elif later_maps and k in MAP_KINDS:
        advice.need(
            "cache",
            f"if the output of the slowest stage, {_label(stage)}, is the same every epoch, "
            f"`.cache()` it: right after it, before the later "
            f"{_label(max(later_maps, key=depth), whose='')}, so any random augmentation stays "
            "after the cache",
        )
    if not advice.lacks or not sequential(stage):
        advice.need("cheaper_stage", last_resort)
    return advice
