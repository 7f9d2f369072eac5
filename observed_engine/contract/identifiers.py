"""Identifiers from the outside (engine names, session ids, tool names, failure kinds), made
safe once where they enter.

They end up as metric labels, span attributes, store rows and dashboard text. A value
that is not a string, whose ``__str__`` raises, or that holds a lone surrogate (Hermes'
API server takes the session id from a header that aiohttp decodes with
``surrogateescape``) must not break any of those: a lone surrogate cannot be encoded as
UTF-8, which stops an SQLite batch, a Prometheus scrape and an OTLP export alike.
"""

from __future__ import annotations

MAX_IDENTIFIER_CHARS = 512     # longer ones are cut (and marked): a label or a column, not a payload
_CUT_MARK = "…"


def identifier(value: object) -> str:
    """``value`` as text that encodes as UTF-8: lone surrogates become U+FFFD, a value whose
    ``__str__`` raises becomes ``<unprintable TYPE>``, longer than MAX_IDENTIFIER_CHARS is cut."""
    if type(value) is str:
        text = value
    else:
        try:
            text = str(value)
            if type(text) is not str:
                raise TypeError("__str__ returned a non-string")
        except Exception:  # a __str__ that raises or returns a non-str: the text names the type instead
            try:
                kind = type(value).__name__
            except Exception:  # a metaclass whose __name__ raises: the generic kind
                kind = "object"
            text = f"<unprintable {kind}>"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if len(text) > MAX_IDENTIFIER_CHARS:
        text = text[: MAX_IDENTIFIER_CHARS - 1] + _CUT_MARK
    return text
