"""The worker's seam with its pipeline is named (issue 27): ``worker.pipeline_side.WorkerPipeline``.

The processor uses only the members named there, and ``Pipeline`` provides each of them; a new
use of the pipeline in the worker must be named in the Protocol first.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

from observed_engine import Registry
from observed_engine.worker import processor as processor_module
from observed_engine.worker.pipeline_side import WORKER_PIPELINE_MEMBERS, WorkerPipeline

WORKER = Path(processor_module.__file__).parent


def _pipeline_uses() -> set:
    """Every ``<x>.pipeline.<member>`` and ``pipeline.<member>`` read in the worker package."""
    used = set()
    for path in WORKER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                base = node.value
                if (isinstance(base, ast.Attribute) and base.attr == "pipeline") or \
                        (isinstance(base, ast.Name) and base.id == "pipeline"):
                    used.add(node.attr)
    return used


def test_the_worker_uses_only_what_the_protocol_names():
    named = {n for n in dir(WorkerPipeline) if not n.startswith("_")} | set(typing.get_type_hints(WorkerPipeline))
    assert set(WORKER_PIPELINE_MEMBERS) == named
    used = _pipeline_uses()
    assert used, "the scan found no use at all: it is not looking where the worker is"
    assert used <= named, f"the worker uses pipeline members the Protocol does not name: {used - named}"


def test_the_pipeline_provides_every_member(tmp_path):
    from observed_engine.settings import Settings

    registry = Registry()
    pipeline = registry.get(Settings.from_mapping({}), store_path=tmp_path / "s.sqlite")
    try:
        for name in WORKER_PIPELINE_MEMBERS:
            assert hasattr(pipeline, name), name
            declared = getattr(WorkerPipeline, name, None)
            if callable(declared):
                wanted = [p for p in inspect.signature(declared).parameters if p != "self"]
                assert list(inspect.signature(getattr(pipeline, name)).parameters) == wanted, name
        assert pipeline.store is not None and callable(pipeline.store.submit)
        assert pipeline.processor.pipeline is pipeline
    finally:
        pipeline.shutdown(2.0)
