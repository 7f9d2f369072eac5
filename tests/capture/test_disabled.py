"""observed.enabled: false installs no hook override: the hooks are the inner's own functions."""

from support.engines import ScriptedEngine

import observed_engine
from observed_engine import is_observed, observe
from observed_engine.contract import hooks


def test_disabled_engine_runs_its_own_functions_and_records_nothing(tmp_path):
    inner = ScriptedEngine()
    cls = type(inner)
    engine = observe(inner, settings={"enabled": False, "store": {"path": str(tmp_path / "t.sqlite")}})
    try:
        assert engine is inner and is_observed(engine)
        for name in hooks.HOOK_NAMES:
            if name in cls.__dict__:
                assert getattr(type(engine), name) is cls.__dict__[name], name
        engine.should_compress(10)
        observed_engine.flush(5)
        assert not (tmp_path / "t.sqlite").exists()
    finally:
        observed_engine.shutdown(5)
