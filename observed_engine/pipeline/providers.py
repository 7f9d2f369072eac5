"""What the exporters were built into: the SDK providers, the Prometheus endpoint and the
exporters whose failures the pipeline watches. A record of its own, shared by the builder
(``exporters``) and the SDK side (``sdk_exporters``), so neither imports the other's module for it."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from ..contract.records import field, record

ErrorCounter = Callable[[str], None]


@record(frozen=False)
class BuiltProviders:
    tracer_provider: Optional[Any] = None      # an SDK TracerProvider
    meter_provider: Optional[Any] = None        # an SDK MeterProvider
    prometheus_address: Optional[tuple] = None
    prometheus_detach: Optional[Callable[[], None]] = None
    closers: List[Callable[[], None]] = field(default_factory=list)
    span_processors: List[object] = field(default_factory=list)   # what still holds spans at exit
    span_exporters: List[Any] = field(default_factory=list)
    metric_exporters: List[Any] = field(default_factory=list)

    def traces_failing(self) -> bool:
        """The last span export failed (dead or unreachable endpoint): a flush would only wait."""
        return any(e.failing for e in self.span_exporters)

    def metrics_failing(self) -> bool:
        return any(e.failing for e in self.metric_exporters)

    def abandon_exports(self) -> None:
        """Stop every export still in flight (a shutdown whose budget is spent): no retry outlives it."""
        for exporter in (*self.span_exporters, *self.metric_exporters):
            try:
                exporter.abandon()
            except Exception:  # teardown: each exporter is told, whatever the one before did
                pass

    def shutdown(self) -> None:
        for close in reversed(self.closers):
            try:
                close()
            except Exception:  # teardown: each closer runs, whatever the one before did
                pass
