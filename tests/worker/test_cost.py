"""What makes the worker cheap keeps its output the same: the spans of non-live hooks, handed to
the SDK's exporting processors directly (worker/spans.py), are the spans ``Tracer.start_span`` +
``end`` would have exported; the token counter (and its helper process) is made before the first
compression needs it."""

from __future__ import annotations

import itertools

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from support.builtin import compressor
from support.paths import REPO

import observed_engine
from observed_engine.api import pipeline_for

USAGE = {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
SETTINGS = {"store": {"enabled": False}}


class Boom(RuntimeError):
    pass


def _run(tracer_provider, settings=SETTINGS):
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    engine = observed_engine.observe(compressor(), tracer_provider=tracer_provider,
                                     meter_provider=meter_provider, settings=settings)
    engine.on_session_start("sess-direct", model="gpt-4o")
    for i in range(5):
        engine.should_compress(1000 + i)
        engine.update_from_response(USAGE)
        engine.get_status()
    pipeline = pipeline_for(tracer_provider, meter_provider, settings)
    assert pipeline.flush(30)
    pipeline.test_engine = engine      # kept alive for the test
    return pipeline


def _provider(*extra):
    exporter = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "direct-spans-test"}))
    for processor in extra:
        tp.add_span_processor(processor)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp, exporter


def _shape(span):
    return (span.name, tuple(sorted(span.attributes.items())), span.kind, span.status.status_code,
            dict(span.resource.attributes), span.instrumentation_scope.name,
            span.instrumentation_scope.version, span.parent is None, span.context.trace_flags.sampled)


def test_direct_spans_equal_the_sdk_path():
    direct_tp, direct = _provider()
    sdk_tp, sdk = _provider(SpanProcessor())     # a processor of the caller's own: the SDK path
    direct_pipeline = _run(direct_tp)
    sdk_pipeline = _run(sdk_tp)
    assert direct_pipeline.processor._direct_spans._ready()
    assert not sdk_pipeline.processor._direct_spans._ready()

    got, want = direct.get_finished_spans(), sdk.get_finished_spans()
    assert len(got) == len(want) >= 16
    assert sorted(map(_shape, got)) == sorted(map(_shape, want))
    for span in got:
        assert span.context.is_valid and span.context.span_id and not span.context.is_remote
        assert span.start_time <= span.end_time
        assert span.attributes["gen_ai.conversation.id"] == "sess-direct" or span.name.endswith("on_session_start")
    assert len({s.context.span_id for s in got}) == len(got)
    observed_engine.shutdown(5)


def test_direct_spans_respect_the_sampler():
    exporter = InMemorySpanExporter()
    tp = TracerProvider(sampler=ALWAYS_OFF)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    pipeline = _run(tp)
    assert pipeline.processor._direct_spans._ready()
    assert exporter.get_finished_spans() == ()
    observed_engine.shutdown(5)


def test_a_processor_added_later_switches_to_the_sdk_path():
    tp, exporter = _provider()
    pipeline = _run(tp)
    assert pipeline.processor._direct_spans._ready()
    started = []

    class Started(SpanProcessor):
        def on_start(self, span, parent_context=None):
            started.append(span.name)

    tp.add_span_processor(Started())
    engine = pipeline.test_engine
    engine.should_compress(1)
    assert pipeline.flush(30)
    assert not pipeline.processor._direct_spans._ready()
    assert started and started[-1] == exporter.get_finished_spans()[-1].name
    observed_engine.shutdown(5)


def test_the_token_counter_is_made_half_way_to_the_threshold(monkeypatch):
    # its helper process then loads the encoding before the first compression needs it
    tp, _ = _provider()
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    engine = observed_engine.observe(compressor(), tracer_provider=tp, meter_provider=meter_provider,
                                     settings=SETTINGS)
    pipeline = pipeline_for(tp, meter_provider, SETTINGS)
    threshold = engine.threshold_tokens
    engine.update_from_response({"prompt_tokens": threshold // 4, "completion_tokens": 1, "total_tokens": 1})
    assert pipeline.flush(30)
    mem = pipeline.processor.memories[id(engine)]
    assert mem.tokens is None
    engine.update_from_response({"prompt_tokens": threshold // 2 + 1, "completion_tokens": 1, "total_tokens": 1})
    assert pipeline.flush(30)
    assert mem.tokens is not None and mem.tokens.method == "tiktoken:o200k_base"
    observed_engine.shutdown(5)


SPANS_PY = str(REPO / "observed_engine" / "worker" / "spans.py")


def test_no_sdk_import_for_a_tracer_that_is_not_the_sdks():
    import subprocess
    import sys

    # worker/spans.py loaded on its own: importing the package would import the pipeline's exporters
    code = (
        "import sys, importlib.util\n"
        "from opentelemetry import trace\n"
        f"spec = importlib.util.spec_from_file_location('spans_alone', {SPANS_PY!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "DirectSpans = module.DirectSpans\n"
        "d = DirectSpans(trace.get_tracer('x'))\n"
        "assert not d._ready()\n"
        "assert 'opentelemetry.sdk.trace' not in sys.modules, 'SDK imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _parents():
    """Parent contexts a hook's span can get: none, local and remote, sampled and not, with a trace state."""
    from opentelemetry import trace as trace_api
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    state = TraceState([("vendor", "value")])
    out = {"root": None}
    for remote in (False, True):
        for sampled in (False, True):
            ctx = SpanContext(0x1234, 0x5678, is_remote=remote, trace_state=state,
                              trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT))
            out[f"remote={remote},sampled={sampled}"] = trace_api.set_span_in_context(NonRecordingSpan(ctx))
    return out


def test_direct_spans_decide_sampling_as_the_sdk_samplers_do():
    """The SDK's static samplers (the default ParentBased(ALWAYS_ON) among them) are decided without a
    SamplingResult; any other sampler is asked. Either way the spans exported are the SDK's."""
    from opentelemetry.sdk.trace import sampling

    from observed_engine.worker.spans import DirectSpans

    samplers = {
        "default": None, "always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF,
        "parent_based_off": sampling.ParentBased(sampling.ALWAYS_OFF),
        "parent_based_inverted": sampling.ParentBased(sampling.ALWAYS_ON, remote_parent_sampled=sampling.ALWAYS_OFF,
                                                      local_parent_not_sampled=sampling.ALWAYS_ON),
        "ratio": sampling.TraceIdRatioBased(0.5), "parent_based_ratio": sampling.ParentBased(sampling.TraceIdRatioBased(0.5)),
    }
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class FixedTraceId(RandomIdGenerator):     # a ratio sampler decides on the trace id: make it known
        def __init__(self, trace_id):
            self.trace_id = trace_id

        def generate_trace_id(self):
            return self.trace_id

    attrs = {"hermes.context_engine.name": "e", "hermes.context_engine.hook": "should_compress", "n": 3}
    for (label, sampler), trace_id in itertools.product(samplers.items(), (1, 2 ** 128 - 1)):
        for parent_label, parent in _parents().items():
            shapes = []
            for direct in (True, False):
                exporter = InMemorySpanExporter()
                tp = TracerProvider(id_generator=FixedTraceId(trace_id), **({} if sampler is None else {"sampler": sampler}))
                tp.add_span_processor(SimpleSpanProcessor(exporter))
                tracer = tp.get_tracer("observed_engine")
                if direct:
                    spans = DirectSpans(tracer)
                    assert spans.emit("hermes.context_engine.should_compress", parent, dict(attrs), 10, 20)
                else:
                    span = tracer.start_span("hermes.context_engine.should_compress", context=parent,
                                             start_time=10, attributes=dict(attrs))
                    span.end(end_time=20)
                shapes.append([(s.name, dict(s.attributes), s.context.trace_flags, s.context.trace_state.to_header(),
                                s.context.trace_id, s.parent, s.start_time,
                                s.end_time) for s in exporter.get_finished_spans()])
            assert shapes[0] == shapes[1], (label, parent_label, trace_id)


def test_direct_spans_take_each_spans_own_parent_when_parents_alternate():
    """The parent of the last span is kept for the next one with the very same context object: the
    parents must still be each span's own when contexts alternate."""
    from observed_engine.worker.spans import DirectSpans

    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    spans = DirectSpans(tp.get_tracer("observed_engine"))
    parents = _parents()
    order = ["root", "remote=False,sampled=True", "remote=False,sampled=True", "root", "remote=True,sampled=True",
             "root", "root", "remote=False,sampled=True"]
    empty = __import__("opentelemetry").context.get_current()
    for label in order:
        assert spans.emit("x", parents[label] if parents[label] is not None else empty, {"k": label}, 1, 2)
    got = exporter.get_finished_spans()
    assert [s.attributes["k"] for s in got] == order
    for span in got:
        if span.attributes["k"] == "root":
            assert span.parent is None
        else:
            assert span.parent is not None and span.parent.span_id == 0x5678
            assert span.parent.is_remote == (span.attributes["k"].startswith("remote=True"))


def test_fast_span_constructors_build_what_the_constructors_build():
    """worker/spans.py makes SpanContext and ReadableSpan without their Python constructors, after a
    probe shows the result is the same; the objects are the ones the constructors make."""
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk import trace as sdk_trace

    from observed_engine.worker import spans as worker_spans

    make_context = worker_spans._fast_span_context()
    make_span = worker_spans._fast_readable_span(sdk_trace)
    assert make_context is not None and make_span is not None
    for flags, state in ((trace_api.TraceFlags(1), trace_api.TraceState([("a", "b")])), (None, None)):
        fast = make_context(0xABC, 0xDEF, flags, state)
        official = trace_api.SpanContext(0xABC, 0xDEF, False, flags, state)
        assert type(fast) is type(official) and tuple(fast) == tuple(official) and fast == official
    tp = TracerProvider()
    tracer = tp.get_tracer("observed_engine", "1.0")
    context = make_context(5, 6, trace_api.TraceFlags(1), None)
    args = dict(name="n", context=context, parent=None, resource=tp.resource, attributes={"k": 1},
                instrumentation_info=tracer.instrumentation_info, start_time=10, end_time=20,
                instrumentation_scope=tracer._instrumentation_scope)
    fast = make_span(args["name"], context, None, tp.resource, args["attributes"], args["instrumentation_info"],
                     10, 20, args["instrumentation_scope"])
    official = sdk_trace.ReadableSpan(kind=trace_api.SpanKind.INTERNAL, **args)
    assert type(fast) is sdk_trace.ReadableSpan and vars(fast) == vars(official)
    assert fast.to_json() == official.to_json()


def test_fast_span_constructors_step_aside_for_an_sdk_that_does_more():
    """An SDK whose ReadableSpan.__init__ derives a field, or whose SpanContext is not the tuple the
    probe expects, gets its constructors called (the probe returns None)."""
    import types

    from opentelemetry.sdk import trace as sdk_trace

    from observed_engine.worker import spans as worker_spans

    class Deriving(sdk_trace.ReadableSpan):
        def __init__(self, name, **kwargs):
            super().__init__(name, **kwargs)
            self._derived = len(str(name))

    assert worker_spans._fast_readable_span(types.SimpleNamespace(ReadableSpan=Deriving)) is None

    class Slotted:
        __slots__ = ("_name",)

        def __init__(self, name, **kwargs):
            self._name = name

    assert worker_spans._fast_readable_span(types.SimpleNamespace(ReadableSpan=Slotted)) is None


def test_a_queued_direct_span_is_two_objects_for_the_garbage_collector():
    """A span waiting in a batch processor's queue is what full collections walk (issue 16: they were
    a fifth of the worker's CPU per event under load). A direct span is its ReadableSpan and its
    SpanContext: its fields kept in the object as the SDK's own spans keep them, not in a dict of
    its own, and its attributes without a read-only view wrapped around them (ReadableSpan.attributes
    makes that view). It was four objects: the span, its dict, the view and the context."""
    import gc

    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from observed_engine.worker.spans import DirectSpans

    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    processor = BatchSpanProcessor(exporter, max_queue_size=10_000, max_export_batch_size=10_000,
                                   schedule_delay_millis=3_600_000)
    tp.add_span_processor(processor)
    spans = DirectSpans(tp.get_tracer("observed_engine"))
    empty = __import__("opentelemetry").context.get_current()
    n = 1000
    attributes = [{"hermes.context_engine.name": "e", "n": i} for i in range(n)]
    assert spans.emit("warm-up", empty, {"n": -1}, 1, 2)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        before = len(gc.get_objects())
        for attrs in attributes:
            assert spans.emit("hermes.context_engine.should_compress", empty, attrs, 10, 20)
        per_span = (len(gc.get_objects()) - before) / n
    finally:
        if was:
            gc.enable()
    assert per_span <= 2.01, per_span
    processor.force_flush()
    got = exporter.get_finished_spans()
    assert len(got) == n + 1 and dict(got[-1].attributes) == attributes[-1]
    assert got[-1].dropped_attributes == 0 and got[-1].to_json()
    tp.shutdown()
