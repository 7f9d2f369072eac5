"""The alerting end-to-end tests' one fixture (``support.alert_stack``): Alertmanager, the
webhook it notifies and the Prometheus each test starts on its engines' /metrics."""

from support.alert_stack import alert_stack  # noqa: F401
