"""A small OTLP receiver for tests: gRPC and HTTP/protobuf on 127.0.0.1.

Built on ``opentelemetry-proto`` (the same messages a Collector decodes):

- gRPC: ``TraceService/Export`` and ``MetricsService/Export`` servicers on a grpcio server;
- HTTP/protobuf: ``POST /v1/traces`` and ``POST /v1/metrics`` on an ``http.server``
  (``Content-Encoding: gzip`` / ``deflate`` accepted).

Everything received is decoded into plain records (:class:`ReceivedSpan`,
:class:`ReceivedMetric`) with the resource attributes of the batch it came in,
so tests can assert on names, attributes and values without touching protobuf.
``delay`` makes it a slow collector: every export is recorded and answered only after it.

    with OtlpReceiver() as rx:
        rx.grpc_endpoint  # "http://127.0.0.1:<port>"
        rx.http_endpoint  # "http://127.0.0.1:<port>"  (paths /v1/traces, /v1/metrics)
        rx.wait_for(lambda: rx.span_names(), timeout=10)
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def attributes(kvs) -> Dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


@dataclass
class ReceivedSpan:
    transport: str
    resource: Dict[str, Any]
    scope: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: Dict[str, Any]
    events: List[tuple]            # (name, attributes)
    status_code: int


@dataclass
class ReceivedPoint:
    attributes: Dict[str, Any]
    value: Any                     # number for sums/gauges, (count, sum) for histograms


@dataclass
class ReceivedMetric:
    transport: str
    resource: Dict[str, Any]
    scope: str
    name: str
    unit: str
    kind: str                      # sum | gauge | histogram | ...
    points: List[ReceivedPoint] = field(default_factory=list)


def _decode_traces(req: trace_service_pb2.ExportTraceServiceRequest, transport: str) -> List[ReceivedSpan]:
    out = []
    for rs in req.resource_spans:
        res = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(ReceivedSpan(
                    transport=transport, resource=res, scope=ss.scope.name, name=s.name,
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_span_id=s.parent_span_id.hex(),
                    attributes=attributes(s.attributes),
                    events=[(e.name, attributes(e.attributes)) for e in s.events],
                    status_code=s.status.code,
                ))
    return out


def _number(dp) -> Any:
    kind = dp.WhichOneof("value")
    return getattr(dp, kind) if kind else None


def _decode_metrics(req: metrics_service_pb2.ExportMetricsServiceRequest, transport: str) -> List[ReceivedMetric]:
    out = []
    for rm in req.resource_metrics:
        res = attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data") or ""
                rec = ReceivedMetric(transport, res, sm.scope.name, m.name, m.unit, kind)
                data = getattr(m, kind, None) if kind else None
                for dp in (data.data_points if data is not None else ()):
                    if kind in ("histogram", "exponential_histogram") or kind == "summary":
                        value = (dp.count, dp.sum)
                    else:
                        value = _number(dp)
                    rec.points.append(ReceivedPoint(attributes(dp.attributes), value))
                out.append(rec)
    return out


class OtlpReceiver:
    """Both transports at once; each ``start_*`` binds a fresh port on 127.0.0.1.

    ``delay`` (seconds): each export, gRPC or HTTP, is recorded and answered only after it."""

    def __init__(self, grpc_enabled: bool = True, http_enabled: bool = True, delay: float = 0.0) -> None:
        self.delay = delay
        self._lock = threading.Lock()
        self.spans: List[ReceivedSpan] = []
        self.metrics: List[ReceivedMetric] = []
        self.requests: Dict[str, int] = {"grpc_traces": 0, "grpc_metrics": 0, "http_traces": 0, "http_metrics": 0}
        self._grpc_server: Optional[grpc.Server] = None
        self._http_server: Optional[ThreadingHTTPServer] = None
        self.grpc_port: Optional[int] = None
        self.http_port: Optional[int] = None
        self._want_grpc = grpc_enabled
        self._want_http = http_enabled

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> OtlpReceiver:
        if self._want_grpc:
            self._start_grpc()
        if self._want_http:
            self._start_http()
        return self

    def stop(self) -> None:
        if self._grpc_server is not None:
            self._grpc_server.stop(grace=None).wait(5)
            self._grpc_server = None
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()
            self._http_server = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    # -- recording -------------------------------------------------------------

    def _add(self, counter: str, spans=(), metrics=()) -> None:
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            self.requests[counter] += 1
            self.spans.extend(spans)
            self.metrics.extend(metrics)

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()
            self.metrics.clear()

    def span_names(self) -> set:
        with self._lock:
            return {s.name for s in self.spans}

    def metric_names(self) -> set:
        with self._lock:
            return {m.name for m in self.metrics}

    def spans_named(self, name: str) -> List[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name == name]

    def metrics_named(self, name: str) -> List[ReceivedMetric]:
        with self._lock:
            return [m for m in self.metrics if m.name == name]

    def span_count(self, prefix: str = "") -> int:
        """How many spans arrived whose name starts with ``prefix``."""
        with self._lock:
            return sum(1 for s in self.spans if s.name.startswith(prefix))

    def _points(self, name: str, attrs: Dict[str, Any], kinds=None) -> List[ReceivedPoint]:
        """The points of ``name`` (of one of ``kinds``) whose attributes include ``attrs``, in arrival order."""
        return [p for m in self.metrics_named(name) if kinds is None or m.kind in kinds
                for p in m.points if all(p.attributes.get(k) == v for k, v in attrs.items())]

    def latest_value(self, name: str, **attrs) -> Any:
        """Value of the last received point of ``name`` whose attributes include ``attrs``."""
        points = self._points(name, attrs)
        return points[-1].value if points else None

    def metric_total(self, name: str, **attrs) -> Any:
        """Sum over label sets of the latest value of the sum/gauge ``name`` whose attributes include
        ``attrs``: a cumulative point is sent again with every export, so only the last one of each
        label set counts."""
        latest = {}
        for p in self._points(name, attrs, kinds=("sum", "gauge")):
            latest[tuple(sorted((k, repr(v)) for k, v in p.attributes.items()))] = p.value
        return sum(latest.values())

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result or time.monotonic() >= deadline:
                return result
            time.sleep(interval)

    # -- gRPC ------------------------------------------------------------------------

    def _start_grpc(self) -> None:
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver._add("grpc_traces", spans=_decode_traces(request, "grpc"))
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                receiver._add("grpc_metrics", metrics=_decode_metrics(request, "grpc"))
                return metrics_service_pb2.ExportMetricsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        self.grpc_port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._grpc_server = server

    # -- HTTP/protobuf -------------------------------------------------------------------

    def _start_http(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:   # keep test output clean
                pass

            def _reply(self, code: int, body: bytes, ctype: str = "application/x-protobuf") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if "protobuf" not in (self.headers.get("Content-Type") or ""):
                    self._reply(415, b"only application/x-protobuf", "text/plain")
                    return
                if self.path == "/v1/traces":
                    req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    receiver._add("http_traces", spans=_decode_traces(req, "http"))
                    self._reply(200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString())
                elif self.path == "/v1/metrics":
                    req = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    receiver._add("http_metrics", metrics=_decode_metrics(req, "http"))
                    self._reply(200, metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString())
                else:
                    self._reply(404, b"not found", "text/plain")

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self.http_port = server.server_address[1]
        threading.Thread(target=server.serve_forever, name="otlp-http-receiver", daemon=True).start()
        self._http_server = server


def main() -> None:
    """``python otlp_receiver.py``: serve both transports until stdin closes (a receiver in its
    own process, so that decoding does not compete with the measured process for the GIL).
    Prints one JSON line: {"grpc_port": ..., "http_port": ..., "pid": ...}."""
    import json
    import os
    import sys

    rx = OtlpReceiver().start()
    print(json.dumps({"grpc_port": rx.grpc_port, "http_port": rx.http_port, "pid": os.getpid()}), flush=True)
    try:
        sys.stdin.read()
    finally:
        print(json.dumps({"spans": len(rx.spans), "metrics": len(rx.metrics), "requests": rx.requests}), flush=True)
        rx.stop()


if __name__ == "__main__":
    main()
