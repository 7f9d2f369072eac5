"""contract.records: record classes behave as the dataclasses they replace (issue 16: the engine's
import made 8 dataclasses, 0.6-0.8 ms of CPU each, about a fifth of what importing it costs)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from typing import List, Optional

import pytest
from support.paths import REPO

from observed_engine.contract import records


def _pair(frozen: bool):
    """The same class made as a dataclass and as a record."""
    made = []
    for make in (dataclasses.dataclass(frozen=frozen), records.record(frozen=frozen)):
        fld = dataclasses.field if make is not made and len(made) == 0 else records.field

        @make
        class Point:
            x: int
            label: Optional[str] = None
            tags: List[str] = fld(default_factory=list)
            z: float = 2.5

            def norm(self) -> float:
                return abs(self.x) + self.z

        made.append(Point)
    return made


@pytest.mark.parametrize("frozen", [True, False])
def test_a_record_behaves_as_the_dataclass(frozen):
    dc, rec = _pair(frozen)
    for args, kwargs in (((1,), {}), ((1, "a"), {"z": 3.0}), ((), {"x": 4, "tags": ["t"]})):
        a, b = dc(*args, **kwargs), rec(*args, **kwargs)
        assert repr(a) == repr(b)
        assert [getattr(a, f.name) for f in dataclasses.fields(a)] == [getattr(b, f.name) for f in records.fields(b)]
        assert a.norm() == b.norm()
        assert rec(*args, **kwargs) == b and not (rec(*args, **kwargs) != b)  # noqa: SIM202  (__ne__ too)
    assert rec(1).tags is not rec(1).tags                 # a fresh default per instance
    assert rec(1) != rec(2) and rec(1) != dc(1)           # another class is never equal
    assert rec.z == dc.z == 2.5 and not hasattr(rec, "tags") and not hasattr(dc, "tags")
    assert rec.__match_args__ == dc.__match_args__
    assert [(f.name, f.type, f.default) for f in records.fields(rec)] == \
        [(f.name, f.type, f.default) for f in dataclasses.fields(dc)]
    for bad_args, bad_kwargs in (((), {}), ((1, "a", [], 1.0, 5), {}), ((1,), {"x": 2}), ((1,), {"nope": 2})):
        with pytest.raises(TypeError):
            dc(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError):
            rec(*bad_args, **bad_kwargs)
    moved = records.replace(rec(1, "a"), z=9.0)
    assert moved == rec(1, "a", [], 9.0) and repr(moved) == repr(dataclasses.replace(dc(1, "a"), z=9.0))
    if frozen:
        b = rec(1, tags=("t",))
        assert hash(b) == hash(rec(1, tags=("t",))) == hash(dc(1, tags=("t",)))   # the fields' tuple
        with pytest.raises(TypeError):
            hash(rec(1))            # a list field: unhashable, as the dataclass's
        with pytest.raises(TypeError):
            hash(dc(1))
        with pytest.raises(dataclasses.FrozenInstanceError):
            b.x = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del b.x
    else:
        b = rec(1)
        b.x = 5
        assert b.x == 5
        with pytest.raises(TypeError):
            hash(b)
        with pytest.raises(TypeError):
            hash(dc(1))


def test_a_field_without_a_default_after_one_with_is_refused():
    with pytest.raises(TypeError):
        @records.record
        class Bad:
            a: int = 1
            b: int


def test_the_engine_import_makes_no_dataclass_of_its_own():
    """Every class of ours that the engine's import made with @dataclass was 0.6-0.8 ms of CPU."""
    code = textwrap.dedent("""
        import dataclasses
        made = []
        real = dataclasses._process_class
        def spy(cls, *args, **kwargs):
            made.append(cls.__module__ + "." + cls.__qualname__)
            return real(cls, *args, **kwargs)
        dataclasses._process_class = spy
        import observed_engine.hermes_plugin, observed_engine.pipeline.pipeline, observed_engine.api
        from observed_engine.settings import Settings
        Settings.from_mapping({"prometheus": True, "store": False})
        print([m for m in made if m.startswith("observed_engine")])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
