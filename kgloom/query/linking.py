"""Query entity linking by name: the question's spans matched to entity titles and aliases.

Names are compared under the entity-resolution key (:func:`kgloom.names.normalize.normalize_title`:
Unicode NFKC, case-folded, punctuation as spaces), so the question's "Lothair Ii's"
finds the entity "Lothair II" and an alias recorded by resolution ("Mr. Cratchit")
finds its canonical entity. Spans come from two places:

- every run of 1 to ``MAX_SPAN_TOKENS`` words of the question, longest first and
  non-overlapping (so "Bob Cratchit" wins over "Bob"), skipping spans made only of
  common words and single lower-case words. A question that writes names with capitals
  (:func:`writes_case`) names no entity by a span it writes in lower case unless the
  index writes that entity so too: "the place of birth of the director" is a phrase,
  not the article "Place of birth"; a question written all in lower case is read
  without case. Words come from
  :func:`kgloom.names.candidates.word_spans`, the word boundaries extraction uses in
  every script: in Chinese and Japanese the segmenter's words (jieba, janome), in Thai,
  Lao, Khmer and Myanmar single characters (up to ``MAX_UNSPACED_SPAN`` of them make a
  span), so "郭子兴是谁" links 郭子兴 and "朱元璋是谁" links 朱元璋, not 朱元璋时. A span in
  those scripts is matched as written (no spaces added) and needs 2+ characters;
- the extraction's own candidate finder (:func:`kgloom.names.candidates.candidate_names`):
  a capitalized span with no exact match may still name an entity whose title contains
  it as whole words ("Lothair II" -> "Lothair II of Lotharingia"), when at most
  ``MAX_PARTIAL_MATCHES`` entities do.

Spans left unlinked are returned too, so the caller can link them by embedding (ANN
over the LanceDB ``entities`` table). No Dagster, no files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from kgloom.core.schemas import TableSchema
from kgloom.names.candidates import candidate_names, unspaced, word_spans
from kgloom.names.normalize import normalize_title

MAX_SPAN_TOKENS = 8
MAX_UNSPACED_SPAN = 40  # words (characters, in Thai) of a span in a script without spaces
MAX_PARTIAL_MATCHES = 3
PARTIAL_MATCH_DISCOUNT = 0.8  # a partial match scores 0.8 x (span tokens / title tokens)

# Words that never name anything on their own (question words, articles, auxiliaries).
_COMMON = frozenset("""a an and are as at be been by can could did do does for from had has
have he her his how i in into is it its me my of on or our she than that the their them
they this to was we were what when where which who whom whose why will with would you
your""".split())
_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b", re.IGNORECASE)
_TOKEN = re.compile(r"\w+(?:['’]\w+)*", re.UNICODE)


@dataclass(frozen=True)
class LinkedEntity:
    """One question entity found in the index.

    Attributes:
        entity_id: the entity's id (entities.parquet ``id``).
        title: its title.
        method: ``name`` (a title), ``alias`` (an alias from entity resolution),
            ``partial_name`` (a capitalized span inside a longer title), ``ann``
            (embedding similarity) or ``vector_hit`` (mentioned by a text unit near the
            question; span = that unit's id); the last two are set by the retriever.
        span: the question text that matched (``(question)`` for whole-question ANN).
        score: 1.0 for name and alias, ``0.8 x span/title tokens`` for partial_name,
            cosine similarity for ann.
    """

    entity_id: str
    title: str
    method: str
    span: str
    score: float


LINKED_SCHEMA: TableSchema = {
    "entity_id": pl.String, "title": pl.String, "method": pl.String, "span": pl.String,
    "score": pl.Float64}


def linked_frame(links: list[LinkedEntity]) -> pl.DataFrame:
    """The links as a frame of LINKED_SCHEMA (one row per link, in the given order)."""
    return pl.DataFrame([vars(x) for x in links], schema=LINKED_SCHEMA, orient="row") \
        if links else pl.DataFrame(schema=LINKED_SCHEMA)


def _has_capital(text: str) -> bool:
    """Does ``text`` hold an upper-case or title-case letter?"""
    return any(c.isupper() or c.istitle() for c in text)


def writes_case(words: list[str]) -> bool:
    """Does a question of ``words`` (in order) write names with capitals: a word after
    its first one holds a capital? "What is the place of birth of the director of film
    Gaby?" does, so its lower-case "place of birth" names nothing; "who was scrooge's
    partner?" does not, and every span of it may name an entity."""
    return any(_has_capital(w) for w in words[1:])


def _key(text: str) -> str:
    """Normalization key of a name or span: possessives dropped, then normalize_title."""
    return normalize_title(_POSSESSIVE.sub("", text))


def _contains(longer: list[str], shorter: list[str]) -> bool:
    """True when ``shorter`` occurs in ``longer`` as a contiguous run of tokens."""
    n = len(shorter)
    return any(longer[j:j + n] == shorter for j in range(len(longer) - n + 1))


class NameLinker:
    """Links question spans to entities by their normalized titles and aliases.

    Args:
        entities: frame with ``id`` and ``title`` (e.g. entities.parquet), n rows.
        aliases: frame with ``alias`` and ``entity_id`` (entity_aliases.parquet) or None.

    Building costs one pass over titles and aliases (O(n) dict inserts).
    """

    def __init__(self, entities: pl.DataFrame, aliases: pl.DataFrame | None = None) -> None:
        self.title = dict(zip(entities["id"].to_list(), entities["title"].to_list()))
        self.by_key: dict[str, dict[str, str]] = {}  # key -> {entity id: method}
        self.uncased: set[str] = set()  # keys with a title or alias written without a capital
        self.forms: list[tuple[str, str]] = []  # (title or alias as written, entity id)
        for eid, title in self.title.items():
            self._add(title, eid, "name")
        if aliases is not None and aliases.height:
            for alias, eid in aliases.select("alias", "entity_id").iter_rows():
                if eid in self.title and alias:
                    self._add(alias, eid, "alias")
        self.by_token: dict[str, set[str]] = {}
        for key in self.by_key:
            for tok in set(key.split()):
                self.by_token.setdefault(tok, set()).add(key)

    def _add(self, name: str, eid: str, method: str) -> None:
        self.forms.append((name, eid))
        key = _key(name)
        if key and not _has_capital(name):
            self.uncased.add(key)
        if key:
            methods = self.by_key.setdefault(key, {})
            if methods.get(eid) != "name":
                methods[eid] = method

    def link(self, question: str) -> tuple[list[LinkedEntity], list[str]]:
        """Find the entities named in ``question``.

        Returns:
            (links sorted by span position then entity id; unlinked candidate spans:
            capitalized spans of the extraction's candidate finder that matched no
            entity, for the caller to try by embedding).
        """
        found = self._name_links(question)
        partial, unlinked = self._partial_links(question, {_key(x.span) for _, x in found})
        return _first_per_entity(found + partial), unlinked

    def _name_links(self, question: str) -> list[tuple[int, LinkedEntity]]:
        """The ``name`` and ``alias`` links of ``question``: its word spans, longest
        first and non-overlapping (a linked span's words are used up), matched exactly
        by key (:meth:`_may_name` says which spans may name an entity).

        Returns:
            (character position of the span's first word, link) pairs; a span naming
            several entities gives one per entity, by entity id.
        """
        text = _POSSESSIVE.sub("", question)
        bounds = word_spans(text)
        words = [(text[a:b], a) for a, b in bounds]
        keys = [_key(w) for w, _ in words]
        free = [unspaced(w) for w, _ in words]  # words of a script written without spaces
        used = [False] * len(words)
        cased = writes_case([w for w, _ in words])
        found: list[tuple[int, LinkedEntity]] = []
        longest = MAX_UNSPACED_SPAN if any(free) else MAX_SPAN_TOKENS
        for n in range(min(longest, len(words)), 0, -1):
            for i in range(len(words) - n + 1):
                if any(used[i:i + n]) or n - sum(free[i:i + n]) > MAX_SPAN_TOKENS:
                    continue
                span = text[bounds[i][0]:bounds[i + n - 1][1]]  # as written: no added spaces
                if not self._may_name(span, keys[i:i + n], free[i:i + n], words[i][0], cased):
                    continue
                hits = self.by_key.get(_key(span))
                if not hits:
                    continue
                for eid, method in sorted(hits.items()):
                    found.append((words[i][1], LinkedEntity(eid, self.title[eid], method, span,
                                                            1.0)))
                used[i:i + n] = [True] * n
        return found

    def _may_name(self, span: str, toks: list[str], free: list[bool], first_word: str,
                  cased: bool) -> bool:
        """May ``span`` (its words' keys ``toks``, which of them are in a script written
        without spaces ``free``, its first word as written) name an entity? Not when it
        is only common words, one character of an unspaced script, a single word with
        no capital or digit, or, in a question that writes case (``cased``), a span
        written in lower case whose key the index never writes so."""
        if all(t in _COMMON for t in toks):
            return False
        if all(free):
            if len(span) < 2:  # one character of Chinese or Thai names nothing alone
                return False
        elif len(toks) == 1 and not (first_word[:1].isupper()
                                     or any(c.isdigit() for c in first_word)):
            return False
        # a capitalized title written in lower case: a common phrase
        return not (cased and _key(span) not in self.uncased and not _has_capital(span)
                    and not any(c.isdigit() for c in span))

    def _partial_links(self, question: str, covered: set[str]
                       ) -> tuple[list[tuple[int, LinkedEntity]], list[str]]:
        """The ``partial_name`` links of ``question``: each span of the extraction's
        candidate finder (leading common words dropped) whose key no span in
        ``covered`` (the keys already linked; grown here) contains, linked to the
        entities whose titles hold it (:meth:`_partial`).

        Returns:
            ((character position of the span in ``question``, or -1; link) pairs,
            the candidate spans that linked nothing, in question order).
        """
        found: list[tuple[int, LinkedEntity]] = []
        unlinked: list[str] = []
        for span in candidate_names(question):
            words_ = span.split()
            while words_ and words_[0].lower() in _COMMON:  # "Did Zacharias ..." opens a question
                words_ = words_[1:]
            span = " ".join(words_)
            key = _key(span)
            if not key or any(_contains(c.split(), key.split()) for c in covered):
                continue
            partial = self._partial(key)
            if partial:
                pos = question.find(span)
                for eid, score in partial:
                    found.append((pos, LinkedEntity(eid, self.title[eid], "partial_name", span,
                                                    score)))
                covered.add(key)
            else:
                unlinked.append(span)
        return found, unlinked

    def _partial(self, key: str) -> list[tuple[str, float]]:
        """Entities whose title key holds ``key``'s tokens contiguously (at most
        MAX_PARTIAL_MATCHES of them, else none: an ambiguous short span links nothing)."""
        toks = key.split()
        pools = [self.by_token.get(t, set()) for t in toks]
        if not pools or not all(pools):
            return []
        hits: dict[str, float] = {}
        for cand in set.intersection(*pools):
            ctoks = cand.split()
            if len(ctoks) <= len(toks) or not _contains(ctoks, toks):
                continue
            for eid in self.by_key[cand]:
                score = PARTIAL_MATCH_DISCOUNT * len(toks) / len(ctoks)
                hits[eid] = max(hits.get(eid, 0.0), score)
        if len(hits) > MAX_PARTIAL_MATCHES:
            return []
        return sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))


def _first_per_entity(found: list[tuple[int, LinkedEntity]]) -> list[LinkedEntity]:
    """The links of ``found`` ((position, link) pairs) sorted by position, then entity
    id (a stable sort: name links before partial ones at a tie), each entity's first
    link only."""
    found = sorted(found, key=lambda p: (p[0], p[1].entity_id))
    seen: set[str] = set()
    links = []
    for _, link in found:
        if link.entity_id not in seen:
            seen.add(link.entity_id)
            links.append(link)
    return links
