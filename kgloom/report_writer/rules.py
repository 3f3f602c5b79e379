"""Rule reports (no model call): the same fields and bounds as an LLM report, written in
whole sentences from the community's members and relationships; and the options a
model chooses among with ``llm_report_form: choices`` (:func:`report_options`).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import polars as pl
import regex

from kgloom.names.candidates import HONORIFICS, STOPWORDS
from kgloom.names.grounding import words
from kgloom.report_writer.prompt import (
    _RATINGS,
    MAX_FINDING_OPTIONS,
    MAX_SENTENCE_OPTIONS,
    MAX_TITLE_OPTIONS,
    REPORT_TEMPLATE,
)
from kgloom.report_writer.roles import member_role


def _clip(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word to at most ``limit`` characters ("…" added)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[:limit - 1]
    return (head.rsplit(" ", 1)[0] if " " in head[limit // 2:] else head) + "…"


@dataclass(frozen=True)
class MemberRows:
    """What :func:`rule_report` reads of the entities and relationships, by id: built once
    for a whole reports stage (:meth:`of`), so a rule report is dictionary lookups, not
    two table filters and sorts (~0.9 ms a community: 12 s of the 2Wiki pool's 13,780
    rule reports).

    Attributes:
        entities: id -> (title, description, degree, type, text_unit_ids).
        relationships: id -> (source, target, description, combined_degree, text_unit_ids).
    """

    entities: dict[str, tuple[str, str | None, int | None, str | None, list[str] | None]]
    relationships: dict[str, tuple[str, str, str | None, int | None, list[str] | None]]

    @classmethod
    def of(cls, entities: pl.DataFrame, relationships: pl.DataFrame) -> MemberRows:
        """From ``ENTITIES_SCHEMA`` / ``RELATIONSHIPS_SCHEMA`` frames (degree and
        combined_degree filled; ``type`` and ``text_unit_ids`` read when present)."""
        def col(df: pl.DataFrame, name: str) -> list:
            return df[name].to_list() if name in df.columns else [None] * df.height
        return cls(
            dict(zip(entities["id"].to_list(), zip(
                entities["title"].to_list(), entities["description"].to_list(),
                entities["degree"].to_list(), col(entities, "type"),
                col(entities, "text_unit_ids")))),
            dict(zip(relationships["id"].to_list(), zip(
                relationships["source"].to_list(), relationships["target"].to_list(),
                relationships["description"].to_list(),
                relationships["combined_degree"].to_list(),
                col(relationships, "text_unit_ids")))))


# where each text unit is: text unit id -> (its document's title, its position in the
# document (``chunk_index``), the section it falls under or "":
# :func:`kgloom.report_writer.sections.unit_sections`)
Places = dict[str, tuple[str, int, str]]

# how a rule report counts members of each type ("4 people and 1 place")
_TYPE_WORDS = {"PERSON": ("person", "people"), "ORGANIZATION": ("organization", "organizations"),
               "LOCATION": ("place", "places"), "EVENT": ("event", "events")}
# relation words between two names in a sentence, for a title ("supplies", "is the clerk of")
_RELATION_WORDS = regex.compile(r"^[\p{Ll}][\p{L}\p{M}'’-]*(?: [\p{Ll}][\p{L}\p{M}'’-]*){0,3}$")
_WHOLE_SENTENCE = regex.compile(r"^[\p{Lu}\p{N}'‘\"“(][^\n…]*$")
_END_MARK = regex.compile(r"[.!?]['’\"”)]?$")
TITLE_MAX_WORDS = 10  # a report title a reader takes in at a glance


def _listed(items: list[str]) -> str:
    """"a", "a and b", "a, b and c": every item, however many."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _head_names(titles: list[str], k: int) -> str:
    """The first ``k`` titles and how many more: "A, B and 3 others", "A and one other"."""
    rest = len(titles) - k
    if rest <= 0:
        return _listed(titles[:k])
    more = "one other" if rest == 1 else f"{rest} others"
    return f"{', '.join(titles[:k])} and {more}"


@functools.lru_cache(maxsize=8192)  # a finding's order and its body ask for the same quote
def _quote(descriptions: str | None, limit: int, names: tuple[str, ...] = ()) -> str:
    """A quote from a description's lines (evidence of the text: a sentence naming both
    ends, or a sentence naming each joined by " … ") of at most ``limit`` characters.

    With ``names``: the first sentence of any line (the parts around " … " read too)
    that names each of them (:func:`_names_each`), whole, else the first such sentence's
    longest head that ends at a clause break (:func:`_clause_head`). Otherwise, or when
    none does: the first line that is one whole sentence. "" when nothing fits."""
    lines = (descriptions or "").split("\n")
    if names:
        naming = [x for line in lines for part in line.split(" … ")
                  for x in _SENTENCE_SPLIT.split(part.strip()) if _names_each(x, names)]
        for x in naming:
            whole = _whole(x, limit)
            if whole:
                return whole
        for x in naming:
            head = _clause_head(x, limit)
            if head and _names_each(head, names):
                return head
    for line in lines:
        whole = _whole(line, limit)
        if whole:
            return whole
    return ""


# between two sentences of one line: an end mark (and closing quotes) and a space; not
# after an honorific ("Mr. Scrooge"), an initial ("J. B. Venn") or a short lower-case
# abbreviation ("married c. 1353", "b. 1901"). A part that opens in lower case ("asked
# Scrooge, looking doubtfully at him.": the text's quote left out) is no whole sentence.
_SENTENCE_SPLIT = regex.compile(
    r"(?<!\b(?:Mr|Mrs|Ms|Dr|St|\p{Lu}|\p{Ll}{1,2})\.)(?<=[.!?]['’\"”)]*)\s+")


# where a sentence's clause ends: a comma, semicolon or colon before a space, or a dash
# between spaces ("--" in Project Gutenberg texts)
_CLAUSE_BREAK = regex.compile(r"[,;:](?=\s)|\s?(?:--|[–—])\s?")


def _name_words(name: str) -> set[str]:
    """The words of ``name`` that tell it apart in a sentence: capitalized, no
    honorific or function word ("Mrs. Cratchit" -> {"Cratchit"})."""
    out = {w for w in regex.findall(r"\p{Lu}[\p{L}\p{M}'’\-]*", name)
           if w not in HONORIFICS and w.lower() not in STOPWORDS}
    return out or set(name.split())


def _names_each(sentence: str, names: tuple[str, ...]) -> bool:
    """Does ``sentence`` name each of ``names``, each by a word of its own
    (:func:`_name_words` less the words the others share: "Bob Cratchit" and "Master Peter
    Cratchit" by "Bob" and "Peter", not by "Cratchit"); one name alone by all its words?"""
    words = {w.removesuffix("'s").removesuffix("’s")
             for w in regex.findall(r"[\p{L}\p{M}'’\-]+", sentence)}
    keys = [_name_words(n) for n in names]
    if len(keys) == 1:  # one name alone: all of its words ("Limburg" is not "Limburg zu Stirum")
        return keys[0] <= words
    for k, own in enumerate(keys):
        shared = set().union(*(o for j, o in enumerate(keys) if j != k))
        if not (own - shared or own) & words:
            return False
    return True


def _clause_head(sentence: str, limit: int) -> str:
    """The longest head of ``sentence`` that ends at a clause break (:data:`_CLAUSE_BREAK`)
    and fits ``limit`` characters with the full stop it is given, opening as a whole
    sentence does, with its brackets closed; else "". A long narrative sentence ("So
    Martha hid herself, and in came little Bob, the father, with at least three feet of
    comforter ...") says who did what in its first clauses; cut there it is still the
    text's own words, never cut mid-clause with "…". The caller checks the head still
    names what it must (:func:`_names_each`)."""
    flat = " ".join(sentence.split())
    if "…" in flat or not _WHOLE_SENTENCE.fullmatch(flat):
        return ""
    best = ""
    for m in _CLAUSE_BREAK.finditer(flat):
        head = flat[:m.start()].rstrip(" ,;:")
        if len(head) + 1 > limit:
            break
        if _balanced(head):
            best = head + "."
    return best


def _relation_phrase(source: str, target: str, descriptions: str | None) -> str:
    """The words between ``source`` and ``target`` in the first of a description's lines
    (evidence sentences) where they read as a relation (1-4 lower-case words, no
    punctuation, one of them no function word: "supplies", "was the partner of"; not
    "to the"), else ""."""
    for sentence in (descriptions or "").split("\n"):
        a = sentence.find(source)
        b = sentence.find(target, a + len(source)) if a >= 0 else -1
        between = sentence[a + len(source):b].strip() if b > a >= 0 else ""
        # a relation has a word of its own: "supplies", "partner"; not "to the", "and"
        if _RELATION_WORDS.fullmatch(between) and any(
                w.lower() not in STOPWORDS for w in between.split()):
            return between
    return ""


def _whole(sentence: str, limit: int) -> str:
    """``sentence`` when it is one whole sentence (a capital or digit first, no "…" cut,
    its brackets opened and closed within it: "28 June 1961 – 3 February 2012) was a
    film director" is the tail of a sentence split inside its parenthesis) of at most
    ``limit`` characters, with a full stop added where it has no end mark (a
    model-written description), else "". One that ends in a colon, semicolon or comma
    stops before what it introduces ("they had issue:") and is none."""
    flat = " ".join(sentence.split())
    if flat.endswith((":", ";", ",")):  # a sentence cut before what it introduces
        return ""
    if flat and not _END_MARK.search(flat):
        flat += "."
    return flat if len(flat) <= limit and _WHOLE_SENTENCE.fullmatch(flat) \
        and _balanced(flat) else ""


def _balanced(text: str) -> bool:
    """Does every ")" or "]" of ``text`` close a bracket opened before it, and every one
    opened close? A sentence split inside its parenthesis ("John III, Count of Ligny( d."
    at the abbreviation "d.", or its tail "1465) was the second wife") is no whole one."""
    depth = 0
    for ch in text:
        depth += ch in "(["
        depth -= ch in ")]"
        if depth < 0:
            return False
    return depth == 0


def _places(unit_ids: list[str], places: Places | None, limit: int = 3,
            sections: bool = False) -> str:
    """Where text units are, for a citation: "a-christmas-carol.txt #12, #14" (document
    title and the unit's position in it, from ``places``), else the units' short ids;
    with ``sections``, each document's sections after its positions, at most two, those
    holding most of the units first ("a-christmas-carol #44 to #71, in Stave Three and
    Stave Four"; "mostly in" when there are more)."""
    ids = sorted(set(unit_ids))
    if not places:
        return "units " + ", ".join(u[:8] for u in ids[:limit]) + (
            f" and {len(ids) - limit} more" if len(ids) > limit else "")
    by_doc: dict[str, list[tuple[int, str]]] = {}
    for u in ids:
        if u in places:
            place = places[u]
            by_doc.setdefault(place[0], []).append(
                (place[1], place[2] if len(place) > 2 else ""))

    def at(ks: list[tuple[int, str]]) -> str:
        ks = sorted(ks)
        out = (", ".join(f"#{k}" for k, _ in ks) if len(ks) <= limit
               else f"#{ks[0][0]} to #{ks[-1][0]}")
        counts = Counter(s for _, s in ks if s)
        # the sections holding most of the units first, then in the document's order
        named = sorted(counts, key=lambda n: (-counts[n], next(k for k, s in ks if s == n)))
        if len(named) > 1:  # several: their short names ("Stave Three", not its subtitle)
            named = list(dict.fromkeys(n.split(" – ")[0] for n in named))
        if sections and named:
            out += (f", in {named[0]}" if len(named) == 1 else
                    f", in {named[0]} and {named[1]}" if len(named) == 2 else
                    f", mostly in {named[0]} and {named[1]}")
        return out
    docs = sorted(by_doc.items(), key=lambda d: (-len(d[1]), d[0]))
    parts = [f"{doc} {at(ks)}" for doc, ks in docs[:2]] + (
        [_counted(len(docs) - 2, "more document", "more documents")] if len(docs) > 2 else [])
    return "; ".join(parts) or ("units " + ", ".join(u[:8] for u in ids[:limit]))


def _members(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
             rows: MemberRows | None) -> tuple[list[tuple], list[tuple]]:
    """The community's entity rows, highest degree first, then title, and its internal
    relationship rows (id first), strongest first (combined degree), then id; a missing
    degree sorts first, as a descending table sort puts nulls."""
    if rows is None:
        rows = MemberRows.of(
            entities.filter(pl.col("id").is_in(set(community["entity_ids"]))),
            relationships.filter(pl.col("id").is_in(set(community["relationship_ids"]))))
    ents = sorted((rows.entities[i] for i in set(community["entity_ids"])
                   if i in rows.entities),
                  key=lambda e: (e[2] is not None, -(e[2] or 0), e[0]))
    rels = sorted(((i, *rows.relationships[i]) for i in set(community["relationship_ids"])
                   if i in rows.relationships),
                  key=lambda r: (r[4] is not None, -(r[4] or 0), r[0]))
    return ents, rels


def _title_options(titles: list[str], rels: list[tuple], max_chars: int,
                   roles: list[str] | None = None) -> list[str]:
    """Titles of at most :data:`TITLE_MAX_WORDS` words and ``max_chars`` characters, the
    rule report's first: each of the strongest relationships as its sentence states it
    ("Zephyr Mills supplies Yarrow Textiles"), then the central member with the role the
    text gives it (``roles``, :func:`kgloom.report_writer.roles.member_role` of each
    title: "Mrs. Dilber, a laundress, and Joe"), then the central members ("A, B and 3
    others")."""
    out = [f"{src} {phrase} {dst}" for _, src, dst, desc, _, _ in rels[:MAX_FINDING_OPTIONS]
           if (phrase := _relation_phrase(src, dst, desc))]
    role = (roles or [""])[0]
    if role:
        rest = ("" if len(titles) == 1 else f", and {titles[1]}" if len(titles) == 2
                else f", and {_counted(len(titles) - 1, 'other', 'others')}")
        bare = role.split(" ", 1)[1] if role.split(" ", 1)[0] in ("a", "an", "the") \
            and " " in role else role
        out += [f"{titles[0]}, {r}{rest}" for r in dict.fromkeys((role, bare))]
    out += [_head_names(titles, k) for k in range(min(3, len(titles)), 0, -1)]
    fit = [t for t in dict.fromkeys(out)
           if len(t.split()) <= TITLE_MAX_WORDS and len(t) <= max_chars]
    return fit or [_clip(titles[0], max_chars)]


def _must_name(src: str, dst: str, units: list[str] | None,
               places: Places | None) -> tuple[str, str] | tuple[str]:
    """The names a quote for the relationship ``src`` - ``dst`` must hold: both, or only
    the other end when every one of its text ``units`` is in the one document titled as
    one end (a passage about its subject says "She married Orrin Vale", not her name)."""
    if not places or not units or any(u not in places for u in units):
        return (src, dst)
    docs = {places[u][0] for u in units}
    if len(docs) == 1:
        doc = next(iter(docs))
        if doc in (src, dst) and src != dst:
            return (dst,) if doc == src else (src,)
    return (src, dst)


def _finding_label(src: str, dst: str) -> str:
    return f"{src} – {dst}"


@dataclass(frozen=True)
class ReportOptions:
    """What the model may choose among for a community's report (``llm_report_form``
    ``choices``): titles (:func:`_title_options`), whole evidence sentences of its
    relationships (or members), and relationships for findings ("A – B"), all taken from
    the community's own data. :meth:`schema` is the reply's schema (enums only, so the
    choice decoder of :mod:`kgloom.llm.choices` reads it), :meth:`text` the options as
    the prompt lists them."""

    titles: list[str]
    sentences: list[str]
    findings: list[str]

    def schema(self) -> dict:
        """{title, sentence, findings (at most 3), rating ("0".."10")}; a list with no
        option is left out."""
        props: dict = {"title": {"type": "string", "enum": self.titles}}
        if self.sentences:
            props["sentence"] = {"type": "string", "enum": self.sentences}
        if self.findings:
            props["findings"] = {"type": "array", "maxItems": 3,
                                 "items": {"type": "string", "enum": self.findings}}
        props["rating"] = {"type": "string", "enum": _RATINGS}
        return {"type": "object", "properties": props, "required": list(props),
                "additionalProperties": False}

    def text(self) -> str:
        """The options as the prompt lists them, one numbered block per kind."""
        blocks = [("Titles", self.titles), ("Sentences", self.sentences),
                  ("Relationships", self.findings)]
        return "\n".join(f"{name}:\n" + "\n".join(f"{k}. {o}" for k, o in enumerate(opts, 1))
                         for name, opts in blocks if opts)


def report_options(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
                   rows: MemberRows | None = None) -> ReportOptions:
    """The :class:`ReportOptions` of ``community`` (at most :data:`MAX_TITLE_OPTIONS`
    titles, :data:`MAX_SENTENCE_OPTIONS` sentences that fit a report's summary with room
    to spare, :data:`MAX_FINDING_OPTIONS` relationships, strongest first)."""
    ents, rels = _members(community, entities, relationships, rows)
    props = REPORT_TEMPLATE.schema["properties"]
    titles = [e[0] for e in ents] or ["(empty community)"]
    budget = props["summary"]["maxLength"] * 3 // 5
    lines = [line for r in rels[:MAX_FINDING_OPTIONS] for line in (r[3] or "").split("\n")]
    if not rels:
        lines = [line for e in ents for line in (e[1] or "").split("\n")]
    sentences = list(dict.fromkeys(w for line in lines if (w := _whole(line, budget))))
    labels = list(dict.fromkeys(_finding_label(r[1], r[2]) for r in rels))
    roles = [member_role(e[0], e[1]) for e in ents[:1]]
    return ReportOptions(_title_options(titles, rels, props["title"]["maxLength"], roles)
                         [:MAX_TITLE_OPTIONS], sentences[:MAX_SENTENCE_OPTIONS],
                         labels[:MAX_FINDING_OPTIONS])


# how many of a community's strongest relationships a rule report weighs for its findings
FINDING_CANDIDATES = 12


def _finding_order(rels: list[tuple], picked: int, limit: int,
                   places: Places | None) -> list[tuple]:
    """The relationships a report's findings take, in order: the first ``picked`` (a
    model's choices) as they are, then, of the next :data:`FINDING_CANDIDATES`, those
    whose evidence holds a whole sentence that fits a finding of ``limit`` characters
    with its citation (:func:`_quote`), strongest first, then the others as ranked. A
    finding that quotes the text says what joins two names; "A and B are named together
    in 3 text units" says only that something does."""
    head, rest = rels[:picked], rels[picked:picked + FINDING_CANDIDATES]

    def quotable(r: tuple) -> bool:
        cite = f" [Sources: {_places(r[5] or [], places)}]" if r[5] else ""
        return bool(_quote(r[3], limit - len(cite), _must_name(r[1], r[2], r[5], places)))
    ok = [quotable(r) for r in rest]
    return head + [r for r, q in zip(rest, ok) if q] + [r for r, q in zip(rest, ok) if not q]


def rule_report(community: dict, entities: pl.DataFrame, relationships: pl.DataFrame,
                rows: MemberRows | None = None,
                places: Places | None = None,
                picks: dict | None = None) -> dict:
    """A report of a community built by rules, no model: the same fields and bounds as an
    LLM report (:data:`REPORT_TEMPLATE`'s schema), written in whole sentences.

    - title (at most :data:`TITLE_MAX_WORDS` words): the strongest relationship as its
      sentence states it ("Zephyr Mills supplies Yarrow Textiles"), else the central
      member and its role ("Mrs. Dilber, a laundress, and Joe"), else the central members;
    - summary, two to four whole sentences, those that fit in this priority
      (:func:`_rule_summary`): who (names, roles, types), where (documents, positions,
      sections), the closest pair's quote (:func:`_quote`), how they relate; no "…" cut;
    - rating: the number of members plus internal relationships, at most 10 (GraphRAG's
      rating is the community's importance; a rule can only count its size);
    - findings (at most 3, :func:`_rule_findings`): one per internal relationship, those
      with a quote of their own first, strongest first, or per member without any; each
      a quote or a count, citing its text units ("[Sources: a-christmas-carol.txt #12]").

    Args:
        community: a ``COMMUNITIES_SCHEMA`` row as a dict.
        entities / relationships: the full tables (degree / combined_degree filled).
        rows: :meth:`MemberRows.of` those tables, when the caller writes many reports;
            None: the community's rows are taken from the tables.
        places: text unit id -> (document title, position of the unit in it, section),
            for the citations and the summary's "where"; None: units are cited by short
            id.
        picks: a model's reply to :meth:`ReportOptions.schema` (``llm_report_form``
            ``choices``): its title, its sentence as the quoted evidence, its
            relationships ("A – B") first among the findings and its rating stand
            instead of the rules' choices; the sentences around them are the same.

    Returns:
        {title, summary, rating, rating_explanation, findings: [{summary, explanation}]}.
    """
    props = REPORT_TEMPLATE.schema["properties"]
    limit = {k: props[k].get("maxLength", 0) for k in ("title", "summary", "rating_explanation")}
    item = props["findings"]["items"]["properties"]
    ents, rels = _members(community, entities, relationships, rows)
    picks = picks or {}
    if picks.get("findings"):  # the model's relationships first, in its order
        rels = _in_picked_order(rels, picks["findings"])
    titles = [e[0] for e in ents] or ["(empty community)"]
    n_rel = len(community["relationship_ids"])
    units = sorted(set(community.get("text_unit_ids") or [])
                   | {u for r in rels for u in (r[5] or [])})

    # title: the closest pair as the text states it, or the central members
    roles = [member_role(e[0], e[1]) for e in ents[:3]]
    title = picks.get("title") or _title_options(titles, rels[:1], limit["title"], roles)[0]
    summary = _rule_summary(ents, rels, titles, units, places, picks, limit["summary"], roles)
    findings = _rule_findings(ents, rels, title, picks, places, item,
                              props["findings"]["maxItems"])
    rating, rated = _rating(len(ents), n_rel, picks)
    return {"title": title, "summary": summary, "rating": rating,
            "rating_explanation": _clip(rated, limit["rating_explanation"]),
            "findings": findings or [{"summary": _clip(titles[0], item["summary"]["maxLength"]),
                                      "explanation": "No description."}]}


def _in_picked_order(rels: list[tuple], labels: list[str]) -> list[tuple]:
    """``rels`` (member relationship rows of :func:`_members`) with those the model
    picked (``labels``: :func:`_finding_label` of each, in its order, repeats ignored)
    first in that order, the rest after them in their own order (a stable sort)."""
    rank = {label: k for k, label in enumerate(dict.fromkeys(labels))}
    return sorted(rels, key=lambda r: rank.get(_finding_label(r[1], r[2]), len(rank)))


def _rating(n_members: int, n_rel: int, picks: dict) -> tuple[int, str]:
    """A rule report's (rating, its explanation): the model's picked rating when
    ``picks`` has one, else the community's size (members plus internal relationships)
    up to 10."""
    rated = (f"Rated by the model from {n_members} entities and {n_rel} relationships."
             if "rating" in picks else
             f"Built by rules from {n_members} entities and {n_rel} relationships; "
             "rated by size.")
    return (int(picks["rating"]) if "rating" in picks else min(10, n_members + n_rel)), rated


def _rule_summary(ents: list[tuple], rels: list[tuple], titles: list[str], units: list[str],
                  places: Places | None, picks: dict, max_chars: int,
                  roles: list[str] | None = None) -> str:
    """A rule report's summary: the whole sentences of who the members are, where they
    appear, the quoted evidence and how they relate that fit in ``max_chars``, by that
    priority, in reading order (who, how, quote, where).

    ``ents`` / ``rels``: the member rows of :func:`_members` (rels strongest first, or
    in the model's order of ``picks["findings"]``); ``titles``: the members' titles;
    ``units``: the community's text unit ids, sorted; ``places``: as for
    :func:`rule_report`; ``picks``: the model's choices ({} for none); ``roles``: the
    first members' :func:`~kgloom.report_writer.roles.member_role`, named beside them
    ("Mrs. Dilber (a laundress)") where the sentence stays within half of ``max_chars``.
    """
    kinds = Counter(e[3] for e in ents)
    typed = [_counted(n, *_TYPE_WORDS[t]) for t, n in sorted(
        kinds.items(), key=lambda kv: (-kv[1], str(kv[0]))) if t in _TYPE_WORDS]
    other = sum(n for t, n in kinds.items() if t not in _TYPE_WORDS)
    typed += [_counted(other, "other name", "other names")] if other else []
    k = 3 if len(titles) <= 3 else 2
    size = ("is a community of one entity" if len(ents) == 1
            else f"form a community of {len(ents)} entities")
    said = f": {_listed(typed)}." if typed else "."
    parts: dict[str, str] = {"who": f"{_head_names(titles, k)} {size}{said}"}
    named = [f"{t} ({r})" if r else t for t, r in zip(titles, (roles or [])[:k])]
    with_roles = f"{_head_names(named + titles[len(named):], k)} {size}{said}"
    if named != titles[:k] and len(with_roles) <= max_chars // 2:
        parts["who"] = with_roles
    if rels:
        _, src, dst, _, _, rel_units = rels[0]
        centre = titles[0]
        ties = sum(1 for r in rels if centre in (r[1], r[2]))
        together = _counted(len(set(rel_units or [])), 'text unit', 'text units')
        parts["how"] = (f"{centre} is tied to {_counted(ties, 'other member', 'other members')}"
                        f"; the closest pair, {src} and {dst}, is named together in "
                        f"{together}." if ties and len(ents) > 2 else
                        f"{src} and {dst} are named together in {together}.")
    elif len(ents) > 1:
        parts["how"] = "No relationship joins them inside the community."
    if units:
        counted = _counted(len(units), 'text unit', 'text units')
        parts["where"] = f"They appear in {counted} ({_places(units, places, sections=True)})."
        if len(parts["where"]) > max_chars // 2:
            parts["where"] = f"They appear in {counted} ({_places(units, places)})."
    quote = picks.get("sentence") or _quote(
        rels[0][3] if rels else ents[0][1] if ents else "", max_chars,
        _must_name(rels[0][1], rels[0][2], rels[0][5], places) if rels else ())
    if quote:
        parts["quote"] = f"The text says: \"{quote}\""
    # whole sentences only: those that fit, by priority, written in reading order
    if len(parts["who"]) > max_chars:
        parts["who"] = _clip(f"{_head_names(titles, 1)} form a community of {len(ents)} "
                             "entities.", max_chars)
    kept, total = set(), -1
    for key in ("who", "where", "quote", "how"):
        if key in parts and total + 1 + len(parts[key]) <= max_chars:
            kept.add(key)
            total += 1 + len(parts[key])
    return " ".join(parts[k] for k in ("who", "how", "quote", "where") if k in kept)


def _rule_findings(ents: list[tuple], rels: list[tuple], title: str, picks: dict,
                   places: Places | None, item: dict,
                   max_items: int) -> list[dict]:
    """A rule report's findings, at most ``max_items`` [{summary, explanation}]: one per
    internal relationship in :func:`_finding_order`, else one per member; each a whole
    quoted sentence (none quoted twice) citing its text units, clipped to the bounds of
    ``item`` (the schema's finding properties). ``title``: the report's title (a finding
    that says the same names its pair instead). Empty when the community has no member
    and no relationship."""
    findings: list[dict] = []
    used: set[str] = set()  # quotes already a finding's: one sentence says one thing once
    picked = len(picks.get("findings") or [])
    drafts = []  # (relationship, its citation, its quote): a quote another one took is none
    for r in _finding_order(rels, picked, item["explanation"]["maxLength"], places):
        cite = f" [Sources: {_places(r[5] or [], places)}]" if r[5] else ""
        quote = _quote(r[3], item["explanation"]["maxLength"] - len(cite),
                       _must_name(r[1], r[2], r[5], places))
        drafts.append((r, cite, "" if quote in used else quote))
        used.add(quote)
    # the model's picks as they are, then those quoting a sentence no other one quotes
    drafts = drafts[:picked] + sorted(drafts[picked:], key=lambda d: not d[2])
    for (_, src, dst, desc, _, rel_units), cite, quote in drafts[:max_items]:
        phrase = _relation_phrase(src, dst, desc)
        head = f"{src} {phrase} {dst}" if phrase else f"{src} and {dst}"
        if words(head) == words(title):  # the title already says it: name the pair
            head = _finding_label(src, dst)
        head = _clip(head, item["summary"]["maxLength"])
        body = quote or (f"{src} and {dst} are named together in "
                         f"{_counted(len(set(rel_units or [])), 'text unit', 'text units')}.")
        findings.append({"summary": head,
                         "explanation": _clip(body + cite, item["explanation"]["maxLength"])})
    if not findings:
        for e in ents[:max_items]:
            e_units = e[4] or []
            cite = f" [Sources: {_places(e_units, places)}]" if e_units else ""
            quote = _quote(e[1], item["explanation"]["maxLength"] - len(cite), (e[0],))
            quote = "" if quote in used else quote
            used.add(quote)
            body = quote or f"{e[0]} is named in " \
                f"{_counted(len(set(e_units)), 'text unit', 'text units')}."
            findings.append({"summary": _clip(e[0], item["summary"]["maxLength"]),
                             "explanation": _clip(body + cite, item["explanation"]["maxLength"])})
    return findings
