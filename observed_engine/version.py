"""The package version, in a module of its own: the lazy package root and every layer read it."""

__version__ = "0.1.0"

# The Hermes releases the CI runs (scripts/test.sh: the main suite on the last, a fast check of
# each other in tests/hermes_versions/) and the range they stand for, as pip writes it (the
# `hermes` extra in pyproject.toml). `observed-engine doctor` warns outside the range.
HERMES_TESTED = ("0.16.0", "0.17.0", "0.18.2", "0.19.0")
HERMES_TESTED_RANGE = ">=0.16,<0.20"
