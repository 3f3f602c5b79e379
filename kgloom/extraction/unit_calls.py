"""The extraction calls: one unit prepared (candidates, cues, text cut to fit the
context), one call per unit or several short units packed into one call, then each
unit's mention rows, gleaning rounds and co-mention edges.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from kgloom.extraction.extraction_prompts import (
    GLEANING_TEMPLATE,
    STAGE,
    extraction_schema,
    extraction_template,
    gleaning_schema,
    named_sentences,
)
from kgloom.extraction.mentions import (
    _co_mentions,
    _parse_relationships,
    _parse_reply,
    _unit_cues,
    sharing_sentences,
)
from kgloom.extraction.unit_names import record_subject, subject_forms, unit_candidates
from kgloom.llm import CachedLLM, prompt_room, reply_token_bound, structured_call
from kgloom.names.candidates import MAX_CANDIDATES
from kgloom.settings.indexing import IndexSettings


def _cut(text: str, share: float) -> str:
    """The first ``share`` of ``text``, ended at the last sentence end or whitespace."""
    head = text[:max(1, int(len(text) * share))]
    m = re.search(r"(?s).*[.!?。！？]\s", head) or re.search(r"(?s).*\s", head)
    return (m.group(0) if m and len(m.group(0)) > len(head) // 2 else head).rstrip()


@dataclass
class _Unit:
    """One text unit made ready for its extraction call (:func:`_prepare_unit`)."""

    unit_id: str
    text: str  # the unit's text (cut when the prompt did not fit the context)
    shown: str  # title and text: what descriptions, evidence and cues come from
    names: list[str]  # candidate names, in prompt order
    cues: dict[str, str]  # :func:`_unit_cues`
    cued: dict[str, str]  # name -> its cue's type: not asked of the model
    prompt_text: str  # what the call shows of the unit (title, named sentences)
    failures: list[dict]  # of the open-extraction call, if any
    title: str | None = None  # its record's title, the name of its subject


def _prepare_unit(llm: CachedLLM, unit_id: str, text: str, settings: IndexSettings,
                  counts: Counter, vocabulary: Counter[str] | None, title: str | None,
                  ) -> _Unit | list[dict]:
    """The candidates, cues and shown text of one unit, the text cut until the unit's own
    call fits the model's context (see :func:`extract_unit`); the failure rows of its
    open-extraction call instead when the unit has no candidate name."""
    template = extraction_template(settings.llm_descriptions)
    types = ", ".join(settings.entity_types)
    for _ in range(6):  # the prompt must fit the model's context: cut the text if not
        cands, failures = unit_candidates(llm, unit_id, text, settings, counts, vocabulary,
                                          title)
        names = [c.name for c in cands]
        if not names:
            counts["units_without_names"] += 1
            return failures
        shown = f"{title}\n\n{text}" if title else text
        cues = _unit_cues(names, shown, {c.name: c.hint for c in cands if c.hint},
                          settings.entity_types)
        cued: dict[str, str] = {}  # name -> the type its cue gives: not asked of the model
        if not settings.type_cued_names and not settings.llm_descriptions:
            cued = {n: cue for n in names if (cue := cues[" ".join(n.split())])}
        prompt_text = (named_sentences(text, names) if settings.extraction_text
                       == "named_sentences" else text)
        prompt_text = f"{title}\n\n{prompt_text}" if title else prompt_text
        unit = _Unit(unit_id, text, shown, names, cues, cued, prompt_text, failures, title)
        schema = extraction_schema(names, settings, [n for n in names if n not in cued])
        room = prompt_room(llm, template, reply_token_bound(schema) or template.max_tokens,
                           types=types, text=prompt_text)
        if room is None or room >= 0 or len(text) < 200:
            return unit
        counts["units_cut_to_fit_context"] += 1
        text = _cut(text, 0.75)
    return unit


def pack_label(k: int) -> str:
    """The label of the ``k``-th unit (from 0) of a packed call: in front of its text in
    the prompt, and the key of its relationships in the reply."""
    return f"[{k + 1}]"


def unit_schema(units: list[_Unit], settings: IndexSettings) -> dict:
    """The reply schema of one extraction call for ``units``: :func:`extraction_schema`
    for one unit; for several (a packed call), the type of every distinct name once (the
    names cued in every unit that has them not asked) and ``relationships`` an object
    with one array per unit (key :func:`pack_label`), each of its own names' pairs only
    and ``max_relationships_per_unit`` long, so no relationship can join two units."""
    names = list(dict.fromkeys(n for u in units for n in u.names))
    typed = [n for n in names if not all(n in u.cued for u in units if n in u.names)]
    schema = extraction_schema(names, settings, typed)
    if len(units) > 1:
        per_unit = {pack_label(k): extraction_schema(u.names, settings)["properties"]
                    ["relationships"] for k, u in enumerate(units)}
        schema["properties"]["relationships"] = {
            "type": "object", "properties": per_unit, "required": list(per_unit),
            "additionalProperties": False}
    return schema


def _call_units(llm: CachedLLM, units: list[_Unit], settings: IndexSettings,
                counts: Counter) -> tuple[dict | None, dict | None]:
    """One extraction call for ``units`` (one, or several packed: :func:`extract_pack`)
    under :func:`unit_schema`, each packed unit's text after its :func:`pack_label`.
    Returns :func:`kgloom.llm.structured_call`'s (reply, failure row)."""
    text = units[0].prompt_text if len(units) == 1 else PACK_SEPARATOR.join(
        f"{pack_label(k)} {u.prompt_text}" for k, u in enumerate(units))
    return structured_call(llm, extraction_template(settings.llm_descriptions), STAGE,
                           units[0].unit_id, settings.seed, schema=unit_schema(units, settings),
                           types=", ".join(settings.entity_types), text=text)


def _finish_unit(llm: CachedLLM, unit: _Unit, obj: dict, settings: IndexSettings,
                 counts: Counter) -> tuple[list[dict], list[dict], list[dict]]:
    """Mention rows of one unit from the reply ``obj`` of its call (only its own names and
    the relationships between them), then its gleaning rounds and co-mention edges."""
    names, cued, text, unit_id = unit.names, unit.cued, unit.text, unit.unit_id
    failures = list(unit.failures)
    counts["names_typed_by_cues_only"] += sum(n not in obj.get("entities", {}) for n in cued)
    replied = obj.get("entities", {})
    obj = {**obj, "entities": {n: replied[n] if n in replied else cued[n]
                               for n in names if n in replied or n in cued}}
    ents, rels = _parse_reply(obj, unit_id, unit.shown, counts, set(names), unit.cues)
    entity_names = [e["title"] for e in ents]
    for round_no in range(settings.max_gleanings if len(ents) >= 2 else 0):
        found = "; ".join(f"{r['source']} - {r['target']}" for r in rels) or "(none)"
        glean, failure = structured_call(
            llm, GLEANING_TEMPLATE, STAGE, f"{unit_id}#glean{round_no + 1}", settings.seed,
            schema=gleaning_schema(entity_names, settings), names=", ".join(entity_names),
            found=found, text=text)
        if glean is None:
            failures += [failure] if failure else []
            break
        known = {(r["source"], r["target"]) for r in rels}
        more = [r for r in _parse_relationships(glean, unit_id, {n: 1 for n in entity_names},
                                                counts, text)
                if (r["source"], r["target"]) not in known]
        counts["gleaned_relationships"] += len(more)
        rels += more
        if not more:
            break
    subject = record_subject(entity_names, unit.title)
    if subject is not None:
        kept = [r for r in rels if subject in (r["source"], r["target"])]
        counts["relationships_without_the_subject"] += len(rels) - len(kept)
        # "Iglesias" in the passage on Julio Iglesias is Julio Iglesias: no relationship
        # between them (the mention stays, the name's evidence for linking a question)
        forms = subject_forms(entity_names, subject, unit.text)
        counts["subject_short_forms"] += len(forms)
        rels = [r for r in kept if r["source"] not in forms and r["target"] not in forms]
        entity_names = [n for n in entity_names if n not in forms]
    else:
        # a unit with no subject (a chapter): a relationship between two names far apart
        # is the model's guess (hand labels of 55 book relationships: 2 of 22 supported
        # where no 3 sentences held both, 16 of 33 where they did)
        together = sharing_sentences(entity_names, text, reach=STATED_REACH)
        kept = [r for r in rels if r["target"] in together.get(r["source"], ())]
        counts["relationships_without_a_shared_sentence"] += len(rels) - len(kept)
        rels = kept
    if len(entity_names) >= 2 and settings.co_mention_edges:
        extra = _co_mentions(unit_id, entity_names, text, settings.co_mention_strength,
                             rels, subject)
        counts["co_mention_edges"] += len(extra)
        rels += extra
    return ents, rels, failures


def extract_unit(llm: CachedLLM, unit_id: str, text: str, settings: IndexSettings,
                 counts: Counter, vocabulary: Counter[str] | None = None,
                 title: str | None = None,
                 ) -> tuple[list[dict], list[dict], list[dict]]:
    """Extract one text unit: returns (entity mention rows, relationship rows, failure rows).

    Rows follow ``ENTITY_MENTIONS_SCHEMA``, ``RELATIONSHIP_MENTIONS_SCHEMA`` and
    ``FAILURES_SCHEMA``. ``title``: the record's title (see ``title_candidates``), shown
    to the model above the text and a candidate name. A unit with no candidate name makes
    no typing call and yields nothing. When the prompt and the longest reply the schema
    allows do not fit the model's context window (:func:`kgloom.llm.prompt_room`; text in scripts
    such as Chinese takes about twice as many model tokens as chunking tokens), the text
    shown is cut to its first three quarters at a sentence end, as often as needed, and
    the candidates are taken from what is shown (counted in
    ``units_cut_to_fit_context``).
    """
    unit = _prepare_unit(llm, unit_id, text, settings, counts, vocabulary, title)
    if not isinstance(unit, _Unit):
        return [], [], unit
    return _extract_prepared(llm, unit, settings, counts)


# a relationship the model states in a unit with no subject stands only where its two
# names are at most this many sentences apart: dialogue and pronouns carry a relation
# across sentences (Fan and Scrooge's scene names them 4 sentences apart). On the book
# (docs/graph-quality.md): 5 keeps every gold pair and drops 7 of its 148 relationships;
# 2 drops 34 and the gold pair Scrooge-Fan
STATED_REACH = 5
PACK_SEPARATOR = "\n\n"  # between the texts of the units of one packed call


def extract_pack(llm: CachedLLM, rows: list[tuple[str, str, str | None]],
                 settings: IndexSettings, counts: Counter,
                 vocabulary: Counter[str] | None = None, nameless: set[str] | None = None,
                 ) -> list[tuple[list[dict], list[dict], list[dict]]]:
    """Extract several short text units in as few calls as their names allow.

    ``rows``: (unit id, text, title or None) of consecutive short units
    (:func:`pack_units`). Each unit's candidates, cues and shown text are prepared as
    for :func:`extract_unit`; the units with names are then taken in order into calls of
    at most :data:`kgloom.names.candidates.MAX_CANDIDATES` distinct names (the size of a
    one-unit reply). A call shows the units' texts one after the other, each after its
    :func:`pack_label`, asks the type of every name once, and the relationships of each
    unit in an array of its own (:func:`unit_schema`: its own names only, so the model
    cannot join two units). Each unit takes the types of its own names and its own
    array. A packed call that fails (bad reply twice) or does not fit the context falls
    back to one call per unit (``packs_split_after_failure`` /
    ``packs_split_to_fit_context``), so packing loses no unit.

    Returns:
        per row, in order, what :func:`extract_unit` returns for it; the ids of the
        units with no candidate name are added to ``nameless`` when given.
    """
    results: list[tuple[list[dict], list[dict], list[dict]]] = [([], [], [])] * len(rows)
    ready: list[tuple[int, _Unit]] = []
    for i, (unit_id, text, title) in enumerate(rows):
        unit = _prepare_unit(llm, unit_id, text, settings, counts, vocabulary, title)
        if isinstance(unit, _Unit):
            ready.append((i, unit))
        else:
            results[i] = ([], [], unit)
            if nameless is not None:
                nameless.add(unit_id)
    for pack in _name_bounded_packs(ready):
        for i, result in _pack_results(llm, pack, settings, counts):
            results[i] = result
    return results


def _name_bounded_packs(ready: list[tuple[int, _Unit]]) -> list[list[tuple[int, _Unit]]]:
    """The prepared units ``ready`` ((row position, unit), in order) taken in order into
    packs of at most :data:`kgloom.names.candidates.MAX_CANDIDATES` distinct names."""
    packs: list[list[tuple[int, _Unit]]] = []
    for item in ready:
        names = {n for _, u in packs[-1] for n in u.names} if packs else set()
        if packs and len(names | set(item[1].names)) <= MAX_CANDIDATES:
            packs[-1].append(item)
        else:
            packs.append([item])
    return packs


def _pack_results(llm: CachedLLM, pack: list[tuple[int, _Unit]], settings: IndexSettings,
                  counts: Counter,
                  ) -> list[tuple[int, tuple[list[dict], list[dict], list[dict]]]]:
    """(row position, what :func:`extract_unit` returns) for each unit of one pack: one
    packed call, or one call per unit when the pack does not fit the context or its call
    fails (counted in ``packs_split_to_fit_context`` / ``packs_split_after_failure``);
    ``packed_calls`` and ``packed_units`` count the packed calls that succeed."""
    results: list[tuple[int, tuple[list[dict], list[dict], list[dict]]]] = []
    calls = [pack]
    if len(pack) > 1 and not _pack_fits(llm, [u for _, u in pack], settings):
        counts["packs_split_to_fit_context"] += 1
        calls = [[item] for item in pack]
    for call in calls:
        units = [u for _, u in call]
        obj, failure = _call_units(llm, units, settings, counts)
        if obj is None and len(units) > 1:
            counts["packs_split_after_failure"] += 1
            for i, u in call:
                results.append((i, _extract_prepared(llm, u, settings, counts)))
            continue
        if obj is None:
            i, u = call[0]
            results.append((i, ([], [], u.failures + ([failure] if failure else []))))
            continue
        if len(units) > 1:
            counts["packed_calls"] += 1
            counts["packed_units"] += len(units)
        for k, (i, u) in enumerate(call):
            mine = obj["relationships"][pack_label(k)] if len(units) > 1 else \
                obj["relationships"]
            results.append((i, _finish_unit(llm, u, {**obj, "relationships": mine},
                                            settings, counts)))
    return results


def _pack_fits(llm: CachedLLM, units: list[_Unit], settings: IndexSettings) -> bool:
    """Whether one packed call of ``units`` (prompt and longest reply) fits the context."""
    template = extraction_template(settings.llm_descriptions)
    room = prompt_room(llm, template, reply_token_bound(unit_schema(units, settings))
                       or template.max_tokens, types=", ".join(settings.entity_types),
                       text=PACK_SEPARATOR.join(
                           f"{pack_label(k)} {u.prompt_text}" for k, u in enumerate(units)))
    return room is None or room >= 0


def _extract_prepared(llm: CachedLLM, unit: _Unit, settings: IndexSettings,
                      counts: Counter) -> tuple[list[dict], list[dict], list[dict]]:
    """:func:`extract_unit` of a prepared unit: its own call, then its mention rows."""
    obj, failure = _call_units(llm, [unit], settings, counts)
    if obj is None:
        return [], [], unit.failures + ([failure] if failure else [])
    return _finish_unit(llm, unit, obj, settings, counts)


def pack_units(n_tokens: list[int], budget: int) -> list[list[int]]:
    """Group row positions into packs for :func:`extract_pack`: consecutive rows of at
    most ``budget`` chunking tokens together while their sum stays within ``budget``;
    every longer row alone. ``budget`` 0: every row alone (today's one call per unit).
    Deterministic in the rows' order, so a rerun over the same units asks the same calls
    (the LLM cache answers them).

    Example: ``pack_units([60, 50, 700, 90, 90, 90], 200)`` -> ``[[0, 1], [2], [3, 4], [5]]``.
    """
    packs: list[list[int]] = []
    size = 0
    for i, n in enumerate(n_tokens):
        if budget and n <= budget and packs and size and size + n <= budget:
            packs[-1].append(i)
            size += n
        else:
            packs.append([i])
            size = n if budget and n <= budget else 0
    return packs
