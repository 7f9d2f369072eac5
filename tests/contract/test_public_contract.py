"""docs/design/telemetry-contract.md names the published interface; every name it lists must
still exist in the code that defines it (observed_engine/contract/), with the same labels. A
rename therefore fails here until the page and its migration note say so."""

from __future__ import annotations

import re

from support.paths import REPO

import observed_engine
from observed_engine.contract import catalogue, spans, store_schema, vocabulary

DOC = (REPO / "docs" / "design" / "telemetry-contract.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end != -1 else None]


def test_published_metrics_exist_with_their_labels():
    rows = re.findall(r"^\| `(hermes_[a-z_]+)` \| ([a-z_, ]+) \|$", _section("Prometheus metrics"), re.M)
    assert len(rows) >= 20, rows
    by_prom = {m.prom_name: m for m in catalogue.METRICS}
    for name, labels in rows:
        assert name in by_prom, f"{name} is published but not in the catalogue"
        assert tuple(label.strip() for label in labels.split(",")) == by_prom[name].labels, name


def test_published_span_attributes_exist():
    keys = set(re.findall(r"`((?:hermes|gen_ai)\.[a-z_.]+)`", _section("Spans")))
    defined = {value for name, value in vars(spans).items() if name.isupper() and isinstance(value, str)}
    assert len(keys) >= 15, keys
    assert keys <= defined, sorted(keys - defined)
    assert spans.hook_span_name("compress") == "context_engine.compress"
    assert spans.tool_span_name("x") == "execute_tool x"


def test_published_alerts_exist():
    names = re.findall(r"`(Hermes[A-Za-z]+)`", _section("Alert rules"))
    assert len(names) == 10, names
    assert set(names) <= set(vocabulary.ALERT_NAMES), sorted(set(names) - set(vocabulary.ALERT_NAMES))
    rules = (REPO / "deploy" / "prometheus" / "alerts.yml").read_text(encoding="utf-8")
    for name in names:
        assert f"alert: {name}" in rules, name


def test_published_store_columns_and_api_names_exist():
    columns = re.findall(r"`([a-z_]+)`", re.split(r"Columns\s+named\s+in\s+the\s+contract:", _section("Store"))[1])
    assert columns and set(columns) <= set(store_schema.COLUMNS), columns
    api = _section("Python API")
    imported = re.search(r"from observed_engine import ([A-Za-z_, ]+)\n", api).group(1)
    for name in (n.strip() for n in imported.split(",")):
        assert name in observed_engine.__all__ and getattr(observed_engine, name) is not None, name


def test_published_config_keys_are_read_by_the_settings():
    from observed_engine.settings import Settings

    yaml_block = _section("Hermes configuration").split("```yaml")[1].split("```")[0]
    keys = re.findall(r"^  ([a-z_]+):", yaml_block.split("\nobserved:")[1], re.M)
    assert {"inner", "store", "prometheus", "otlp", "capture_content", "compress_timeout_seconds",
            "tokenizer"} <= set(keys)
    settings = Settings.from_mapping({})
    for key in keys:
        assert hasattr(settings, key), key
