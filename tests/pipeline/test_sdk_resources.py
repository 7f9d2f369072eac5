"""observed_engine.pipeline.sdk_resources: the SDK's resources module imported without psutil.

Each check that is about a process's imports runs in a fresh interpreter (cwd = the repository):

- importing pipeline.sdk_exporters leaves psutil unimported, and the SDK's ``psutil`` global is
  a stand-in that is not None;
- ProcessResourceDetector (directly, and through Resource.create with the process detector
  configured, whose detectors run in worker threads) gives the attributes a process that imports
  the SDK plainly gets, and afterwards the SDK's global is the real psutil;
- the finder refuses psutil to its own thread only: another thread importing psutil while it is
  installed (also in the middle of the SDK's import) gets the real module;
- psutil imported first: the global is the real module (no stand-in); psutil not findable: None,
  as the SDK leaves it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from support.paths import REPO

from observed_engine.pipeline.sdk_resources import RefusePsutilFinder


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra)
    return env


def run_python(code: str, **env: str) -> dict:
    """Runs ``code`` in a fresh interpreter; its last stdout line is JSON."""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(**env),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


DETECT = """
import json, sys
{imports}
import opentelemetry.sdk.resources as r
def state():
    return {{"psutil_imported": "psutil" in sys.modules, "global_is_none": r.psutil is None,
            "global_is_real": r.psutil is sys.modules.get("psutil")}}
before = state()
# with OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process, create() runs the detector in a worker thread
created = dict(r.Resource.create({{"service.name": "t"}}).attributes)
after_create = state()
attrs = dict(r.ProcessResourceDetector().detect().attributes)
after_detect = state()
print(json.dumps({{"before": before, "created": created, "after_create": after_create,
                  "attrs": attrs, "after_detect": after_detect}}))
"""

OURS = "import observed_engine.pipeline.sdk_exporters"
PLAIN = "import opentelemetry.sdk.resources"


def test_sdk_exporters_does_not_import_psutil():
    got = run_python(f"""
import json, sys
{OURS}
import opentelemetry.sdk.resources as r
print(json.dumps({{"psutil_imported": "psutil" in sys.modules, "global_is_none": r.psutil is None,
                  "finders": [type(f).__name__ for f in sys.meta_path]}}))
""")
    assert got["psutil_imported"] is False
    assert got["global_is_none"] is False          # `psutil is not None` holds, as with psutil installed
    assert "RefusePsutilFinder" not in got["finders"]


@pytest.mark.parametrize("detectors", [None, "process"])
def test_process_resource_same_as_plain_import(detectors):
    env = {"OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": detectors} if detectors else {}
    ours = run_python(DETECT.format(imports=OURS), **env)
    plain = run_python(DETECT.format(imports=PLAIN), **env)

    real = {"psutil_imported": True, "global_is_none": False, "global_is_real": True}
    stand_in = {"psutil_imported": False, "global_is_none": False, "global_is_real": False}
    assert ours["before"] == stand_in
    assert plain["before"] == plain["after_create"] == real
    # once the detector ran, the SDK's global is the real psutil, as in the plain process
    assert ours["after_create"] == (real if detectors else stand_in)
    assert ours["after_detect"] == plain["after_detect"] == real

    for key in ("attrs", "created"):
        a, b = ours[key], plain[key]
        assert set(a) == set(b), key
        assert "process.owner" in a or key == "created" and not detectors
        # two sibling processes started the same way: only the pids differ
        differ = {"process.pid", "service.instance.id"}
        assert {k: v for k, v in a.items() if k not in differ} == {k: v for k, v in b.items() if k not in differ}
    assert ours["attrs"]["process.owner"] == plain["attrs"]["process.owner"]
    if detectors:
        assert ours["created"]["process.owner"] == plain["created"]["process.owner"]


def test_stand_in_puts_the_real_module_in_the_global_on_first_use():
    got = run_python(f"""
import json, sys
{OURS}
import opentelemetry.sdk.resources as r
stand_in = r.psutil
process_cls = stand_in.Process
print(json.dumps({{"same_cls": process_cls is sys.modules["psutil"].Process,
                  "global_is_real": r.psutil is sys.modules["psutil"],
                  "second_access": stand_in.Process is process_cls}}))
""")
    assert got == {"same_cls": True, "global_is_real": True, "second_access": True}


def test_finder_refuses_psutil_to_its_own_thread_only():
    finder = RefusePsutilFinder(threading.get_ident())
    with pytest.raises(ImportError):
        finder.find_spec("psutil")
    assert finder.find_spec("json") is None
    assert finder.find_spec("psutil_other") is None
    assert finder.find_spec("psutil._common") is None
    seen = []
    t = threading.Thread(target=lambda: seen.append(finder.find_spec("psutil", None)))
    t.start()
    t.join()
    assert seen == [None]


def test_other_thread_imports_psutil_while_finder_installed():
    got = run_python("""
import json, sys, threading
from observed_engine.pipeline.sdk_resources import RefusePsutilFinder
finder = RefusePsutilFinder(threading.get_ident())
sys.meta_path.insert(0, finder)
try:
    try:
        import psutil
        refused = False
    except ImportError:
        refused = True
    left_in_modules = "psutil" in sys.modules
    seen = {}
    def other():
        import psutil
        seen["real"] = hasattr(psutil, "Process") and psutil.__file__ is not None
    t = threading.Thread(target=other)
    t.start()
    t.join()
finally:
    sys.meta_path.remove(finder)
print(json.dumps({"refused": refused, "left_in_modules": left_in_modules, "seen": seen}))
""")
    assert got == {"refused": True, "left_in_modules": False, "seen": {"real": True}}


@pytest.mark.parametrize("trigger", ["psutil", "winreg"])
def test_other_thread_imports_psutil_during_the_sdk_import(trigger):
    # A second thread imports psutil (and the main thread waits for it) while the main thread is
    # inside the SDK's import: at its `import psutil` before the finder refuses it, or just after
    # the refusal, at its `import winreg`. An audit hook, since a meta-path finder is called with
    # the global import lock held.
    got = run_python(f"""
import json, sys, threading
seen = {{}}
def hook(event, args):
    if (event == "import" and args[0] == {trigger!r} and "psutil_thread" not in seen
            and threading.current_thread() is threading.main_thread()):
        seen["psutil_thread"] = None
        def other():
            import psutil
            seen["psutil_thread"] = psutil.__name__
            seen["has_process"] = hasattr(psutil, "Process")
        t = threading.Thread(target=other)
        t.start()
        t.join()
sys.addaudithook(hook)
{OURS}
import opentelemetry.sdk.resources as r
print(json.dumps({{"seen": seen, "global_is_real": r.psutil is sys.modules.get("psutil"),
                  "owner": "process.owner" in r.ProcessResourceDetector().detect().attributes}}))
""")
    assert got == {"seen": {"psutil_thread": "psutil", "has_process": True}, "global_is_real": True, "owner": True}


def test_psutil_imported_first_global_is_the_real_module():
    got = run_python(f"""
import json, sys
import psutil
{OURS}
import opentelemetry.sdk.resources as r
print(json.dumps({{"global_is_real": r.psutil is psutil}}))
""")
    assert got == {"global_is_real": True}


def test_sdk_imported_first_is_left_alone():
    got = run_python(f"""
import json, sys
import opentelemetry.sdk.resources as r
{OURS}
print(json.dumps({{"global_is_real": r.psutil is sys.modules.get("psutil") and r.psutil is not None}}))
""")
    assert got == {"global_is_real": True}


def test_psutil_not_findable_global_stays_none():
    # psutil made unfindable (find_spec raises, as a broken install may): imported plainly, the
    # SDK leaves its global None itself, and the detector goes without process.owner as it does.
    got = run_python(f"""
import json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "psutil":
            raise ImportError("blocked")
        return None
sys.meta_path.insert(0, Block())
{OURS}
import opentelemetry.sdk.resources as r
print(json.dumps({{"global_is_none": r.psutil is None,
                  "owner": "process.owner" in r.ProcessResourceDetector().detect().attributes}}))
""")
    assert got == {"global_is_none": True, "owner": False}
