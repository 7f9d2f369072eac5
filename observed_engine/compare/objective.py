"""What "best" means for a sweep, and the recommendation it gives.

``--objective overflow,summary-tokens,cache-lost`` ranks variants by those totals in that order
(lexicographic: the second breaks ties of the first, ...); ``--objective summary-tokens=1,
cache-lost=0.25`` ranks them by the weighted sum. Lower is better for every metric.

Hard rules, whatever the objective: a variant that lost a turn to overflow (a request larger than
the window), or whose replay of some conversation failed or was skipped, never wins (overall; per
conversation, in that conversation). Ties go to the current settings, then to the variants' order.
Every figure is a sum over conversations of the per-replay numbers in the report, so each one can
be traced to a conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .variants import Variant, VariantError

# metric -> (report key of one replay, what it is)
METRICS: Dict[str, Tuple[str, str]] = {
    "overflow": ("overflow_turns", "turns whose request exceeded the window"),
    "summary-tokens": ("summary_tokens", "tokens sent to and returned by the summary model"),
    "cache-lost": ("cache_prefix_lost_tokens", "prompt-cache prefix tokens lost"),
    "prompt-tokens": ("prompt_tokens", "prompt tokens sent to the main model, all requests"),
    "compressions": ("compressions", "compressions made"),
    "summary-failures": ("summary_failures", "compressions whose summary failed"),
    "final-tokens": ("final_tokens", "tokens of the final transcript"),
}
DEFAULT_OBJECTIVE = "overflow,summary-tokens,cache-lost"


class ObjectiveError(VariantError):
    pass


@dataclass(frozen=True)
class Objective:
    terms: Tuple[Tuple[str, Optional[float]], ...]     # (metric, weight) ; weight None: lexicographic
    text: str

    @property
    def weighted(self) -> bool:
        return any(w is not None for _, w in self.terms)

    def key(self, totals: Mapping[str, Any]) -> Tuple[float, ...]:
        values = [float(totals.get(METRICS[m][0]) or 0) for m, _ in self.terms]
        if self.weighted:
            return (sum(v * (w or 0.0) for v, (_, w) in zip(values, self.terms)),)
        return tuple(values)


def parse_objective(text: Optional[str]) -> Objective:
    text = (text or DEFAULT_OBJECTIVE).strip()
    terms: List[Tuple[str, Optional[float]]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, weight = part.partition("=")
        name = name.strip()
        if name not in METRICS:
            raise ObjectiveError(f"--objective: unknown metric {name!r}; fix: one of {', '.join(METRICS)}")
        w: Optional[float] = None
        if eq:
            try:
                w = float(weight)
            except ValueError:
                raise ObjectiveError(f"--objective: {part}: the weight must be a number; fix: --objective summary-tokens=1,cache-lost=0.25") from None
            if not w >= 0 or w == float("inf"):
                raise ObjectiveError(f"--objective: {part}: the weight must be >= 0 and finite; fix: --objective summary-tokens=1,cache-lost=0.25")
        if any(n == name for n, _ in terms):
            raise ObjectiveError(f"--objective: {name} given twice; fix: name it once")
        terms.append((name, w))
    if not terms:
        raise ObjectiveError("--objective: no metric named; fix: --objective overflow,summary-tokens,cache-lost")
    if any(w is None for _, w in terms) and any(w is not None for _, w in terms):
        raise ObjectiveError("--objective: give every metric a weight or none; fix: m1=1,m2=0.5 or m1,m2")
    return Objective(tuple(terms), text)


def metrics_of(result: Mapping[str, Any]) -> Dict[str, Any]:
    """The per-replay numbers a sweep ranks by (from a report summary)."""
    out = {key: result.get(key) for key, _ in METRICS.values() if key != "overflow_turns"}
    out["overflow_turns"] = len(result.get("over_window_turns") or [])
    return out


def comparable(result: Optional[Mapping[str, Any]]) -> bool:
    return bool(result) and result.get("status") == "ok" and not result.get("error")


def totals(per_conversation: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    keys = [k for k, _ in METRICS.values()]
    return {k: int(sum(int(m.get(k) or 0) for m in per_conversation)) for k in keys}


def rank(labels: Sequence[str], results: Mapping[str, Mapping[str, Optional[Mapping[str, Any]]]],
         objective: Objective, current: str) -> Dict[str, Any]:
    """Rank variants over conversations. ``results``: ``{session_id: {label: summary}}`` (the
    conversations that were replayed). Returns per variant its totals, whether it is eligible and
    why not, its rank; the best; and per conversation the best there."""
    sessions = list(results)
    per_variant: Dict[str, Dict[str, Any]] = {}
    for label in labels:
        rows = [results[s].get(label) for s in sessions]
        ok = [metrics_of(r) for r in rows if comparable(r)]
        why = None
        missing = sum(1 for r in rows if not comparable(r))
        t = totals(ok)
        if missing:
            why = f"{missing} conversation(s) not replayed or failed"
        elif t["overflow_turns"]:
            why = f"lost {t['overflow_turns']} turn(s) to overflow"
        per_variant[label] = {"totals": t, "eligible": why is None and bool(sessions), "why_not": why,
                              "key": list(objective.key(t)) if why is None else None}
    order = {label: i for i, label in enumerate(labels)}
    eligible = sorted((lb for lb in labels if per_variant[lb]["eligible"]),
                      key=lambda lb: (tuple(per_variant[lb]["key"]), lb != current, order[lb]))
    for i, label in enumerate(eligible, 1):
        per_variant[label]["rank"] = i
    best = eligible[0] if eligible else None
    per_conv: Dict[str, Any] = {}
    for s in sessions:
        cands = [lb for lb in labels if comparable(results[s].get(lb))
                 and not metrics_of(results[s][lb])["overflow_turns"]]
        cands.sort(key=lambda lb: (objective.key(metrics_of(results[s][lb])), lb != current, order[lb]))
        per_conv[s] = cands[0] if cands else None
    return {"variants": per_variant, "best": best, "ranking": eligible, "best_per_conversation": per_conv}


def margin(a: Mapping[str, Any], b: Mapping[str, Any]) -> Dict[str, Any]:
    """``a - b`` per metric (negative: ``a`` is lower, i.e. better)."""
    return {k: int(a.get(k) or 0) - int(b.get(k) or 0) for k, _ in METRICS.values()}


def recommendation(variants: Sequence[Variant], results: Mapping[str, Mapping[str, Optional[Mapping[str, Any]]]],
                   objective: Objective, current: str) -> Dict[str, Any]:
    """The best variant, its settings for config.yaml, and its margin over the current settings,
    overall and per conversation."""
    by_label = {v.label: v for v in variants}
    ranked = rank([v.label for v in variants], results, objective, current)
    best = ranked["best"]
    out: Dict[str, Any] = {"objective": objective.text, "current": current, "best": best, "ranking": ranked["ranking"],
                           "variants": ranked["variants"], "best_per_conversation": ranked["best_per_conversation"]}
    if best is None:
        out["why_none"] = ("no variant replayed every conversation without losing a turn to overflow"
                           if results else "no conversation was replayed")
        return out
    variant = by_label[best]
    out["settings"] = variant.as_dict()
    out["config_yaml"] = variant.config_yaml() if variant.settings else ""
    out["is_current"] = best == current
    cur = ranked["variants"].get(current)
    if cur is not None:
        out["margin_overall"] = margin(ranked["variants"][best]["totals"], cur["totals"])
    per: Dict[str, Any] = {}
    for s, row in results.items():
        b, c = row.get(best), row.get(current)
        if comparable(b) and comparable(c):
            per[s] = {"best": metrics_of(b), "current": metrics_of(c), "margin": margin(metrics_of(b), metrics_of(c))}
    out["margin_per_conversation"] = per
    return out
