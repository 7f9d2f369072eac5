"""The sweep's config copy (compare/config_copy.py): Hermes' ``load_config()`` gives what it gives
with ``copy.deepcopy``, new objects each time, in a replay process; anything but plain data goes
to ``copy.deepcopy``, and a copy unlike its own turns the fast one off."""

from __future__ import annotations

import copy
import logging
import math
from collections import OrderedDict
from enum import IntEnum

import pytest

from observed_engine.compare import config_copy


class Level(IntEnum):
    LOW = 1


class Box:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return type(other) is Box and other.v == self.v


def _tree():
    shared = {"model": "m", "ratios": [0.2, 0.5]}
    tree = {"a": shared, "b": shared, "c": [shared, shared], "nan": math.nan, "t": (1, [2, 3]),
            "od": OrderedDict(x=1), "level": Level.LOW, "box": Box([1]), "bytes": b"x", "none": None,
            "flag": True, "n": 7, 3: "int key", (1, 2): "tuple key"}
    loop = [1]
    loop.append(loop)
    tree["loop"] = loop
    return tree


def test_tree_copy_is_what_deepcopy_makes():
    tree = _tree()
    fast, slow = config_copy.tree_copy(tree), copy.deepcopy(tree)
    assert config_copy.same_copy(fast, slow)
    assert list(fast) == list(tree)                                     # key order
    assert fast["a"] is fast["b"] is fast["c"][0] is fast["c"][1]       # sharing kept
    assert fast["a"] is not tree["a"] and fast["c"] is not tree["c"]    # new containers
    assert fast["loop"][1] is fast["loop"] and fast["loop"] is not tree["loop"]
    assert type(fast["od"]) is OrderedDict and type(fast["level"]) is Level
    assert fast["box"] == tree["box"] and fast["box"] is not tree["box"] and fast["box"].v is not tree["box"].v
    assert fast["t"] == tree["t"] and fast["t"][1] is not tree["t"][1]
    fast["a"]["ratios"].append(0.9)
    assert tree["a"]["ratios"] == [0.2, 0.5]


def test_same_copy_sees_values_types_and_sharing():
    shared = [1]
    assert config_copy.same_copy({"a": shared, "b": shared}, copy.deepcopy({"a": shared, "b": shared}))
    assert not config_copy.same_copy({"a": shared, "b": shared}, {"a": [1], "b": [1]})   # sharing lost
    assert not config_copy.same_copy({"a": 1}, {"a": 1.0})                              # type
    assert not config_copy.same_copy({"a": 1, "b": 2}, {"b": 2, "a": 1})                # key order
    assert not config_copy.same_copy([1, 2], [1, 3])


def test_hermes_load_config_through_the_copy(tmp_path, monkeypatch):
    from hermes_cli import config as hermes_config

    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    (tmp_path / "config.yaml").write_text("model:\n  default: m\ncompression:\n  threshold: 0.7\n")
    before = hermes_config.load_config()
    installed = config_copy.install()
    try:
        assert installed is not None and hermes_config.copy is installed
        assert config_copy.install() is installed           # counted: a second user
        config_copy.uninstall()
        assert hermes_config.copy is installed
        first = hermes_config.load_config()
        assert config_copy.same_copy(first, before)
        first["compression"]["threshold"] = 0.1
        first["model"]["default"] = "changed"
        second = hermes_config.load_config()
        assert second["compression"]["threshold"] == 0.7 and second["model"]["default"] == "m"
        assert installed.copies >= 2 and installed.disabled is None
        assert hermes_config.copy.copy is copy.copy and hermes_config.copy.Error is copy.Error
    finally:
        config_copy.uninstall()
    assert hermes_config.copy is copy
    assert config_copy.last_stats["copies"] >= 2 and config_copy.last_stats["disabled"] is None


def test_a_copy_unlike_deepcopys_turns_the_fast_one_off(monkeypatch, caplog):
    copier = config_copy.ConfigCopy()
    monkeypatch.setattr(config_copy, "tree_copy", lambda x, memo=None: {"not": "it"})
    caplog.set_level(logging.WARNING, logger="observed_engine.compare.config_copy")
    assert copier.deepcopy({"a": [1]}) == {"a": [1]}
    assert copier.disabled and "differed" in copier.disabled
    assert copier.deepcopy({"b": 2}) == {"b": 2}
    assert len([r for r in caplog.records if "copy.deepcopy again" in r.getMessage()]) == 1


def test_an_error_in_the_fast_copy_is_deepcopys_to_say(monkeypatch):
    copier = config_copy.ConfigCopy()

    def broken(x, memo=None):
        raise RecursionError("deep")

    monkeypatch.setattr(config_copy, "tree_copy", broken)
    assert copier.deepcopy([1, [2]]) == [1, [2]]
    assert "RecursionError" in copier.disabled
    with pytest.raises(TypeError):               # what copy.deepcopy raises, it raises
        config_copy.ConfigCopy().deepcopy(_Uncopyable())


class _Uncopyable:
    def __deepcopy__(self, memo):
        raise TypeError("no copies")
