"""Counting tokens of texts and chat messages, with a bounded cache; one shared counter per encoding.

``TokenCounter.method`` says how a number was made: ``"tiktoken:<encoding>"`` (exact for that
encoding; ``o200k_base`` stands in for non-OpenAI models) or ``"estimate"`` (``ceil(len/4)``).
When editing: counts are cached per text (bounded, two generations), so a grown transcript
encodes only its new messages, and :func:`counter_for` shares one counter per encoding actually
used; the shared counters encode in a helper process (:mod:`.helper`).

The full account: docs/design/internals.md, *observed_engine/tokens/counter.py*.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import helper as helper_process
from . import provisioning
from . import text as message_text

logger = logging.getLogger(__name__)

__all__ = ["TokenCounter", "choose_encoding", "counter_for", "estimate_tokens", "resolve_encoding_name"]

# The once-per-process "counts are estimates" warning.
_WARN_LOCK = threading.Lock()
_warned = False

# Per thread: batches estimated because the helper did not answer before a delivery's deadline
# (helper.hurry), since the caller last took the number (take_estimated()).
_HURRIED = threading.local()

# counter_for(): resolved encoding name ("o200k_base", ..., "estimate") -> the shared counter.
_SHARED_LOCK = threading.Lock()
_SHARED: dict[str, TokenCounter] = {}


def _warn_once(message: str) -> None:
    global _warned
    with _WARN_LOCK:
        first = not _warned
        _warned = True
    logger.log(logging.WARNING if first else logging.DEBUG, "%s", message)


# --------------------------------------------------------------------------- choosing


_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada")
_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")


def choose_encoding(model: str | None) -> str:
    """The tiktoken encoding for ``model`` ("auto" selection).

    tiktoken's own table decides when it knows the model (a ``provider/`` prefix
    such as ``openai/gpt-4o`` is ignored).  Otherwise: ``cl100k_base`` for
    gpt-4 / gpt-3.5 style names, and ``o200k_base`` for gpt-4o / o1 / o3 / o4 /
    gpt-5 style names and for everything else (Claude, Llama, Hermes, Qwen, ...),
    where it is the closest generally available stand-in.
    """
    if not isinstance(model, str) or not model.strip():
        return "o200k_base"
    name = model.strip().lower()
    if not name.startswith("ft:"):
        # "openai/gpt-4o", "openrouter/anthropic/claude-3.5-sonnet", "llama3:8b" (a tag)
        name = name.rsplit("/", 1)[-1].split(":", 1)[0] or name
    try:
        from tiktoken.model import encoding_name_for_model

        return encoding_name_for_model(name)
    except Exception:  # KeyError for unknown models; ImportError without tiktoken
        pass
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: the ~4 characters-per-token heuristic (an estimate)."""
    return (len(text) + 3) // 4


def _normal_tokenizer(tokenizer: Any) -> str:
    """The tokenizer setting as a counter reads it: anything but a non-empty string is ``"auto"``."""
    return tokenizer if isinstance(tokenizer, str) and tokenizer else "auto"


def _wanted_encoding(tokenizer: str, model: str | None) -> str | None:
    """The encoding the setting asks for; None for ``"estimate"``."""
    if tokenizer == "estimate":
        return None
    if tokenizer == "auto":
        return choose_encoding(model)
    return tokenizer


def _open_encoding(name: str, helper: bool) -> Any:
    """The encoder for ``name``: with ``helper``, a :class:`~.helper.HelperEncoder` (the files are
    checked here, the encoding is loaded in the helper process) unless this process already has the
    encoding or no helper can be started; otherwise tiktoken's Encoding, loaded here. Raises
    EncodingUnavailable."""
    if helper:
        local = provisioning._LOADED.get(name)
        if local is not None:
            return local
        if helper_process.enabled():
            helper = helper_process.running(name)
            if helper is not None:
                return helper       # files already checked for it: not read and hashed again per engine
            cache_dir = provisioning.prepare_offline(name)
            try:
                return helper_process.helper_for(name, cache_dir)
            except OSError as exc:
                logger.debug("cannot start the token-counting helper (%s); loading %s here", exc, name)
    return provisioning._load_encoding(name)


def _load_first(tokenizer: str, wanted: str | None, helper: bool = False) -> tuple[str | None, Any, list[str]]:
    """``(name, encoder, reasons)``: the first of ``wanted`` (and, with ``"auto"``, ``o200k_base``)
    that loads offline, or ``(None, None, reasons)`` with why each failed (no reasons if nothing is wanted).
    ``helper``: counted in a helper process when one can be started (see :func:`_open_encoding`)."""
    if wanted is None:
        return None, None, []
    candidates = [wanted]
    if tokenizer == "auto" and wanted != "o200k_base":
        candidates.append("o200k_base")  # closer than the estimate if e.g. r50k isn't cached
    reasons = []
    for name in candidates:
        try:
            encoder = _open_encoding(name, helper)
        except provisioning.EncodingUnavailable as exc:
            reasons.append(str(exc))
            continue
        except Exception as exc:  # never break the host
            reasons.append(f"{name}: unexpected {type(exc).__name__}: {exc}")
            continue
        if name != wanted:
            logger.debug("encoding %s unavailable offline; using %s", wanted, name)
        return name, encoder, reasons
    return None, None, reasons


def _estimating_because(reasons: list[str]) -> str:
    """Warn (once per process) that counts are estimates; returns the joined reason."""
    reason = "; ".join(reasons)
    _warn_once(f"token counts are estimates (ceil(chars/4)), not tiktoken: {reason}")
    return reason


# --------------------------------------------------------------------------- cache


class _CountCache:
    """Bounded text -> token count cache with two generations and bulk eviction.

    Lookups check the young generation, then the old one (promoting hits).  When
    the young generation reaches half the entry or character budget it becomes
    the old generation and the previous old one is dropped in one step.
    """

    __slots__ = ("_young", "_old", "_young_chars", "_half_entries", "_half_chars", "_lock")

    def __init__(self, max_entries: int, max_chars: int) -> None:
        self._young: dict[str, int] = {}
        self._old: dict[str, int] = {}
        self._young_chars = 0
        self._half_entries = max(1, max_entries // 2)
        self._half_chars = max(1, max_chars // 2)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def get(self, text: str) -> int | None:
        n = self._young.get(text)
        if n is None:
            n = self._old.get(text)
            if n is not None:
                self.put(text, n)
        return n

    def put(self, text: str, n: int) -> None:
        self._young[text] = n
        self._young_chars += len(text)
        if len(self._young) >= self._half_entries or self._young_chars >= self._half_chars:
            with self._lock:
                if len(self._young) >= self._half_entries or self._young_chars >= self._half_chars:
                    self._old = self._young
                    self._young = {}
                    self._young_chars = 0


class _State:
    """What a counter counts with; replaced as a whole when the encoding changes."""

    __slots__ = ("encoding_name", "encoder", "method", "cache")

    def __init__(self, encoding_name: str | None, encoder: Any, cache: _CountCache | None) -> None:
        self.encoding_name = encoding_name
        self.encoder = encoder
        self.method = f"tiktoken:{encoding_name}" if encoder is not None else "estimate"
        self.cache = cache


# --------------------------------------------------------------------------- counter


class TokenCounter:
    """Counts tokens of texts and chat messages (see the module docstring).

    ``encoding``: ``"auto"`` (choose from ``model``), a tiktoken encoding name, or
    ``"estimate"`` (never imports tiktoken).  If the encoding cannot be loaded
    offline the counter uses the estimate and logs one warning per process.
    ``helper``: encode in a helper process (:mod:`.helper`; the same numbers) instead of loading
    the encoding here; if the helper fails, the encoding is loaded here after all.
    """

    DEFAULT_CACHE_ENTRIES = 100_000
    DEFAULT_CACHE_CHARS = 64_000_000

    def __init__(
        self,
        encoding: str = "auto",
        model: str | None = None,
        *,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        cache_chars: int = DEFAULT_CACHE_CHARS,
        helper: bool = False,
    ) -> None:
        self.encoding = _normal_tokenizer(encoding)
        self.helper = helper
        self.model = model
        self.malformed = 0
        self.fallback_reason: str | None = None
        self._cache_entries = cache_entries
        self._cache_chars = cache_chars
        self._lock = threading.Lock()
        self._wanted: str | None = None
        self._state = self._build_state(_wanted_encoding(self.encoding, model))

    # -- configuration ------------------------------------------------------

    @property
    def method(self) -> str:
        """``"tiktoken:<encoding>"`` or ``"estimate"``."""
        return self._state.method

    @property
    def encoding_name(self) -> str | None:
        """The tiktoken encoding in use, None when estimating."""
        return self._state.encoding_name

    def set_model(self, model: str | None) -> None:
        """Record the model; with ``encoding="auto"`` re-choose the encoding (the cache is kept if it doesn't change)."""
        with self._lock:
            self.model = model
            if self.encoding != "auto":
                return
            wanted = _wanted_encoding(self.encoding, model)
            if wanted == self._wanted:
                return  # same choice: keep the encoder and its cache (or the fallback)
            state = self._build_state(wanted)
            if state.encoding_name != self._state.encoding_name or state.encoder is None:
                self._state = state  # otherwise the same encoder was substituted: keep the cache

    def _build_state(self, wanted: str | None) -> _State:
        self._wanted = wanted
        name, encoder, reasons = _load_first(self.encoding, wanted, self.helper)
        if encoder is not None:
            self.fallback_reason = None
            return _State(name, encoder, _CountCache(self._cache_entries, self._cache_chars))
        self.fallback_reason = _estimating_because(reasons) if reasons else None
        return _State(None, None, None)

    # -- counting ------------------------------------------------------------

    def count_text(self, text: Any) -> int:
        """Tokens in ``text``: ``len(enc.encode(text, disallowed_special=()))`` or the estimate.

        Non-strings count 0.  Not cached (see :meth:`count_message`).
        """
        if not isinstance(text, str) or not text:
            return 0
        return self._encode_lens(self._state, [text])[0]

    def _encode_lens(self, state: _State, texts: list[str]) -> list[int]:
        """The token count of each text, in order, encoded now (no cache)."""
        encoder = state.encoder
        if encoder is None:
            return [estimate_tokens(text) for text in texts]
        count_batch = getattr(encoder, "count_batch", None)
        if count_batch is not None:     # a helper process
            try:
                return count_batch(texts)
            except helper_process.HelperBusy:
                # a session end is waiting and the helper (lowest CPU priority) has not answered: this
                # batch is estimated, not cached, and said (take_estimated); the helper goes on
                _HURRIED.n = getattr(_HURRIED, "n", 0) + 1
                return [estimate_tokens(text) for text in texts]
            except Exception as exc:
                return self._encode_lens(self._without_helper(state, exc), texts)
        out = []
        for text in texts:
            try:
                out.append(len(encoder.encode(text, disallowed_special=())))
            except Exception:  # pragma: no cover - tiktoken handles odd unicode itself
                out.append(estimate_tokens(text))
        return out

    def _without_helper(self, state: _State, exc: BaseException) -> _State:
        """The helper failed: the same encoding loaded in this process (the cache is kept, the
        numbers are the same), or the estimate if it cannot be."""
        with self._lock:
            current = self._state
            if current is not state and current.encoder is not state.encoder:
                return current          # another thread already replaced it
            if getattr(exc, "inherited", False):
                # a forked child: the helper is the parent's; the child starts its own
                try:
                    encoder = _open_encoding(state.encoding_name, True)
                    replacement = _State(state.encoding_name, encoder, state.cache)
                    if self._state is current:
                        self._state = replacement
                    return replacement
                except Exception:  # the reload failed: the current encoder is kept
                    pass
            logger.warning("observed-engine: the token-counting helper process failed (%s: %s); "
                           "loading %s in this process", type(exc).__name__, exc, state.encoding_name)
            try:
                encoder = provisioning._load_encoding(state.encoding_name)
                replacement = _State(state.encoding_name, encoder, state.cache)
            except Exception as load_exc:
                self.fallback_reason = _estimating_because([str(load_exc)])
                replacement = _State(None, None, None)
            if self._state is current:
                self._state = replacement
            return replacement

    def _count_all(self, state: _State, messages: Iterable[Any]) -> int:
        """Content-only tokens of ``messages``: every text not in the cache encoded in one batch."""
        texts: list[str] = []
        for message in messages:
            try:
                ok = message_text._collect_texts(message, texts)
            except Exception:  # pragma: no cover - e.g. a Mapping whose .get raises
                ok = False
            if not ok:
                self.malformed += 1
        cache = state.cache
        if cache is None:
            return sum(estimate_tokens(text) for text in texts if text)
        known: dict[str, int] = {}
        missing: list[str] = []
        for text in texts:
            if not text or text in known:
                continue
            n = cache.get(text)
            if n is None:
                missing.append(text)
                known[text] = 0
            else:
                known[text] = n
        if missing:
            hurried = getattr(_HURRIED, "n", 0)
            counts = self._encode_lens(state, missing)
            exact = getattr(_HURRIED, "n", 0) == hurried
            for text, n in zip(missing, counts):
                known[text] = n
                if exact:
                    cache.put(text, n)
        return sum(known[text] for text in texts if text)

    def count_message(self, message: Any) -> int:
        """Content-only tokens of one chat message (see :mod:`observed_engine.tokens.text`)."""
        return self._count_all(self._state, (message,))

    def count_messages(self, messages: Any) -> int:
        """Sum of :meth:`count_message`; cached per text, so a recount only encodes new content."""
        state = self._state
        if messages is None:
            return 0
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            return self._count_all(state, (messages,))
        return self._count_all(state, messages)

    def count_messages_from(self, messages: Any, start: int) -> int:
        """Tokens of ``messages[start:]`` (Python slice semantics), e.g. the prompt-cache
        tokens lost from the first differing message to the end."""
        if messages is None:
            return 0
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            return self.count_messages(messages) if not start else 0
        try:
            if not isinstance(messages, Sequence):
                messages = list(messages)
            tail = messages[start:]
        except Exception:  # an iterable that raises when listed, or a slice that raises: no tokens counted
            return 0
        return self.count_messages(tail)

    def cache_size(self) -> int:
        """Number of cached text counts."""
        cache = self._state.cache
        return len(cache) if cache is not None else 0

    def __repr__(self) -> str:
        return f"TokenCounter(method={self.method!r}, model={self.model!r})"


# --------------------------------------------------------------------------- shared counters


def take_estimated() -> int:
    """How many batches this thread's counters estimated (``ceil(chars/4)``) since the last call,
    because the helper did not answer before a delivery's deadline (:class:`.helper.hurry`); resets it."""
    n = getattr(_HURRIED, "n", 0)
    if n:
        _HURRIED.n = 0
    return n


def resolve_encoding_name(tokenizer: str, model: str | None) -> str:
    """The encoding ``TokenCounter(tokenizer, model)`` counts with now: a tiktoken encoding name
    (``"o200k_base"``, ``"cl100k_base"``, ...) or ``"estimate"``.

    ``"estimate"`` when the setting says so (tiktoken is then not imported) or when no
    candidate loads offline; with ``"auto"`` an unavailable choice falls back to
    ``o200k_base`` first, as the counter does.  Loads the encoding if needed (offline, once).
    """
    tokenizer = _normal_tokenizer(tokenizer)
    name, _, _ = _load_first(tokenizer, _wanted_encoding(tokenizer, model))
    return name or "estimate"


def counter_for(tokenizer: str, model: str | None) -> TokenCounter:
    """The process-wide counter for the encoding ``(tokenizer, model)`` resolves to.

    One counter (one encoder, one bounded cache) per :func:`resolve_encoding_name`, created
    under a lock, so ``counter_for("auto", "gpt-4o") is counter_for("auto", "claude-3")``
    (both ``o200k_base``).  A shared counter's encoding is fixed: don't call ``set_model``
    on it.  Its ``malformed`` counts every caller's messages, and its ``fallback_reason``
    stays None: why counts are estimates is logged (once per process) instead. It counts in a
    helper process unless ``OBSERVED_TOKENIZER_PROCESS=0`` (or the process already has the encoding).
    """
    tokenizer = _normal_tokenizer(tokenizer)
    helper = helper_process.enabled()
    name, _, reasons = _load_first(tokenizer, _wanted_encoding(tokenizer, model), helper)
    if name is None and reasons:
        _estimating_because(reasons)
    key = name or "estimate"
    counter = _SHARED.get(key)
    if counter is None:
        with _SHARED_LOCK:
            counter = _SHARED.get(key)
            if counter is None:
                counter = TokenCounter(key, helper=helper)
                _SHARED[key] = counter
    return counter
