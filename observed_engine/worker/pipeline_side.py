"""What the worker needs from its pipeline: named here, so the dependency is visible.

The worker never imports the pipeline (it is a layer above); ``pipeline.Pipeline`` passes itself
in and provides these members. ``tests/contract/test_vocabulary.py`` checks that the processor uses no other
member and that ``Pipeline`` has every one.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Protocol, Tuple

from ..settings import Settings


class RowSink(Protocol):
    """Where the worker's store rows go (``store.StoreWriter``)."""

    def submit(self, rows: Iterable[tuple]) -> None: ...


class WorkerPipeline(Protocol):
    """The members of its pipeline the worker (``EventProcessor``) reads or calls."""

    settings: Settings              # traces, capture_content, tokenizer, max_label_values
    instruments: Any                # pipeline.instruments.Instruments: the catalogue's instruments by key
    tracer: Any                     # the OpenTelemetry tracer spans are built with
    store: Optional[RowSink]        # None without a store (read per batch: a forked child gets its own)
    compress_timeout: float         # the compress deadline (said in the overrun's log line)

    def count_error(self, component: str, n: int = 1) -> None:
        """Count one of our own failures (``telemetry_errors_total{component}``); any thread."""

    def take_pending_errors(self) -> Tuple[Dict[str, int], Dict[str, int]]:
        """The errors and drops counted off the worker thread since the last call, per component
        and per signal; the worker adds them to the counters with its batch."""

    def register_engine(self, engine: Any) -> None:
        """Follow ``engine`` for the gauges (a copy made by deepcopy is first seen by the worker)."""


WORKER_PIPELINE_MEMBERS = ("settings", "instruments", "tracer", "store", "compress_timeout",
                           "count_error", "take_pending_errors", "register_engine")
