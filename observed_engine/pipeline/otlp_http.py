"""OTLP/HTTP (protobuf) span and metric exporters that do not import protobuf.

Same arguments, ``OTEL_EXPORTER_OTLP_*`` variables, headers and retries as the official
``opentelemetry-exporter-otlp-proto-http`` exporters, sent with ``requests``; payloads come from
:mod:`.otlp_wire`. Why: the official ones cost 25-35 ms of CPU to import, these about 1 ms.
When editing: :func:`official_exporter_needed` names the settings only the official exporters
implement; ``sdk_exporters`` then uses those (and always for gRPC).

The full account: docs/design/internals.md, *observed_engine/pipeline/otlp_http.py*.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import zlib
from datetime import UTC
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, MetricExporter, MetricExportResult
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, ExponentialBucketHistogramAggregation
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.re import parse_env_headers

from ..version import __version__
from . import otlp_wire

logger = logging.getLogger(__name__)

DEFAULT_BASE_ENDPOINT = "http://localhost:4318"
DEFAULT_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 64 * 1024 * 1024          # the official exporters' default limit, before compression
_ATTEMPTS = 6
_JITTER = 0.2
_RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
_COMPRESSIONS = ("none", "gzip", "deflate")
_SIGNAL_PATH = {"traces": "v1/traces", "metrics": "v1/metrics"}


def _env(signal: str, suffix: str) -> Optional[str]:
    """``OTEL_EXPORTER_OTLP_<SIGNAL>_<suffix>``, else ``OTEL_EXPORTER_OTLP_<suffix>`` (empty counts as unset)."""
    return os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{suffix}") or \
        os.environ.get(f"OTEL_EXPORTER_OTLP_{suffix}") or None


def official_exporter_needed(signal: str) -> Optional[str]:
    """Why this signal's export needs the official exporter, or None when these ones do all it asks."""
    for name in ("OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
                 f"OTEL_PYTHON_EXPORTER_OTLP_HTTP_{signal.upper()}_CREDENTIAL_PROVIDER"):
        if os.environ.get(name):
            return f"{name} (a session from an entry point)"
    if os.environ.get("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "").strip().lower() == "true":
        return "OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED (the exporters' own metrics)"
    try:
        import requests  # noqa: F401  (Hermes depends on it; the official exporters send with it too)
    except ImportError:
        return "the requests package is not installed"
    return None


class HttpTarget:
    """Where and how one signal is sent, resolved once as the official exporter resolves it."""

    def __init__(self, signal: str, endpoint: Optional[str] = None, headers: Optional[Mapping[str, str]] = None,
                 timeout: Optional[float] = None, compression: Optional[str] = None,
                 certificate_file: Optional[str] = None, client_key_file: Optional[str] = None,
                 client_certificate_file: Optional[str] = None) -> None:
        self.signal = signal
        if endpoint:
            self.endpoint = endpoint
        else:
            explicit = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
            base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_BASE_ENDPOINT
            self.endpoint = explicit or f"{base.removesuffix('/')}/{_SIGNAL_PATH[signal]}"
        self.compression = self._compression(compression)
        self.timeout = float(timeout) if timeout is not None else self._timeout()
        self.headers = self._headers(headers)
        self.verify: Union[bool, str] = certificate_file or _env(signal, "CERTIFICATE") or True
        key = client_key_file or _env(signal, "CLIENT_KEY")
        cert = client_certificate_file or _env(signal, "CLIENT_CERTIFICATE")
        self.cert: Union[None, str, Tuple[str, str]] = (cert, key) if cert and key else cert

    def _compression(self, given: Optional[str]) -> str:
        value = (given or _env(self.signal, "COMPRESSION") or "none").strip().lower()
        if value not in _COMPRESSIONS:
            logger.warning("observed-engine: unsupported OTLP compression %r; sending uncompressed", value)
            return "none"
        return value

    def _timeout(self) -> float:
        raw = _env(self.signal, "TIMEOUT")
        if raw is None:
            return DEFAULT_TIMEOUT_S
        try:
            return float(raw)
        except ValueError:
            logger.warning("observed-engine: invalid OTLP timeout %r; using %s s", raw, DEFAULT_TIMEOUT_S)
            return DEFAULT_TIMEOUT_S

    def _headers(self, given: Optional[Mapping[str, str]]) -> Dict[str, str]:
        headers = {"content-type": "application/x-protobuf",
                   "user-agent": f"observed-engine/{__version__} (OTLP/HTTP)"}
        headers.update(parse_env_headers(_env(self.signal, "HEADERS") or "", liberal=True))
        if given:
            headers.update({k.lower(): v for k, v in given.items()})
        if self.compression != "none" and "content-encoding" not in headers:
            headers["content-encoding"] = self.compression
        return headers


def _retry_after(response) -> Optional[float]:
    """Seconds from a ``Retry-After`` header (delay-seconds or an HTTP-date), None without a usable one."""
    value = (response.headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if seconds == seconds and seconds != float("inf") else None
    try:
        from email.utils import parsedate_to_datetime

        at = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:

        at = at.replace(tzinfo=UTC)
    return max(at.timestamp() - time.time(), 0.0)


class HttpSender:
    """POSTs payloads to one target: compression, retries within the timeout, stop on shutdown."""

    def __init__(self, target: HttpTarget) -> None:
        import requests

        self.target = target
        self._requests = requests
        self._connection_errors = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
        self._session = requests.Session()
        self._session.verify = target.verify
        if target.cert is not None:
            self._session.cert = target.cert
        self._stopping = threading.Event()

    def _compress(self, body: bytes) -> bytes:
        if self.target.compression == "gzip":
            packer = zlib.compressobj(wbits=31)     # a gzip member, as gzip.compress writes it
            return packer.compress(body) + packer.flush()
        if self.target.compression == "deflate":
            return zlib.compress(body)
        return body

    def _post(self, data: bytes, timeout: float):
        """(response, None) or (None, exception); a failed connection is tried once more at once
        (a pooled connection the server closed), time permitting."""
        deadline = time.monotonic() + timeout
        for attempt in (0, 1):
            try:
                return self._session.post(self.target.endpoint, data=data, headers=self.target.headers,
                                          timeout=max(deadline - time.monotonic(), 0.0), allow_redirects=False), None
            except self._connection_errors as exc:
                if attempt or deadline - time.monotonic() <= 0:
                    return None, exc
            except Exception as exc:
                return None, exc
        return None, None    # pragma: no cover - the loop always returns

    def send(self, body: bytes) -> bool:
        kind = "spans" if self.target.signal == "traces" else "metrics"
        if 0 < MAX_REQUEST_BYTES < len(body):
            logger.warning("observed-engine: OTLP %s batch of %d bytes is over the %d-byte limit; dropped",
                           kind, len(body), MAX_REQUEST_BYTES)
            return False
        data = self._compress(body)
        deadline = time.monotonic() + self.target.timeout
        for attempt in range(_ATTEMPTS):
            backoff = 2 ** attempt * random.uniform(1 - _JITTER, 1 + _JITTER)
            response, error = self._post(data, max(deadline - time.monotonic(), 0.0))
            status = response.status_code if response is not None else None
            if status is not None and 200 <= status < 400:
                return True
            if status is not None:
                retryable = status in _RETRYABLE_STATUS
                wait = _retry_after(response) if retryable else None
                if wait is not None:
                    backoff = wait
                problem = f"HTTP {status} {response.reason or ''}".strip()
            else:
                retryable = isinstance(error, self._connection_errors)
                problem = f"{type(error).__name__}: {error}" if error is not None else "no response"
            if not retryable:
                logger.error("observed-engine: OTLP %s export to %s failed: %s", kind, self.target.endpoint, problem)
                return False
            if self._stopping.is_set():
                return False      # shut down: the pipeline says what was lost
            if attempt + 1 == _ATTEMPTS or backoff > deadline - time.monotonic():
                logger.error("observed-engine: OTLP %s export to %s failed (%s); gave up: timeout or retries", kind, self.target.endpoint, problem)
                return False
            logger.warning("observed-engine: OTLP %s export: %s; retrying in %.2f s", kind, problem, backoff)
            if self._stopping.wait(backoff):
                return False
        return False

    def close(self) -> None:
        self._stopping.set()
        try:
            self._session.close()
        except Exception:  # teardown: the session is dropped either way
            pass


class _Sending:
    """What both exporters share: one sender; encode, then send, until shut down; close once."""

    def _start_sending(self, signal: str, endpoint, headers, timeout, compression, certificate_file,
                       client_key_file, client_certificate_file) -> None:
        self._sender = HttpSender(HttpTarget(signal, endpoint, headers, timeout, compression,
                                             certificate_file, client_key_file, client_certificate_file))
        self._shutdown = False

    @property
    def endpoint(self) -> str:
        return self._sender.target.endpoint

    def _encode_and_send(self, encode, data, what: str) -> bool:
        if self._shutdown:
            return False
        try:
            body = encode(data)
        except Exception as exc:
            logger.error("observed-engine: cannot encode %s for OTLP (%s)", what, exc)
            return False
        return self._sender.send(body)

    def _close(self) -> None:
        if not self._shutdown:
            self._shutdown = True
            self._sender.close()


class OtlpHttpSpanExporter(_Sending, SpanExporter):
    """``OTLPSpanExporter`` (HTTP) without protobuf: same arguments, environment and behaviour."""

    def __init__(self, endpoint: Optional[str] = None, certificate_file: Optional[str] = None,
                 client_key_file: Optional[str] = None, client_certificate_file: Optional[str] = None,
                 headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                 compression: Optional[str] = None) -> None:
        self._start_sending("traces", endpoint, headers, timeout, compression, certificate_file,
                            client_key_file, client_certificate_file)

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        sent = self._encode_and_send(otlp_wire.encode_spans, spans, f"a batch of {len(spans)} spans")
        return SpanExportResult.SUCCESS if sent else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:  # noqa: ARG002 (the SpanExporter signature)
        return True     # nothing is buffered here


def _temporality_preference() -> Dict[type, AggregationTemporality]:
    """``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`` (CUMULATIVE, DELTA or LOWMEMORY) per instrument type."""
    preference = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "CUMULATIVE").strip().upper()
    cumulative, delta = AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA
    chosen = {kind: cumulative for kind in (Counter, UpDownCounter, Histogram, ObservableCounter,
                                             ObservableUpDownCounter, ObservableGauge)}
    if preference in ("DELTA", "LOWMEMORY"):
        chosen[Counter] = chosen[Histogram] = delta
        if preference == "DELTA":
            chosen[ObservableCounter] = delta
    elif preference != "CUMULATIVE":
        logger.warning("observed-engine: unrecognised OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE %r; "
                       "using CUMULATIVE", preference)
    return chosen


def _histogram_aggregation() -> Dict[type, Any]:
    name = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "explicit_bucket_histogram")
    if name == "base2_exponential_bucket_histogram":
        return {Histogram: ExponentialBucketHistogramAggregation()}
    if name != "explicit_bucket_histogram":
        logger.warning("observed-engine: invalid OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION %r; "
                       "using explicit bucket histograms", name)
    return {Histogram: ExplicitBucketHistogramAggregation()}


class OtlpHttpMetricExporter(_Sending, MetricExporter):
    """``OTLPMetricExporter`` (HTTP) without protobuf: same arguments, environment and behaviour."""

    def __init__(self, endpoint: Optional[str] = None, certificate_file: Optional[str] = None,
                 client_key_file: Optional[str] = None, client_certificate_file: Optional[str] = None,
                 headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                 compression: Optional[str] = None,
                 preferred_temporality: Optional[Dict[type, AggregationTemporality]] = None,
                 preferred_aggregation: Optional[Dict[type, Any]] = None) -> None:
        temporality = _temporality_preference()
        temporality.update(preferred_temporality or {})
        aggregation = _histogram_aggregation()
        aggregation.update(preferred_aggregation or {})
        super().__init__(preferred_temporality=temporality, preferred_aggregation=aggregation)
        self._start_sending("metrics", endpoint, headers, timeout, compression, certificate_file,
                            client_key_file, client_certificate_file)

    # as the official exporter: the target's timeout bounds a send, ``timeout_millis`` is not used
    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:  # noqa: ARG002
        sent = self._encode_and_send(otlp_wire.encode_metrics, metrics_data, "metrics")
        return MetricExportResult.SUCCESS if sent else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:  # noqa: ARG002 (the MetricExporter signature)
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:  # noqa: ARG002 (the MetricExporter signature)
        self._close()
