"""Pure checks of one partition's extraction, for asset checks and CLI warnings (no
Dagster here). Each returns ``(passed, metadata, description)``."""

from __future__ import annotations

# a partition where more than this share of text units offers the model no candidate
# name is flagged: the candidate finder looks for capitalized words, which scripts
# without letter case (Chinese, Japanese, Thai, ...) never have
MAX_SHARE_WITHOUT_NAMES = 0.5


def extraction_yield(units: int, units_without_names: int, entity_mentions: int,
                     method: str = "standard") -> tuple[bool, dict, str]:
    """Whether a partition's extraction found anything worth a graph.

    Args:
        units: text units in the partition.
        units_without_names: units where no candidate name was found (no LLM call made).
        entity_mentions: entity mentions extracted from the partition.
        method: the index method (``standard`` asks the LLM about the candidate names;
            ``fast`` has no LLM and makes entities of the names themselves).

    Returns:
        (passed, metadata, description). Fails when the partition has text units but
        yields no entity at all, or when more than :data:`MAX_SHARE_WITHOUT_NAMES` of
        its units have no candidate name. An empty partition passes.
    """
    share = units_without_names / units if units else 0.0
    meta = {"text_units": units, "units_without_candidate_names": units_without_names,
            "share_without_names": round(share, 4), "entity_mentions": entity_mentions,
            "max_share_without_names": MAX_SHARE_WITHOUT_NAMES}
    if not units:
        return True, meta, "no text unit"
    problems = []
    if entity_mentions == 0:
        problems.append(f"0 entities from {units} text units")
    if share > MAX_SHARE_WITHOUT_NAMES:
        consequence = ("no entity could come from them" if method == "fast" else
                       "the LLM was not asked about them")
        problems.append(f"{units_without_names} of {units} text units ({share:.0%}) have no "
                        f"candidate name, so {consequence} (the candidate finder needs "
                        "capitalized names)")
    if not problems:
        return True, meta, f"{entity_mentions} entity mentions from {units} text units"
    return False, meta, "; ".join(problems)
