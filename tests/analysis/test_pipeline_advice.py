"""Advice from the pipeline XProf read: the iterators below are those of real captures (the
demo's `pipeline` workloads and others of their kind, TF 2.21), self times in ms."""

from __future__ import annotations

from profiler_service.analysis.models import InputIterator, InputPipeline
from profiler_service.analysis.pipeline_advice import GENERIC_ADVICE, advise, expensive_stage
from profiler_service.analysis.readers.input_pipeline import add_iterator_stats


def pipeline(*iterators: tuple, python: bool = False) -> InputPipeline:
    return InputPipeline(
        python_in_pipeline=python,
        iterators=[
            InputIterator(path=path, self_time_ms=ms, parallelism=par, autotune=auto)
            for path, ms, par, auto in iterators
        ],
    )


# `.map(decode_and_augment).batch(32)`: tf.data fused them, one element at a time.
SEQUENTIAL = (
    ("Iterator::Root::MapAndBatch", 1637.4, 1, False),
    ("Iterator::Root::MapAndBatch::Range", 4.8, None, None),
    ("Iterator::Root", 1.8, None, None),
)
# `.map(..., num_parallel_calls=AUTOTUNE).batch(32).prefetch(AUTOTUNE)`.
TUNED = (
    ("Iterator::Root::Prefetch::MapAndBatch", 1924.5, 2, True),
    ("Iterator::Root::Prefetch", 1537.4, None, True),
    ("Iterator::Root::Prefetch::MapAndBatch::Range", 7.4, None, None),
    ("Iterator::Root", 1.6, None, None),
)
# An expensive parallel decode, then a random augmentation fused with batch, then prefetch.
DECODE_THEN_AUGMENT = (
    ("Iterator::Root::Prefetch::MapAndBatch", 1943.0, 1, False),
    ("Iterator::Root::Prefetch", 1598.5, None, True),
    ("Iterator::Root::Prefetch::MapAndBatch::ParallelMapV2", 774.9, 2, True),
    ("Iterator::Root::Prefetch::MapAndBatch::ParallelMapV2::Range", 6.2, None, None),
    ("Iterator::Root", 1.2, None, None),
)
# interleave(lambda: ... .map(heavy)).batch(32).repeat().map(label): a sequential interleave
# of sequential maps, no prefetch.
INTERLEAVE = (
    ("Iterator::Root::ParallelMapV2", 1895.5, None, True),
    ("Iterator::Root::ParallelMapV2::ForeverRepeat::BatchV2::Interleave::Map", 1992.7, None, None),
    ("Iterator::Root::ParallelMapV2::ForeverRepeat::BatchV2", 2.3, None, None),
    ("Iterator::Root::ParallelMapV2::ForeverRepeat::BatchV2::Interleave", 1.7, None, None),
    ("Iterator::Root", 0.5, None, None),
)
# decode -> cache -> augment -> batch -> prefetch -> a label map after the prefetch.
CACHED = (
    ("Iterator::Root::ParallelMapV2::Prefetch", 1002.1, None, True),
    ("Iterator::Root::ParallelMapV2", 587.8, None, True),
    ("Iterator::Root::ParallelMapV2::Prefetch::BatchV2::ForeverRepeat::Map", 900.0, None, None),
    (
        "Iterator::Root::ParallelMapV2::Prefetch::BatchV2::ForeverRepeat::Map::MemoryCacheImpl"
        "::ParallelMapV2",
        75.0,
        2,
        True,
    ),
    (
        "Iterator::Root::ParallelMapV2::Prefetch::BatchV2::ForeverRepeat::Map::MemoryCache",
        1.0,
        None,
        None,
    ),
)


def test_a_sequential_map_without_prefetch_lacks_both():
    advice = advise(pipeline(*SEQUENTIAL))
    assert advice.expensive_stage == "Iterator::Root::MapAndBatch"
    assert (advice.lacks_codes, advice.has_codes) == (["parallel_calls", "prefetch"], [])
    assert "one element at a time" in advice.lacks[0] and "num_parallel_calls" in advice.lacks[0]
    assert "end the pipeline with `.prefetch" in advice.lacks[1]
    assert not advice.generic


def test_a_tuned_pipeline_is_told_what_it_has_and_only_the_last_resort():
    advice = advise(pipeline(*TUNED))
    assert advice.expensive_stage == "Iterator::Root::Prefetch::MapAndBatch"
    assert advice.has == [
        "the slowest stage, your `.map()` + `.batch()` (XProf: `MapAndBatch`), runs in parallel "
        "(autotuned, 2 at a time)",
        "it ends with `prefetch`",
    ]
    assert (advice.lacks_codes, advice.has_codes) == (
        ["cheaper_stage"],
        ["parallel_calls", "prefetch"],
    )
    [lack] = advice.lacks
    assert "is parallel and still too slow" in lack and "prefetch" not in lack


def test_the_expensive_stage_is_the_furthest_upstream_of_the_large_self_times():
    """The sequential augmentation's MapAndBatch waits on the decode: its self time is the
    largest, but the decode upstream is where the work is."""
    stage = expensive_stage(pipeline(*DECODE_THEN_AUGMENT).iterators)
    assert stage.path.endswith("MapAndBatch::ParallelMapV2")
    advice = advise(pipeline(*DECODE_THEN_AUGMENT))
    assert (
        "`.cache()` it: right after it, before the later `.map()` + `.batch()` (XProf: "
        "`MapAndBatch`)" in advice.lacks[0]
    )
    assert "it ends with `prefetch`" in advice.has


def test_a_sequential_interleave_and_a_prefetch_nowhere():
    advice = advise(pipeline(*INTERLEAVE))
    assert advice.expensive_stage.endswith("Interleave::Map")
    assert "runs its map one element at a time" in advice.lacks[0]
    assert any("end the pipeline with `.prefetch" in lack for lack in advice.lacks)
    # A later map exists (here the label map): caching before it is offered, on condition.
    assert any(
        "if the output of the slowest stage, your `.map()` (XProf: `Map`), is the same every epoch"
        in lack
        and "before the later `.map()` (XProf: `ParallelMapV2`)" in lack
        for lack in advice.lacks
    )


def test_a_cached_pipeline_is_not_told_to_cache_and_a_late_prefetch_is_named():
    advice = advise(pipeline(*CACHED))
    assert "it caches (`MemoryCacheImpl`)" in advice.has or "it caches (`MemoryCache`)" in (
        advice.has
    )
    assert not any(".cache()" in lack for lack in advice.lacks)
    assert any(
        "`prefetch` is not the last step (`.map()` (XProf: `ParallelMapV2`) runs after it" in x
        for x in advice.lacks
    )


def test_python_first_only_when_it_is_there():
    with_python = advise(pipeline(*SEQUENTIAL, python=True))
    assert with_python.lacks[0].startswith("move the Python in the pipeline")
    assert not any("Python" in lack for lack in advise(pipeline(*SEQUENTIAL)).lacks)


def test_without_iterators_the_usual_list_said_as_such():
    advice = advise(InputPipeline())
    assert advice.generic and advice.expensive_stage is None
    assert advice.lacks == list(GENERIC_ADVICE)


def test_iterator_events_add_parallelism_autotune_and_the_datasets_built():
    p = pipeline(("Iterator::Root::MapAndBatch", 10.0, None, None))
    add_iterator_stats(
        p,
        {
            "Iterator::Root::MapAndBatch": {
                "parallelism": 1,
                "autotune": "false",
                "name": "fused(MapDataset:1,BatchDatasetV2:2)",
            }
        },
    )
    [it] = p.iterators
    assert (it.parallelism, it.autotune, it.datasets) == (
        1,
        False,
        "fused(MapDataset:1,BatchDatasetV2:2)",
    )


def test_a_map_written_sequential_that_tf_data_parallelised_is_said_so():
    """A deterministic `.map(fn)` without `num_parallel_calls`: tf.data's own rewrite made it
    parallel (measured: `fused(MapDataset:1,BatchDatasetV2:2)`, autotuned, 2 at a time)."""
    p = pipeline(*TUNED)
    p.iterators[0].datasets = "fused(MapDataset:1,BatchDatasetV2:2)"
    advice = advise(p)
    assert advice.has_codes == ["parallel_calls", "prefetch"]
    assert (
        "written without `num_parallel_calls`, but tf.data already runs it in parallel"
        in (advice.has[0])
    )
    p.iterators[0].datasets = "fused(ParallelMapDatasetV2:1,BatchDatasetV2:2)"
    assert "written without" not in advise(p).has[0]


def test_tf_data_s_own_wrappers_are_never_the_stage_to_optimise():
    """Older TF versions root the pipeline at `Iterator::Model` (tf.data's autotuning wrapper);
    on a real RTX 2060 capture (tests/fixtures/gpu-captures, TF 2.5) it had the largest self
    time, and the advice once said `Model` needed to be cheaper."""
    iterators = [
        InputIterator(path="Iterator::Model", self_time_ms=40.0),
        InputIterator(path="Iterator::Model::MaxIntraOpParallelism", self_time_ms=39.0),
        InputIterator(path="Iterator::Model::ParallelMapV2", self_time_ms=3.0),
        InputIterator(path="Iterator::Model::ParallelMapV2::Zip", self_time_ms=2.5),
    ]
    stage = expensive_stage(iterators)
    assert stage is not None and stage.path == "Iterator::Model::ParallelMapV2::Zip"
    text = " ".join(advise(InputPipeline(iterators=iterators)).lacks)
    assert "`Model`" not in text and "MaxIntraOpParallelism" not in text
    only_wrappers = [InputIterator(path="Iterator::Model", self_time_ms=40.0)]
    assert expensive_stage(only_wrappers) is None


def test_stages_are_named_as_the_user_built_them():
    """The iterator events' dataset names (`fused(MapDataset:2,BatchDatasetV2:3)`) become the
    `Dataset` methods that built them; XProf's name stays beside them for its own pages."""
    from profiler_service.analysis.models import InputIterator
    from profiler_service.analysis.pipeline_advice import _label

    def named(path: str, datasets: str = "") -> str:
        return _label(InputIterator(path=path, datasets=datasets, self_time_ms=1, count=1))

    fused = named("Iterator::Root::MapAndBatch", "fused(MapDataset:2,BatchDatasetV2:3)")
    assert fused == ("your `.map()` + `.batch()` (tf.data runs them fused; XProf: `MapAndBatch`)")
    assert named("Iterator::Root::ParallelMapV2", "ParallelMapDatasetV2:1") == (
        "your `.map()` (XProf: `ParallelMapV2`)"
    )
    assert named("Iterator::Root::Concatenate") == "your `.concatenate()` (XProf: `Concatenate`)"
    assert named("Iterator::Root::SomethingNew") == "`SomethingNew`"
    assert "Dataset:" not in fused and "fused(" not in fused
