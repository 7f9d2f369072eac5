"""Delivery at natural boundaries (``HookSpec.delivers``: on_session_end).

The host may end the process right after such a hook (``hermes -z`` ends with ``os._exit()``), so
what is queued is delivered within DELIVERY_BUDGET_SECONDS before the hook returns.
"""

from __future__ import annotations

from ..contract.hooks import DELIVERY_BUDGET_SECONDS
from .guard import inside


def delivering(hook, pipeline):
    """``hook``, then what is queued delivered within the budget (HookSpec.delivers), unless the
    engine called its own hook (it is still inside another one)."""
    deliver = pipeline.deliver

    def delivering_hook(self, *args, **kwargs):
        own_call = inside.engine is self
        try:
            return hook(self, *args, **kwargs)
        finally:
            if not own_call:
                try:
                    deliver(DELIVERY_BUDGET_SECONDS)
                except Exception:
                    pipeline.count_error("hook")
    return delivering_hook
