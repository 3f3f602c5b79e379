"""Entity resolution's merging passes after the normalized one: ``name_extension`` and
``name_context`` (a shorter name joins the longer name that contains it) and
``embedding`` (nearest neighbours of 'title: description' embeddings).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kgloom.graph.resolution_keys import (
    SHARED_DOCUMENTS,
    _adds_common,
    _canonical_title,
    _compatible,
    _contains,
    _descriptions,
    _Key,
    _merge_places,
    _name_scope,
    _UnionFind,
    _vote,
)

_CONJUNCTIONS = frozenset({"and", "&", "und", "et"})


def _merge_name_extensions(keys: dict[str, _Key], uf: _UnionFind,
                           units_of: dict[str, set[str]] | None = None,
                           documents_of: dict[str, set[str]] | None = None,
                           common_words: frozenset[str] | None = None,
                           places_of: dict[str, dict[str, tuple[int, set[str]]]] | None = None,
                           determined: frozenset[str] | None = None) -> set[str]:
    """Join each shorter name into the unique longer name containing it; with
    ``units_of``, then settle the ambiguous ones by shared text units.

    Args:
        keys: entity key -> its :class:`_Key` (title, core, honorific gender, stage).
        uf: the union-find over ``keys`` after the normalized pass; merged in place.
        units_of: key -> text unit ids naming it; None skips pass 2 (``name_context``).
        documents_of: key -> document ids naming it; None: documents are not compared.
        common_words: casefolded words the corpus writes in lower case more often than
            capitalized (:func:`common_words_of`); None: every added word is a name.
        places_of: key -> {document: (first text unit's position, the key's units
            there)}; None: the order of introduction is not compared.
        determined: one-word keys the corpus mostly writes after a determiner
            (:func:`common_words_of`).

    Which longer names a name may join is :meth:`_NameGroups.candidates` (scope, common
    words, shared documents, introduction, class nouns, honorific gender). Pass 1
    (``name_extension``, :func:`_merge_unambiguous_names`) joins each name with exactly
    one candidate; pass 2 (``name_context``, :func:`_merge_names_by_context`, only with
    ``units_of``) settles the names with several by shared text units.

    Returns the keys merged in pass 2 (an empty set without ``units_of``).
    """
    groups = _NameGroups(keys, uf, units_of, documents_of, common_words, places_of,
                         determined)
    ambiguous = _merge_unambiguous_names(groups)
    if units_of is None:
        return set()
    return _merge_names_by_context(groups, ambiguous, units_of)


def _merge_unambiguous_names(groups: _NameGroups) -> list[str]:
    """Pass 1 (``name_extension``): join each name with exactly one candidate group.

    Visits names (keys with a core) from most to least specific, ties by key, so by the
    time "Scrooge" is seen, "Mr. Scrooge" already belongs to "Ebenezer Scrooge" and both
    count as one candidate; a name with exactly one candidate joins it when it is allowed
    and the genders of the two groups are compatible. Returns the names with several
    candidates, in visiting order, for pass 2.
    """
    keys = groups.keys
    order = sorted((k for k in keys if keys[k].core),
                   key=lambda k: (tuple(-x for x in keys[k].specificity), k))
    ambiguous: list[str] = []
    for k in order:
        roots, allowed = groups.candidates(k)
        if len(roots) == 1:
            if allowed:
                groups.join(k, roots.pop())
        elif roots:
            ambiguous.append(k)
    return ambiguous


def _merge_names_by_context(groups: _NameGroups, ambiguous: list[str],
                            units_of: dict[str, set[str]]) -> set[str]:
    """Pass 2 (``name_context``): settle each ambiguous name by shared text units.

    Visits ``ambiguous`` (pass 1's order) after every unambiguous merge, so a group's text
    units include those of every name already in it ("Bob" is in Bob Cratchit's group
    when "Mr. Cratchit" is decided). Candidates are recomputed (pass-2 merges of more
    specific names can leave one); with several, only those of a compatible gender and
    no conflicting life stage (``_LIFE_STAGE``) compete ("Mr. X" is never "Mrs. X", and a
    "Mr." name does not pick a "Master" group over the others), and the name joins the
    one whose group shares the most text units with its pooled units
    (:meth:`_NameGroups.pooled_units`), when that count is positive and strictly the
    highest. Returns the keys merged here.
    """
    by_context: set[str] = set()
    for k in ambiguous:
        (roots, allowed), mine = groups.candidates(k), groups.uf.find(k)
        if len(roots) > 1:
            mine_units = groups.pooled_units(k, mine, units_of)
            shared = sorted(((len(mine_units & groups.units[r]), r) for r in roots
                             if _compatible(groups.genders[mine], groups.genders[r])
                             and not _stages_conflict(groups.stages[mine], groups.stages[r])),
                            reverse=True)
            if shared and shared[0][0] > 0 and (len(shared) == 1 or shared[0][0] > shared[1][0]):
                roots = {shared[0][1]}
        if len(roots) == 1 and roots <= allowed and groups.join(k, roots.pop()):
            by_context.add(k)
    return by_context


class _NameGroups:
    """The groups of the name passes, keyed by union-find root, and the per-key facts
    the passes compare, computed once (``_Key`` properties recompute them at every read).

    Per group root (merged by :meth:`join`): ``units`` (text unit ids), ``places``
    (document -> (first position, the group's units there)), ``docs`` (document ids),
    ``genders`` (honorific genders, "" for none), ``stages`` (life-stage honorifics).
    Per key: ``core`` (name tokens), ``specificity``, ``scope`` (:func:`_name_scope`),
    ``same_core`` (core -> keys), ``by_token`` (core token -> candidate keys whose core
    holds it). Names joined by a conjunction ("Scrooge and Marley", a firm) and titles
    with no scope are never candidates, so they are left out of ``scope`` and the token
    lists.
    """

    def __init__(self, keys: dict[str, _Key], uf: _UnionFind,
                 units_of: dict[str, set[str]] | None,
                 documents_of: dict[str, set[str]] | None,
                 common_words: frozenset[str] | None,
                 places_of: dict[str, dict[str, tuple[int, set[str]]]] | None,
                 determined: frozenset[str] | None) -> None:
        self.keys, self.uf = keys, uf
        self.documents_of, self.common_words, self.determined = (
            documents_of, common_words, determined)
        self.compare_places = places_of is not None
        self.units = {k: set((units_of or {}).get(k, set())) for k in keys}
        self.places = {k: {d: (i, set(us)) for d, (i, us) in (places_of or {}).get(k, {}).items()}
                       for k in keys}
        self.docs = {k: set((documents_of or {}).get(k, set())) for k in keys}
        self.genders = {k: {v.gender} for k, v in keys.items()}
        self.stages = {k: {v.stage} - {""} for k, v in keys.items()}
        self.core = {k: v.core for k, v in keys.items()}
        self.scope: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
        for k, v in keys.items():
            sc = _name_scope(v)
            if sc is not None and not _CONJUNCTIONS & set(self.core[k]):
                self.scope[k] = sc
        self.specificity = {k: v.specificity for k, v in keys.items()}
        self.same_core: dict[tuple[str, ...], list[str]] = {}
        for k, v in keys.items():
            self.same_core.setdefault(v.core, []).append(k)
        self.by_token: dict[str, list[str]] = {}
        for k in self.scope:
            for tok in set(self.core[k]):
                self.by_token.setdefault(tok, []).append(k)

    def candidates(self, k: str) -> tuple[set[str], set[str]]:
        """(contenders, allowed): the group roots holding a longer name ``k`` is a part
        of (:meth:`contenders`), and those of them it may join (:meth:`joinable`). A
        contender that may not be joined still makes ``k`` ambiguous: "Christmas" in
        "Christmas-time" and "Christmas Eve" is decided by context, not given to
        "Christmas Eve" because "time" is a common word.

        Types are not compared: a small model's types are too noisy to veto "Jacob
        Marley" (LOCATION in one unit) absorbing "Marley". A candidate of another
        honorific gender still counts toward ambiguity (that is what keeps "Cratchit"
        apart from "Bob Cratchit" when "Mrs. Cratchit" exists), except that a bare
        surname whose only candidates are one "Mr." name and "Mrs."/"Miss" names has
        the "Mr." name alone ("Fezziwig" with "Mr. Fezziwig" and "Mrs. Fezziwig"):
        English usage names a woman by her honorific, not by the bare surname.
        """
        mine = self.core[k]
        # a candidate's core contains every token of this core, so the shortest token
        # list holds them all (the rarest token, not the first: "John" or "Film" head
        # thousands of the pool's names, which made this scan grow with their square)
        pool = min((self.by_token.get(tok, ()) for tok in set(mine)), key=len)
        held = [c for c in pool if c != k and self.specificity[c] > self.specificity[k]
                and _contains(self.scope[c][0], mine)]
        mine_docs = (self.documents_of or {}).get(k) or set()
        roots = self.contenders(k, held, mine_docs)
        allowed = self.joinable(k, held, mine_docs)
        return roots, allowed & roots

    def contenders(self, k: str, held: list[str], mine_docs: set[str]) -> set[str]:
        """The group roots of ``held`` (keys whose scope contains ``k``'s core as whole
        tokens outside a complement: :func:`_contains`) that some document of
        ``mine_docs`` names (all of them when ``mine_docs`` is empty), narrowed to the
        one "Mr." group when ``k`` is a bare surname against it and only "Mrs."/"Miss"
        groups."""
        roots = {self.uf.find(c) for c in held}
        if mine_docs:
            roots = {r for r in roots if mine_docs & self.docs[r]}
        if len(roots) > 1 and self.keys[k].gender == "":
            genders = self.genders
            male = [r for r in roots if "m" in genders[r] and "f" not in genders[r]]
            if len(male) == 1 and all(genders[r] == {"f"} for r in roots if r != male[0]):
                roots = {male[0]}
        return roots

    def joinable(self, k: str, held: list[str], mine_docs: set[str]) -> set[str]:
        """The group roots of ``held`` that ``k`` may join.

        With ``common_words``, a longer name qualifies only when what it adds to ``k``
        is names only: no common word and no number. "Kubrick" joins "Stanley Kubrick"
        and "Tim" "Tiny Tim" (the book writes "Tiny" capitalized), but "Canada" is not
        "Air Canada", "London" not "London Heathrow Airport", "FIFA" not "2007 FIFA
        U-20 World Cup": a common word or a number added to a name makes a compound
        naming another thing (on the HotpotQA sample about half of the merges into such
        longer names joined two different things). With ``determined``, such a class
        noun does not join a longer name that ends in it: "the Ghost" of a novel is
        every ghost, not "Marley's Ghost" (a name rarely takes an article: "Scrooge" 7
        of 455).

        With documents, more than :data:`SHARED_DOCUMENTS` of the documents naming ``k``
        must also name a member of the group: on the 2Wiki pool (6,119 one-passage
        documents) 1,020 of 6,896 name merges joined names that share no document
        ("Ireland" -> "Northern Ireland", "Rome" -> "Tony Rome"); a novel in chapter
        files joins "Scrooge" to "Ebenezer Scrooge" when most chapters name him in full.
        With places, a longer name that adds words to ``k``'s core (not only an
        honorific: "Mr. Ebenezer Scrooge" is "Ebenezer Scrooge") must be
        :meth:`introduced`.
        """
        scope = self.scope
        mine = self.core[k]
        allowed = {self.uf.find(c) for c in held
                   if not _adds_common(scope[c][0], mine, self.common_words, scope[c][1])
                   and not (len(mine) == 1 and mine[0] in (self.determined or ())
                            and scope[c][0][-1] == mine[0])}
        if mine_docs:
            allowed = {r for r in allowed
                       if len(mine_docs & self.docs[r]) > SHARED_DOCUMENTS * len(mine_docs)}
        if self.compare_places:
            longer = {self.uf.find(c) for c in held if len(self.core[c]) > len(mine)}
            allowed = {r for r in allowed if r not in longer or self.introduced(k, r)}
        return allowed

    def introduced(self, k: str, root: str) -> bool:
        """Is group ``root`` written in a unit of ``k`` or before its first one, in more
        than :data:`SHARED_DOCUMENTS` of the documents naming both (True when none
        names both)? ``k`` counts with its group and every name of its core ("Marley"
        with "Mr. Marley").

        A short form refers to a name the reader has met ("Ebenezer Scrooge" in the
        cast list, then "Scrooge"); a name written again and again before a longer one
        first appears, far from it, is another thing: a novel's rag-dealer "Joe" (from
        its fourth chapter) is not the jest-book "Joe Miller" named once in its fifth.
        A name whose long form comes later but in one of its own text units still joins
        ("Kubrick ... Stanley Kubrick" in one passage)."""
        mine: dict[str, tuple[int, set[str]]] = {}
        for v in [self.uf.find(k), *self.same_core[self.core[k]]]:
            mine = _merge_places(mine, self.places[v])
        places = self.places[root]
        shared = mine.keys() & places.keys()
        met = sum(1 for d in shared if places[d][0] <= mine[d][0]
                  or places[d][1] & mine[d][1])
        return not shared or met > SHARED_DOCUMENTS * len(shared)

    def join(self, k: str, root: str) -> bool:
        """Union ``k``'s group into ``root``'s and merge their facts; False (and no
        union) when their honorific genders are incompatible."""
        mine = self.uf.find(k)
        if not _compatible(self.genders[mine], self.genders[root]):
            return False
        self.uf.union(mine, root)
        joined = self.uf.find(root)
        self.genders[joined] = self.genders[mine] | self.genders[root]
        self.units[joined] = self.units[mine] | self.units[root]
        self.docs[joined] = self.docs[mine] | self.docs[root]
        self.stages[joined] = self.stages[mine] | self.stages[root]
        self.places[joined] = _merge_places(self.places[root], self.places[mine])
        return True

    def pooled_units(self, k: str, mine: str, units_of: dict[str, set[str]]) -> set[str]:
        """Text unit ids of ``k``'s group ``mine`` and of the names with ``k``'s core it
        could be (same gender, no conflicting life stage): one name with and without an
        honorific is one contest. "Mr. Scrooge" (9 units of the book) shares none with
        "Ebenezer Scrooge", but "Scrooge" (72 units) shares five, so the two decide
        together."""
        out = set(self.units[mine])
        for v in self.same_core[self.keys[k].core]:
            if v != k and _compatible(self.genders[mine], {self.keys[v].gender}) \
                    and not _stages_conflict(self.stages[mine], {self.keys[v].stage} - {""}):
                out |= units_of.get(v, set())
        return out


def _stages_conflict(stages_a: set[str], stages_b: set[str]) -> bool:
    """True when both groups carry life-stage honorifics and share none ({"man"} vs
    {"boy"}); a group that already holds both, or either side without one, is no
    conflict."""
    return bool(stages_a) and bool(stages_b) and not stages_a & stages_b


_FLOAT32_SLACK = 1e-4  # above float32 rounding of a unit-vector cosine (dim x 2^-24: 2.3e-5 at 384)


def _merge_embeddings(keys: dict[str, _Key], uf: _UnionFind,
                      embed: Callable[[list[str]], np.ndarray], threshold: float,
                      k_neighbours: int = 10, block_cells: int = 2_000_000,
                      verify: Callable[[str, str], bool] | None = None,
                      units_of: dict[str, set[str]] | None = None) -> dict[str, float]:
    """Union groups whose "title: description" embeddings have cosine >= threshold.

    Embeds one text per group root (:func:`_group_texts`), finds the candidate pairs by
    nearest-neighbour search (:func:`_similar_pairs`) and unions them best first
    (:func:`_union_similar_groups`). When ``verify`` is given, a candidate pair is merged
    only if ``verify(text_a, text_b)`` says yes (e.g. an LLM yes/no question). Returns,
    for every group root that was merged, the best cosine of an accepted pair touching
    it.

    Raises:
        ValueError: ``embed`` returned anything but one row per text.
    """
    groups: dict[str, list[str]] = {}
    for k in sorted(keys):
        groups.setdefault(uf.find(k), []).append(k)
    roots = sorted(groups)
    if len(roots) < 2:
        return {}
    texts, types, genders = _group_texts(keys, groups, roots)
    vecs = np.asarray(embed(texts), dtype=np.float64)
    if vecs.ndim != 2 or vecs.shape[0] != len(texts):
        raise ValueError(f"embed returned shape {vecs.shape} for {len(texts)} texts")
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    pairs = _similar_pairs(vecs, types, threshold, k_neighbours, block_cells)
    comp_genders = {r: set(g) for r, g in zip(roots, genders)}
    comp_units = {r: set().union(*((units_of or {}).get(m, set()) for m in groups[r]))
                  for r in roots}
    return _union_similar_groups(uf, roots, pairs, texts, comp_genders, comp_units, verify)


def _group_texts(keys: dict[str, _Key], groups: dict[str, list[str]], roots: list[str],
                 ) -> tuple[list[str], list[str], list[set[str]]]:
    """(texts, types, genders), one per root of ``roots`` in order: the group's
    "title: descriptions" text (:func:`_resolution_text` of its canonical title and
    descriptions), its voted entity type, and its members' honorific genders."""
    texts, types, genders = [], [], []
    for r in roots:
        members = groups[r]
        _, title = _canonical_title(keys, members)
        descs = _descriptions(keys, members)
        texts.append(_resolution_text(title, descs))
        types.append(_vote(t for m in members for t in keys[m].types))
        genders.append({keys[m].gender for m in members})
    return texts, types, genders


def _similar_pairs(vecs: np.ndarray, types: list[str], threshold: float,
                   k_neighbours: int, block_cells: int) -> list[tuple[float, int, int]]:
    """``(cosine, i, j)`` with ``i < j`` for each row pair of ``vecs`` (N x dim float64,
    unit rows) of the same type, within each row's top ``k_neighbours`` (itself
    included, so ``k_neighbours + 1``), with cosine >= ``threshold``; a pair may appear
    twice (found from either row).

    Nearest-neighbour search over the normalized embedding matrix, a block of rows at a
    time, not an all-pairs Python loop. A block holds at most ``block_cells``
    similarities (rows x groups; 16 MB of float64 at the default), so the search's
    memory stays flat as the groups grow: a fixed 1,024 rows cost 1,024 x N x 8 bytes
    three times over (the similarities, their negation, the partition's indices), 0.7 GB
    at the 2Wiki pool's 28,000 groups. The search runs in float32 (half the float64 time
    of an N x N x dim product: 10 s at the 2Wiki pool's 28,000 groups), each candidate's
    score then taken in float64, so the threshold and the merge order see the same
    scores as a float64 search.
    """
    search = vecs.astype(np.float32)
    near = threshold - _FLOAT32_SLACK
    n = len(vecs)
    k_nn = min(k_neighbours + 1, n)
    pairs: list[tuple[float, int, int]] = []
    block = max(1, block_cells // n)
    for start in range(0, n, block):
        sims = search[start:start + block] @ search.T
        nearest = np.argpartition(-sims, k_nn - 1, axis=1)[:, :k_nn]
        for row, cols in enumerate(nearest):
            i = start + row
            for j in map(int, cols):
                if i == j or sims[row, j] < near or types[i] != types[j]:
                    continue
                score = float(vecs[i] @ vecs[j])
                if score >= threshold:
                    pairs.append((score, min(i, j), max(i, j)))
    return pairs


def _union_similar_groups(uf: _UnionFind, roots: list[str],
                          pairs: list[tuple[float, int, int]], texts: list[str],
                          comp_genders: dict[str, set[str]],
                          comp_units: dict[str, set[str]],
                          verify: Callable[[str, str], bool] | None) -> dict[str, float]:
    """Union the groups of each distinct pair of ``pairs`` (indices into ``roots`` and
    ``texts``), best cosine first (ties by indices), unless already one group, of
    incompatible honorific genders, ``verify``-rejected, or sharing a text unit (a
    cannot-link constraint: two different names side by side in one passage are almost
    always two things, and evidence-sentence descriptions of such names are
    near-identical, so their embeddings would match). ``comp_genders`` and
    ``comp_units`` (per group root) are merged in place. Returns root -> the best
    cosine of an accepted pair touching it."""
    best: dict[str, float] = {}
    for score, i, j in sorted(set(pairs), key=lambda p: (-p[0], p[1], p[2])):
        a, b = uf.find(roots[i]), uf.find(roots[j])
        if a == b or not _compatible(comp_genders[a], comp_genders[b]):
            continue
        if comp_units[a] & comp_units[b]:
            continue
        if verify is not None and not verify(texts[i], texts[j]):
            continue
        uf.union(a, b)
        comp_genders[uf.find(a)] = comp_genders[a] | comp_genders[b]
        comp_units[uf.find(a)] = comp_units[a] | comp_units[b]
        for r in (roots[i], roots[j]):
            best[r] = max(best.get(r, score), score)
    return best



# characters of "title: descriptions" embedded per group: about one 256-token window of
# all-MiniLM-L6-v2 (~4 characters per token in English). Past it a hub entity of a long
# document (thousands of descriptions) would cost thousands of windows, all to refine a
# vector the first window already places.
RESOLUTION_TEXT_CHARS = 1000


def _resolution_text(title: str, descriptions: list[str],
                     max_chars: int = RESOLUTION_TEXT_CHARS) -> str:
    """``"title: d1<newline>d2 ..."`` with whole descriptions, in order, while the text stays
    within ``max_chars`` (the first one cut to fit when it alone is longer); the title
    alone when there is none.

    The descriptions are joined by newlines, as the entities table joins them, so for a
    group that stays one entity with a short description list this is the text the
    vector stage embeds for it (``title: description``) and the index's embedding cache
    (:mod:`kgloom.embedding.embedding_cache`) serves it there. A WordPiece tokenizer (the
    bundled all-MiniLM-L6-v2's) splits on any whitespace, so the vector is the one a
    space would give."""
    if not descriptions:
        return title
    text = f"{title}: {descriptions[0]}"[:max_chars]
    for d in descriptions[1:]:
        if len(text) + 1 + len(d) > max_chars:
            break
        text += "\n" + d
    return text
