"""benchmarks/hook_instructions.py's step variants build and run (valgrind is not needed for this)."""

from __future__ import annotations

import sys

from support.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import hook_instructions


def test_every_step_variant_runs_and_each_takes_out_something():
    whole = hook_instructions.STEP_VARIANTS["whole"][0]
    for variant, (source, against) in hook_instructions.STEP_VARIANTS.items():
        assert hook_instructions.step_child(variant) == 0, variant
        if against == "whole":
            assert source != whole, f"{variant}: the replacement found nothing to take out"
