"""Spans the worker opens and closes at once, built as the exporters see them.

``start_span`` + ``end`` is most of the worker's CPU per event; :class:`DirectSpans` asks the
sampler and id generator as ``start_span`` does and hands the processors a ``ReadableSpan``
directly. When editing: only when the tracer is the SDK's own and every processor is one of its
exporting ones; otherwise ``emit`` returns False and the worker uses ``start_span``.

The full account: docs/design/internals.md, *observed_engine/worker/spans.py*.
"""

from __future__ import annotations

import itertools
from typing import Any, Dict, Optional

from opentelemetry import trace as trace_api

_PLAIN = (str, bool, int, float)
_INTERNAL = trace_api.SpanKind.INTERNAL
_SpanContext = trace_api.SpanContext
_SAMPLED, _DEFAULT = trace_api.TraceFlags.SAMPLED, trace_api.TraceFlags.DEFAULT
_RANDOM_TRACE_ID = getattr(trace_api.TraceFlags, "RANDOM_TRACE_ID", 0)
_TRACE_FLAGS: Dict[int, Any] = {}    # TraceFlags by value (immutable ints): one made per value


def _fast_span_context() -> Optional[Any]:
    """``make(trace_id, span_id, trace_flags, trace_state)`` -> a local SpanContext as its ``__new__``
    makes one (a tuple of the six fields, ``is_valid`` computed the same way), without the call into
    it; None when a probe built both ways differs (another API version: the constructor is used)."""
    new, valid_trace, valid_span = tuple.__new__, trace_api.INVALID_TRACE_ID, trace_api.INVALID_SPAN_ID
    max_trace, max_span = (1 << 128) - 1, (1 << 64) - 1
    default_flags, default_state = trace_api.DEFAULT_TRACE_OPTIONS, trace_api.DEFAULT_TRACE_STATE

    def make(trace_id, span_id, trace_flags, trace_state):
        return new(_SpanContext, (trace_id, span_id, False,
                                  default_flags if trace_flags is None else trace_flags,
                                  default_state if trace_state is None else trace_state,
                                  valid_trace < trace_id <= max_trace and valid_span < span_id <= max_span))

    try:
        cases = itertools.product(
            ((0x1F2E3D4C5B6A79880123456789ABCDEF, 0x0A0B0C0D0E0F1011), (0, 5), (7, 0), (1 << 128, 1)),
            (trace_api.TraceFlags(1), None), (trace_api.TraceState([("k", "v")]), None))
        for (trace_id, span_id), flags, state in cases:
            fast, official = make(trace_id, span_id, flags, state), _SpanContext(trace_id, span_id, False, flags, state)
            if type(fast) is not type(official) or tuple(fast) != tuple(official) or fast.is_valid != official.is_valid:
                return None
    except Exception:  # probe: an API version these probes break: None, the constructor is used
        return None
    return make


def _fast_readable_span(sdk_trace) -> Optional[Any]:
    """``make(name, context, parent, resource, attributes, info, start, end, scope)`` -> an INTERNAL
    ``ReadableSpan`` holding what its ``__init__`` stores (the defaults copied from a probe span), made
    without the keyword-argument call; None when the probe shows ``__init__`` does more than store what
    it is given (another SDK version: the constructor is used).

    ``make`` stores the fields one by one, in ``__init__``'s order, as ``__init__`` does: the instance
    keeps its fields in the object itself, as the SDK's own spans do, where assigning a ``__dict__``
    would give every span a dict object of its own too, one more object for the garbage collector to
    track while the span waits in a batch processor's queue."""
    readable, new = sdk_trace.ReadableSpan, object.__new__
    given = ("_name", "_context", "_parent", "_resource", "_attributes", "_instrumentation_info",
             "_start_time", "_end_time", "_instrumentation_scope")
    params = ("name", "context", "parent", "resource", "attributes", "info", "start", "end", "scope")
    try:
        probes = []
        for name, attributes, start, end in (("probe", {"a": 1}, 1, 2), ("a much longer probe name", {}, 50, 900)):
            values = [name, object(), object(), object(), attributes, object(), start, end, object()]
            probe = readable(values[0], context=values[1], parent=values[2], resource=values[3],
                             attributes=values[4], kind=_INTERNAL, instrumentation_info=values[5],
                             start_time=values[6], end_time=values[7], instrumentation_scope=values[8])
            stored = vars(probe)
            if type(stored) is not dict or any(stored.get(k) is not v for k, v in zip(given, values)):
                return None
            probes.append((stored, values))
        # what __init__ stores besides the given values: the same default objects whatever it is given
        template = {k: v for k, v in probes[0][0].items() if k not in given}
        other = {k: v for k, v in probes[1][0].items() if k not in given}
        if template.keys() != other.keys() or any(other[k] is not v for k, v in template.items()) \
                or template.get("_kind") is not _INTERNAL:
            return None
        order = list(probes[0][0])
        if order != list(probes[1][0]) or not all(type(k) is str and k.isidentifier() for k in order):
            return None
        by_field = dict(zip(given, params))
        namespace: Dict[str, Any] = {"_new": new, "_readable": readable}
        lines = ["def make(" + ", ".join(params) + "):", "    span = _new(_readable)"]
        for i, key in enumerate(order):
            if key in by_field:
                lines.append(f"    span.{key} = {by_field[key]}")
            else:
                namespace[f"_default_{i}"] = template[key]
                lines.append(f"    span.{key} = _default_{i}")
        lines.append("    return span")
        exec("\n".join(lines), namespace)    # noqa: S102 (our own source, field names checked above)
        make = namespace["make"]
        for stored, values in probes:
            fast = make(*values)
            if type(fast) is not readable or vars(fast) != stored or list(vars(fast)) != list(stored):
                return None
    except Exception:  # probe: an SDK version these probes break: None, its constructor is used
        return None
    return make


class DirectSpans:
    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self._usable = False
        self._checked_processors: Optional[tuple] = None
        self._synchronous = False
        self._last_parent_context: Any = None
        self._last_parent: Any = None
        self._sdk = None
        if not type(tracer).__module__.startswith("opentelemetry.sdk."):
            return                      # not the SDK's tracer (and the SDK is not imported for it)
        try:
            from opentelemetry.sdk import trace as sdk_trace
            from opentelemetry.sdk.trace import export as sdk_export
            from opentelemetry.sdk.trace import sampling
            from opentelemetry.sdk.trace._tracer_metrics import NoOpTracerMetrics
        except Exception:  # pragma: no cover - an SDK without these names: the SDK path
            return
        if type(tracer) is not sdk_trace.Tracer:
            return
        self._sdk = sdk_trace
        self._make_context = _fast_span_context()
        self._make_span = _fast_readable_span(sdk_trace)
        self._last_decision: Any = None
        self._last_decision_flags = (False, False)
        self._exporting = (sdk_export.BatchSpanProcessor, sdk_export.SimpleSpanProcessor)
        self._noop_metrics = NoOpTracerMetrics
        self._static_sampler, self._parent_based = sampling.StaticSampler, sampling.ParentBased
        self._usable = True

    def _static_decision(self, sampler, parent):
        """The decision of the SDK's static samplers (ALWAYS_ON, ALWAYS_OFF, and ParentBased over them,
        the default) for ``parent`` (a valid span context or None), as their ``should_sample`` makes
        it; None for any other sampler (which is then asked)."""
        kind = type(sampler)
        if kind is self._parent_based:
            if parent is None:
                sampler = sampler._root
            elif parent.is_remote:
                sampler = sampler._remote_parent_sampled if parent.trace_flags.sampled \
                    else sampler._remote_parent_not_sampled
            else:
                sampler = sampler._local_parent_sampled if parent.trace_flags.sampled \
                    else sampler._local_parent_not_sampled
            kind = type(sampler)
        return sampler._decision if kind is self._static_sampler else None

    def _ready(self) -> bool:
        """The conditions above, re-checked cheaply: processors may be added to a provider later."""
        if not self._usable:
            return False
        tracer = self._tracer
        multi = getattr(tracer, "span_processor", None)
        processors = getattr(multi, "_span_processors", None)
        if processors is None:
            return False
        if processors is not self._checked_processors:
            ok = type(multi) in (self._sdk.SynchronousMultiSpanProcessor, self._sdk.ConcurrentMultiSpanProcessor) \
                and all(isinstance(p, self._exporting) for p in processors)
            self._checked_processors = processors if ok else None
            if not ok:
                return False
            self._synchronous = type(multi) is self._sdk.SynchronousMultiSpanProcessor
        return isinstance(getattr(tracer, "_tracer_metrics", None), self._noop_metrics) and tracer._is_enabled()

    def emit(self, name: str, parent_context, attributes: Dict[str, Any], start_ns: int, end_ns: int) -> bool:
        """Hand the processors the finished span; False when the worker must use ``start_span``."""
        if not self._ready():
            return False
        for value in attributes.values():
            if type(value) not in _PLAIN:
                return False            # let the SDK check and convert anything else
        tracer = self._tracer
        if parent_context is self._last_parent_context and parent_context is not None:
            parent = self._last_parent        # contexts are immutable: the host's empty one, mostly
        else:
            parent = trace_api.get_current_span(parent_context).get_span_context()
            if parent is None or not parent.is_valid:
                parent = None
            self._last_parent_context, self._last_parent = parent_context, parent
        if parent is None:
            trace_id = tracer.id_generator.generate_trace_id()
            random_trace_id = tracer.id_generator.is_trace_id_random()
        else:
            trace_id = parent.trace_id
            random_trace_id = parent.trace_flags.random_trace_id
        kind = _INTERNAL
        decision = self._static_decision(tracer.sampler, parent)
        if decision is None:
            sampling = tracer.sampler.should_sample(parent_context, trace_id, name, kind, attributes, ())
            decision, span_attributes, trace_state = sampling.decision, sampling.attributes, sampling.trace_state
        else:          # these samplers' SamplingResult: the given attributes (a read-only view), the parent's state
            span_attributes = attributes    # the view is the span's: ReadableSpan.attributes makes it
            trace_state = parent.trace_state if parent is not None else None
        if decision is self._last_decision:     # the decision's own answers, asked once per decision
            recording, sampled = self._last_decision_flags
        else:
            recording, sampled = decision.is_recording(), decision.is_sampled()
            self._last_decision, self._last_decision_flags = decision, (recording, sampled)
        if not recording:
            return True                 # what start_span gives: a non-recording span, nothing exported
        # as start_span: the span's attributes are the sampler's (the given ones, for the SDK's samplers)
        flags = _SAMPLED if sampled else _DEFAULT
        if random_trace_id:
            flags |= _RANDOM_TRACE_ID
        trace_flags = _TRACE_FLAGS.get(flags)
        if trace_flags is None:
            trace_flags = _TRACE_FLAGS[flags] = trace_api.TraceFlags(flags)
        span_id = tracer.id_generator.generate_span_id()
        if self._make_context is not None:
            context = self._make_context(trace_id, span_id, trace_flags, trace_state)
        else:
            context = _SpanContext(trace_id, span_id, False, trace_flags, trace_state)
        if self._make_span is not None:
            span = self._make_span(name, context, parent, tracer.resource, span_attributes,
                                   tracer.instrumentation_info, start_ns, end_ns, tracer._instrumentation_scope)
        else:
            span = self._sdk.ReadableSpan(
                name=name, context=context, parent=parent, resource=tracer.resource, attributes=span_attributes,
                kind=kind, instrumentation_info=tracer.instrumentation_info, start_time=start_ns,
                end_time=end_ns, instrumentation_scope=tracer._instrumentation_scope,
            )
        if self._synchronous:
            for processor in self._checked_processors:   # what SynchronousMultiSpanProcessor.on_end does
                processor.on_end(span)
        else:
            tracer.span_processor.on_end(span)
        return True
