"""A token's ranks in words: what a rank counts over (the batch, its group, its answer) and,
for each method, its rank, whether it is selected and how many tokens that method keeps there,
so a rank always reads against its own method's count (``all`` keeps every token; the paper's
rules keep counts of their own, not the ratio's k)."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]

# what a rank counts over where the result does not say
UNKNOWN_POOL = "(1 = highest score)"


class RankPool(str):
    """What a rank counts over, in words ("of 214 tokens in the batch"), and how many tokens
    each method keeps there (``kept``): a method's own rule can keep another count than the
    ratio's k (``all`` keeps every token, the paper's rules their own counts)."""

    kept: dict[str, int]

    def __new__(cls, text: str, kept: dict[str, int] | None = None) -> RankPool:
        pool = super().__new__(cls, text)
        pool.kept = dict(kept or {})
        return pool


def rank_lines(tok: Json, methods: tuple[str, str], pool: str, zero: bool) -> list[str]:
    """Each method's rank of this token, with what the rank is out of and the verdict spelt out,
    next to how many tokens that method keeps in the pool (``pool``: a :class:`RankPool`), so
    a rank reads against its own method's count, never another's k.

    In a zero-signal group every gradient score ties at 0, so no rank there means anything.
    """
    if zero:
        return ["ranks: none that matter — all rewards equal, so A = 0 and no token has a gradient"]
    ranks, sel = tok.get("ranks", {}), tok.get("selected", {})
    kept = getattr(pool, "kept", {})
    shown = list(dict.fromkeys(methods)) + (["gmts"] if "gmts" in ranks else [])
    lines = [f"rank {pool}:"]
    for m in dict.fromkeys(shown):
        verdict = "selected" if sel.get(m) else "not selected"
        count = f" (it keeps the top {kept[m]})" if m in kept else ""
        lines.append(f"  {m}: #{ranks.get(m, '—')} — {verdict}{count}")
    return lines


def rank_pool(result: Json, group: Json) -> str:
    """What the ranks of ``group``'s tokens count over, from the result's selection scope: ""
    for answer scope (each answer its own pool, which :func:`render_answer` names), the
    group's or the batch's token count otherwise, and no count where the result does not say
    (never "within answer" for ranks counted over more). A :class:`RankPool` carrying each
    method's kept count there (the summary's ``selected_count``)."""
    scope = (result.get("settings") or {}).get("scope") or (result.get("summary") or {}).get(
        "scope"
    )
    if scope == "answer":
        return ""
    # batch scope over several groups ranks across all of them; group scope within the group
    summary = (result if scope == "batch" else group).get("summary") or {}
    n = summary.get("num_tokens")
    if scope not in ("batch", "group") or n is None:
        return UNKNOWN_POOL
    if scope == "group":
        where = " in its group" if "groups" in result else ""
    else:
        where = " in the batch" if "groups" in result else ""
    kept = {m: int(c) for m, c in (summary.get("selected_count") or {}).items()}
    return RankPool(f"of {n} tokens{where}", kept)
