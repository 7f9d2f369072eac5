"""The metric catalogue is the single source: exporter names, README table, label sets."""


from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from support.paths import REPO

from observed_engine.contract import catalogue
from observed_engine.pipeline.instruments import Instruments


def test_prometheus_names_are_what_the_exporter_exposes():
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    gauge_keys = [m.key for m in catalogue.METRICS if m.kind == catalogue.OBSERVABLE_GAUGE]
    readers = {key: (lambda labels=catalogue.BY_KEY[key].labels: [(1, {label: "e" for label in labels})])
               for key in gauge_keys}
    instruments = Instruments(provider.get_meter("t"), readers)
    for spec in catalogue.METRICS:
        attrs = {label: "x" for label in spec.labels}
        if spec.kind == catalogue.COUNTER:
            instruments[spec.key].add(1, attrs)
        elif spec.kind == catalogue.HISTOGRAM:
            instruments[spec.key].record(1, attrs)
    text = generate_latest(registry).decode()
    exposed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    expected = {m.prom_name for m in catalogue.METRICS}
    assert expected <= exposed, sorted(expected - exposed)
    # and every series carries exactly the catalogue's labels (plus the exporter's scope labels)
    for spec in catalogue.METRICS:
        sample = next(line for line in text.splitlines() if line.startswith(spec.prom_name + ("_bucket{" if spec.kind == catalogue.HISTOGRAM else "{")))
        labels = {kv.split("=")[0] for kv in sample[sample.index("{") + 1: sample.index("}")].split(",")}
        labels = {name for name in labels if not name.startswith("otel_scope") and name != "le"}
        assert labels == set(spec.labels), (spec.prom_name, labels)
    provider.shutdown()


def test_readme_metric_table_is_generated_from_the_catalogue():
    readme = (REPO / "README.md").read_text()
    assert catalogue.markdown_table() in readme, "README metric table is stale: paste catalogue.markdown_table()"


def test_keys_and_names_unique():
    assert len({m.key for m in catalogue.METRICS}) == len(catalogue.METRICS)
    assert len({m.prom_name for m in catalogue.METRICS}) == len(catalogue.METRICS)


def test_store_schema_doc_is_current():
    from observed_engine.contract.store_schema import schema_markdown

    assert (REPO / "docs" / "store-schema.md").read_text() == schema_markdown(), \
        "docs/store-schema.md is stale: regenerate it with observed_engine.contract.store_schema.schema_markdown()"


def test_store_schema_doc_states_the_retention_chunking_the_writer_uses():
    from observed_engine.contract.store_schema import schema_markdown
    from observed_engine.store import retention as r

    text = schema_markdown()
    assert f"starts at {r.RETENTION_FIRST_CHUNK:,} rows" in text
    assert f"up to {r.RETENTION_CHUNK:,})" in text and f"down to {r.RETENTION_MIN_CHUNK:,})" in text
    assert f"under {r.RETENTION_CHUNK_S * 500:g} ms" in text and f"over {r.RETENTION_CHUNK_S * 1000:g} ms" in text
    assert f"pause of {r.RETENTION_PAUSE * 1000:g} ms" in text
    assert f"every {r.RETENTION_PERIOD / 60:g} minutes" in text
