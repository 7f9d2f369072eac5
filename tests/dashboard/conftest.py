"""The dashboard checks' data feeds (``support.dashboard_feeds``): a filled store, a /metrics
target and a real Prometheus scraping it, one of each per test module that asks for them."""

from support.dashboard_feeds import facts, fed, filled_store, metrics_endpoint, own_store, prometheus  # noqa: F401
