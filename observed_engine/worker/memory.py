"""What the worker remembers about one engine instance between its events."""

from __future__ import annotations

from typing import Any, Optional


class EngineMemory:
    __slots__ = ("name", "engine_class", "session_id", "hooks_seen", "last_selection", "model", "tokens",
                 "last_prompt", "last_threshold", "blocked", "compacted", "aux")

    def __init__(self, name: str, engine_class: type = object) -> None:
        self.name = name                   # the inner engine's name (spans, rows, the engine label)
        self.engine_class = engine_class   # where a state number the instance lacks is looked up
        self.session_id: Optional[str] = None
        self.hooks_seen: set = set()       # hooks called at least once (first_call_propagates)
        self.last_selection: Optional[tuple] = None   # the items select_context sent last
        self.model: Optional[str] = None
        self.tokens: Any = None            # the token counter for the model's encoding
        self.last_prompt: Optional[int] = None      # last_prompt_tokens as last copied on the hook path
        self.last_threshold: Optional[int] = None   # threshold_tokens, likewise
        self.blocked: dict = {}            # BLOCKED_REASONS active at the last look -> when each began (epoch s)
        self.compacted = False             # a compaction happened; the next usage shows the cache rewrite
        self.aux: Any = None               # handlers.SummaryUsage: Hermes' usage records of the summary model
