"""observed-engine: observability for Hermes Agent context engines.

    from observed_engine import observe
    engine = observe(inner)        # the same engine, now traced and measured
"""

__version__ = "0.1.0"

from .wrapper import is_observed, observe  # noqa: E402


def flush(timeout: float = 5.0) -> bool:
    """Deliver everything recorded so far (spans, metrics, store rows). Returns False on timeout."""
    from .telemetry import flush as _flush

    return _flush(timeout)


def shutdown(timeout: float = 5.0) -> None:
    """Stop every pipeline of the process (worker threads, servers, exporters)."""
    from .telemetry import shutdown_all

    shutdown_all(timeout)


__all__ = ["observe", "is_observed", "flush", "shutdown", "__version__"]
