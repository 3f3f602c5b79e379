"""Mention rows from one validated extraction reply: entities (types from cues or the
model, extractive descriptions), relationships with their evidence sentence, and the
co-mention edges that keep no entity of a unit isolated.
"""

from __future__ import annotations

from collections import Counter

import regex

from kgloom.extraction.evidence import (
    EXTRACTED_STRENGTH,
    NOT_AN_ENTITY,
    first_sentence_with,
    sentences,
    text_direction,
)
from kgloom.extraction.type_cues import bounded_occurrences, type_cue
from kgloom.names.candidates import is_grounded
from kgloom.names.normalize import normalize_for_match


def evidence_for(source: str, target: str, text: str, max_chars: int = 300) -> str:
    """Return the evidence of a relationship: the first sentence of ``text`` naming both
    ``source`` and ``target``, else their first sentences joined by `` … ``."""
    for sentence in sentences(text):
        if source in sentence and target in sentence:
            return sentence[:max_chars]
    return f"{first_sentence_with(source, text, max_chars // 2)} … " \
           f"{first_sentence_with(target, text, max_chars // 2)}"


def _unit_cues(names: list[str], text: str, hints: dict[str, str],
               types: tuple[str, ...]) -> dict[str, str]:
    """{name (whitespace runs collapsed): the type :func:`kgloom.extraction.type_cues.type_cue`
    gives it in ``text``, "" when none or not one of ``types``}. ``hints``: name -> the
    type a part-of-speech tagger gave it (jieba, janome). Computed once per unit."""
    out: dict[str, str] = {}
    for raw in names:
        name = " ".join(raw.split())
        cue = type_cue(name, text, hints.get(raw, hints.get(name, "")))
        out[name] = cue if cue in types else ""
    return out


def _parse_reply(obj: dict, unit_id: str, text: str, counts: Counter, allowed: set[str],
                 cues: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """Turn one validated reply into mention rows.

    ``cues``: :func:`_unit_cues` of the unit's names. Where a name has a cue, that type
    stands instead of the model's, also when the model said OTHER (a cue is evidence of
    an entity; a 135M model's OTHER is not); a name typed OTHER with no cue is dropped.
    """
    ents: dict[str, dict] = {}
    for raw_name, value in obj.get("entities", {}).items():
        name = " ".join(raw_name.split())
        etype = value["type"] if isinstance(value, dict) else value
        cue = cues.get(name, "")
        if etype == NOT_AN_ENTITY:
            if not cue:
                counts["names_typed_other"] += 1
                continue
            counts["other_overruled_by_cues"] += 1
        if cue and cue != etype.upper():
            counts["types_from_cues"] += 1
            etype = cue
        if name not in allowed or not is_grounded(name, text):
            counts["ungrounded_entities_dropped"] += 1
            continue
        desc = value["description"].strip() if isinstance(value, dict) else ""
        ents[name] = {"text_unit_id": unit_id, "title": name, "type": etype.upper(),
                      "description": desc or first_sentence_with(name, text), "cue": cue}
    rels = _parse_relationships(obj, unit_id, ents, counts, text)
    return list(ents.values()), rels


def _parse_relationships(obj: dict, unit_id: str, ents: dict, counts: Counter,
                         text: str) -> list[dict]:
    rels, seen = [], set()
    for r in obj.get("relationships", []):
        pair = r if isinstance(r, list) else (r["source"], r["target"])  # a pair or an object
        s, t = " ".join(pair[0].split()), " ".join(pair[1].split())
        if s == t or s not in ents or t not in ents:
            counts["relationships_dropped"] += 1
            continue
        stated = text_direction(s, t, text)  # the text's direction, not the pair's order
        if stated and stated != (s, t):
            counts["relationships_turned_to_text"] += 1
            s, t = stated
        if (s, t) in seen:
            counts["relationships_dropped"] += 1
            continue
        seen.add((s, t))
        desc = r["description"].strip() if isinstance(r, dict) and "description" in r else ""
        rels.append({"text_unit_id": unit_id, "source": s, "target": t,
                     "description": desc or evidence_for(s, t, text),
                     "strength": EXTRACTED_STRENGTH, "kind": "extracted"})
    return rels


def _co_mentions(unit_id: str, names: list[str], text: str, strength: float,
                 rels: list[dict], subject: str | None = None) -> list[dict]:
    """Co-mention edges that keep a unit's entities connected.

    With the unit's ``subject`` (:func:`record_subject`; ``rels`` then all have it at
    one end): an edge from it to every other entity it has no relationship with.
    An entity named to tell who another one is ("He married Margaret, daughter of
    Arnold": :func:`described_by`) gets its edge from that one instead.
    Otherwise (no subject), only names that share a sentence are joined: with no
    relationship at all, each of the (at most 4) next most mentioned entities gets an
    edge to the most mentioned one it shares a sentence with; with relationships, each
    entity left without one gets an edge to the most mentioned entity that has one and
    shares a sentence with it (else to the most mentioned one sharing a sentence), and
    an entity sharing no sentence with another gets none. A passage relates what it
    names to its subject, not each name to each other: on the 2Wiki pool most edges
    between every pair of the five most mentioned were "linked only through a third
    entity" or "named with no tie stated" by its hand labels (``bench/data/labels/``).
    In a unit with no subject (a chapter of a book) a name sharing no sentence with the
    unit's most mentioned name is no more tied to it: all 35 such edges of 100 labelled
    book relationships (``book-relationships-c``) were "no relation stated".
    Descriptions are the evidence sentence (:func:`evidence_for`); each pair runs in the
    text's direction where a sentence names both (:func:`text_direction`).
    """
    norm = normalize_for_match(text)
    ranked = sorted(names, key=lambda n: (-norm.count(normalize_for_match(n)), n))
    linked = {r["source"] for r in rels} | {r["target"] for r in rels}
    if subject is not None:
        pairs = [(described_by(n, names, text, subject) or subject, n)
                 for n in ranked if n != subject and n not in linked]
    else:
        together = sharing_sentences(ranked, text)
        alone = ranked[1:5] if not rels else [n for n in ranked if n not in linked]
        pairs = []
        for n in alone:
            partners = [m for m in ranked if m != n and m in together[n]]
            partner = next((m for m in partners if m in linked), None) or next(
                iter(partners), None)
            if partner is not None:
                pairs.append((partner, n))
    pairs = [text_direction(a, b, text) or (a, b) for a, b in pairs]
    return [{"text_unit_id": unit_id, "source": a, "target": b,
             "description": evidence_for(a, b, text), "strength": strength,
             "kind": "co_mention"} for a, b in pairs]


LIST_NAMES = 4  # a sentence naming more of a unit's names is a list: it ties none of them


def sharing_sentences(names: list[str], text: str, reach: int = 0) -> dict[str, set[str]]:
    """{name: the other ``names`` found with it in one of :func:`sentences` of ``text``,
    or at most ``reach`` sentences apart} (Unicode and case normalized). A name is found
    where it or a shorter one of ``names`` made of its words stands ("Scrooge's" for
    "Ebenezer Scrooge" when the unit names both), as resolution later joins them."""
    keys = {n: normalize_for_match(n) for n in names}
    forms = {n: [keys[m] for m in names if keys[m] and (m == n or _words_of(keys[m], keys[n]))]
             for n in names}
    where: dict[str, list[int]] = {n: [] for n in names}
    for i, sentence in enumerate(sentences(text)):
        flat = normalize_for_match(sentence)
        found = [n for n in names if any(f in flat for f in forms[n])]
        longest = [n for n in found if not any(_words_of(keys[n], keys[m]) for m in found)]
        if len(longest) > LIST_NAMES:
            continue  # a list ("There were Cains and Abels, Pharaoh's daughters, ...");
            # a name's shorter forms ("Mr. Scrooge", "Scrooge") count once
        for n in found:
            where[n].append(i)
    return {n: {m for m in names if m != n and any(abs(i - j) <= reach for i in where[n]
                                                   for j in where[m])} for n in names}


def _words_of(short: str, long: str) -> bool:
    """Is ``short`` a run of whole words of the longer ``long``?"""
    return len(short) < len(long) and f" {short} " in f" {long} "


# "Margaret, daughter of ", "Beatrice, a niece of ": one to three lower-case words and
# "of" after a comma, right before a name
_APPOSITION_OF = regex.compile(r",\s+(?:\p{Ll}[\p{L}\p{M}'’\-]*\s+){1,3}of\s+(?:the\s+)?$")


def described_by(name: str, names: list[str], text: str, subject: str) -> str | None:
    """The name among ``names`` that ``name`` is named to describe at its first mention
    in ``text``, or None: "He married Margaret, daughter of Arnold" names Arnold to tell
    who Margaret is, so Arnold's tie is to Margaret, not to the passage's ``subject``
    (on the 2Wiki pool's hand labels, "linked only through a third entity" was the
    commonest fault of a subject's co-mention edges that join two real entities). The
    form: another name, a comma, one to three lower-case words and "of" right before
    ``name``; never ``subject`` or ``name`` itself."""
    found = bounded_occurrences(name, text)
    if not found:
        return None
    start = found[0][0]
    m = _APPOSITION_OF.search(text, max(0, start - 80), start)
    if m is None:
        return None
    head = text[:m.start()]
    return next((n for n in sorted(names, key=len, reverse=True)
                 if n not in (name, subject) and head.endswith(n)), None)
