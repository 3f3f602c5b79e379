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

    A longer name is a candidate only where it holds the shorter one in its scope
    (:func:`_name_scope`: before an apposition, and not in a title that describes a thing
    about a name) outside a complement (:func:`_contains`), and, with ``common_words``
    (casefolded words the corpus writes in lower case more often than capitalized:
    :func:`common_words_of`), when what it adds to the shorter name is names only: no
    common word and no number. "Kubrick" joins "Stanley Kubrick" and "Tim" "Tiny Tim"
    (the book writes "Tiny" capitalized), but "Canada" is not "Air Canada", "London" not
    "London Heathrow Airport", "American" not "American Football Conference", "FIFA" not
    "2007 FIFA U-20 World Cup": a common word or a number added to a name makes a
    compound naming another thing (on the HotpotQA sample about half of the merges
    into such longer names joined two different things).

    With ``documents_of`` (key -> documents naming it), a longer name is a candidate of
    a shorter one only when more than :data:`SHARED_DOCUMENTS` of the documents naming
    the shorter name also name a member of the longer name's group. A short name is the
    short form of a long one where the documents that write it introduce the long one
    ("Jacob Marley ... Marley"); a short name most of whose documents never write the
    long one is another thing: on the 2Wiki pool (6,119 one-passage documents) 1,020 of
    6,896 name merges joined names that share no document, such as "Ireland" ->
    "Northern Ireland", "Rome" -> "Tony Rome", "Milan" -> "Duchy of Milan", and on the
    HotpotQA sample a country named by many passages joined the one compound that
    shares a passage with it ("Canada" -> "Air Canada", "London" -> "London Heathrow
    Airport"). A novel in chapter files joins "Scrooge" to "Ebenezer Scrooge" when most
    chapters name him in full; in a one-document corpus every name passes.

    With ``places_of`` (key -> {document: (first text unit's position, the key's units
    there)}), a longer name that adds words to the shorter one's core (not only an
    honorific) is joinable only where it is introduced: in more than
    :data:`SHARED_DOCUMENTS` of the documents naming both, it is written in a text unit
    of the shorter name or before the shorter name's first one. A short form refers to a
    name the reader has met ("Ebenezer Scrooge" in the cast list, then "Scrooge"); a name
    written again and again before a longer one first appears, far from it, is another
    thing: a novel's rag-dealer "Joe" (from its fourth chapter) is not the jest-book "Joe
    Miller" named once in its fifth. A name whose long form comes later but in one of its
    own text units still joins ("Kubrick ... Stanley Kubrick" in one passage).

    With ``determined`` (one-word keys the corpus mostly writes after a determiner:
    :func:`common_words_of`), such a class noun does not join a longer name that ends in
    it: "the Ghost" of a novel is every ghost, not "Marley's Ghost"; "the Spirit" is not
    the "Evil Spirit" of one aside. A name rarely takes an article ("Scrooge": 7 of 455).

    Candidates of a name are the groups holding a more specific name whose core contains
    its core as whole tokens. Types are not compared: a small model's types are too
    noisy to veto "Jacob Marley" (LOCATION in one unit) absorbing "Marley". A longer name
    that joins names with a conjunction ("Scrooge and Marley", a firm) is never a
    candidate. A candidate of another honorific gender still counts toward ambiguity
    (that is what keeps "Cratchit" apart from "Bob Cratchit" when "Mrs. Cratchit"
    exists), except that a bare surname whose only candidates are one "Mr." name and
    "Mrs."/"Miss" names has the "Mr." name alone.

    Pass 1 (``name_extension``) visits names from most to least specific, so by the time
    "Scrooge" is seen, "Mr. Scrooge" already belongs to "Ebenezer Scrooge" and both count
    as one candidate; a name with exactly one candidate joins it when the genders of the
    two groups are compatible, and a name with several is kept for pass 2.

    Pass 2 (``name_context``, only with ``units_of``: key -> text units naming it) visits
    the kept names in the same order, after every unambiguous merge, so a group's text
    units include those of every name already in it ("Bob" is in Bob Cratchit's group
    when "Mr. Cratchit" is decided). Candidates are recomputed (pass-2 merges of more
    specific names can leave one); with several, only those of a compatible gender and
    no conflicting life stage (``_LIFE_STAGE``) compete, and the name joins the one whose
    group shares the most text units with its own group, when that count is positive and
    strictly the highest. A name's own units are pooled with those of the names of the
    same core it could be (the same gender and life stage): "Mr. Scrooge" (9 units of the
    book) shares none with "Ebenezer Scrooge" and one each with one-off names such as
    "Whereat Scrooge", but "Scrooge" (72 units) shares five with Ebenezer Scrooge, so the
    two decide together, and "Scrooge" then follows.

    Returns the keys merged in pass 2.
    """
    units = {k: set((units_of or {}).get(k, set())) for k in keys}  # per group root
    # per group root: document -> (first position, the group's units there)
    places = {k: {d: (i, set(us)) for d, (i, us) in (places_of or {}).get(k, {}).items()}
              for k in keys}
    docs = {k: set((documents_of or {}).get(k, set())) for k in keys}  # per group root
    genders = {k: {v.gender} for k, v in keys.items()}  # per group root
    stages = {k: {v.stage} - {""} for k, v in keys.items()}  # per group root
    # each key's core and specificity once (properties recompute them at every read),
    # and which keys' cores hold each token; names joined by a conjunction and titles
    # with no scope (_name_scope) are never candidates, so they are left out of the token
    # lists
    core = {k: v.core for k, v in keys.items()}
    scope: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {}
    for k, v in keys.items():
        sc = _name_scope(v)
        if sc is not None and not _CONJUNCTIONS & set(core[k]):
            scope[k] = sc
    specificity = {k: v.specificity for k, v in keys.items()}
    same_core: dict[tuple[str, ...], list[str]] = {}
    for k, v in keys.items():
        same_core.setdefault(v.core, []).append(k)
    by_token: dict[str, list[str]] = {}  # core token -> candidate keys whose core holds it
    for k in scope:
        for tok in set(core[k]):
            by_token.setdefault(tok, []).append(k)

    def candidates(k: str) -> tuple[set[str], set[str]]:
        """(contenders, allowed): the groups holding a longer name ``k`` is a part of
        (in its scope, outside a complement, named beside it in some document), and
        those of them it may join (adding no common word or number, named beside it in
        most of its documents). A contender that may not be joined still makes ``k``
        ambiguous: "Christmas" in "Christmas-time" and "Christmas Eve" is decided by
        context, not given to "Christmas Eve" because "time" is a common word."""
        info, mine, spec = keys[k], core[k], specificity[k]
        # a candidate's core contains every token of this core, so the shortest token
        # list holds them all (the rarest token, not the first: "John" or "Film" head
        # thousands of the pool's names, which made this scan grow with their square)
        pool = min((by_token.get(tok, ()) for tok in set(mine)), key=len)
        held = [c for c in pool if c != k and specificity[c] > spec
                and _contains(scope[c][0], mine)]
        mine_docs = (documents_of or {}).get(k) or set()
        # some document writes the short name beside the longer one
        roots = {uf.find(c) for c in held}
        if mine_docs:
            roots = {r for r in roots if mine_docs & docs[r]}
        allowed = {uf.find(c) for c in held
                   if not _adds_common(scope[c][0], mine, common_words, scope[c][1])
                   and not (len(mine) == 1 and mine[0] in (determined or ())
                            and scope[c][0][-1] == mine[0])}
        if mine_docs:
            # most documents that write the short name write the longer one too
            allowed = {r for r in allowed
                       if len(mine_docs & docs[r]) > SHARED_DOCUMENTS * len(mine_docs)}
        if places_of is not None:
            # a longer name that adds words must be introduced; an honorific alone does
            # not make another name ("Mr. Ebenezer Scrooge" is "Ebenezer Scrooge")
            longer = {uf.find(c) for c in held if len(core[c]) > len(mine)}
            allowed = {r for r in allowed if r not in longer or introduced(k, r)}
        if len(roots) > 1 and info.gender == "":
            # a bare surname against exactly one "Mr." name and only "Mrs."/"Miss" names
            # is the man ("Fezziwig" with "Mr. Fezziwig" and "Mrs. Fezziwig"): English
            # usage names a woman by her honorific, not by the bare surname
            male = [r for r in roots if "m" in genders[r] and "f" not in genders[r]]
            if len(male) == 1 and all(genders[r] == {"f"} for r in roots if r != male[0]):
                roots = {male[0]}
        return roots, allowed & roots

    def introduced(k: str, root: str) -> bool:
        """Is group ``root`` written in a unit of ``k`` or before its first one, in more
        than :data:`SHARED_DOCUMENTS` of the documents naming both? ``k`` counts with
        its group and every name of its core ("Marley" with "Mr. Marley")."""
        mine: dict[str, tuple[int, set[str]]] = {}
        for v in [uf.find(k), *same_core[core[k]]]:
            mine = _merge_places(mine, places[v])
        shared = mine.keys() & places[root].keys()
        met = sum(1 for d in shared if places[root][d][0] <= mine[d][0]
                  or places[root][d][1] & mine[d][1])
        return not shared or met > SHARED_DOCUMENTS * len(shared)

    def join(k: str, root: str) -> bool:
        mine = uf.find(k)
        if not _compatible(genders[mine], genders[root]):
            return False
        uf.union(mine, root)
        joined = uf.find(root)
        genders[joined] = genders[mine] | genders[root]
        units[joined] = units[mine] | units[root]
        docs[joined] = docs[mine] | docs[root]
        stages[joined] = stages[mine] | stages[root]
        places[joined] = _merge_places(places[root], places[mine])
        return True

    order = sorted((k for k in keys if keys[k].core),
                   key=lambda k: (tuple(-x for x in keys[k].specificity), k))
    ambiguous: list[str] = []
    for k in order:
        roots, allowed = candidates(k)
        if len(roots) == 1:
            if allowed:
                join(k, roots.pop())
        elif roots:
            ambiguous.append(k)
    if units_of is None:
        return set()

    def pooled(k: str, mine: str) -> set[str]:
        """Units of k's group and of the names with k's core that it could be ("Mr.
        Scrooge" and "Scrooge"): one name with and without an honorific is one contest."""
        out = set(units[mine])
        for v in same_core[keys[k].core]:
            if v != k and _compatible(genders[mine], {keys[v].gender}) \
                    and not _stages_conflict(stages[mine], {keys[v].stage} - {""}):
                out |= units_of.get(v, set())
        return out

    by_context: set[str] = set()
    for k in ambiguous:
        (roots, allowed), mine = candidates(k), uf.find(k)
        if len(roots) > 1:
            # only candidates it could be compete ("Mr. X" is never "Mrs. X", and a
            # "Mr." name does not pick a "Master" group over the others)
            mine_units = pooled(k, mine)
            shared = sorted(((len(mine_units & units[r]), r) for r in roots
                             if _compatible(genders[mine], genders[r])
                             and not _stages_conflict(stages[mine], stages[r])),
                            reverse=True)
            if shared and shared[0][0] > 0 and (len(shared) == 1 or shared[0][0] > shared[1][0]):
                roots = {shared[0][1]}
        if len(roots) == 1 and roots <= allowed and join(k, roots.pop()):
            by_context.add(k)
    return by_context


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

    Nearest-neighbour search over the normalized embedding matrix, a block of rows at a
    time (top ``k_neighbours`` per row), not an all-pairs Python loop. A block holds at
    most ``block_cells`` similarities (rows x groups; 16 MB of float64 at the default),
    so the search's memory stays flat as the groups grow: a fixed 1,024 rows cost
    1,024 x N x 8 bytes three times over (the similarities, their negation, the
    partition's indices), 0.7 GB at the 2Wiki pool's 28,000 groups. Two groups that
    are both named in one text unit are never merged here (a cannot-link constraint):
    two different names side by side in one passage are almost always two things, and
    evidence-sentence descriptions of such names are near-identical, so their
    embeddings would match. When ``verify`` is
    given, a candidate pair is merged only if ``verify(text_a, text_b)`` says yes (e.g.
    an LLM yes/no question). Returns, for every group root that was merged, the best
    cosine of an accepted pair touching it.
    """
    groups: dict[str, list[str]] = {}
    for k in sorted(keys):
        groups.setdefault(uf.find(k), []).append(k)
    roots = sorted(groups)
    if len(roots) < 2:
        return {}
    texts, types, genders = [], [], []
    for r in roots:
        members = groups[r]
        _, title = _canonical_title(keys, members)
        descs = _descriptions(keys, members)
        texts.append(_resolution_text(title, descs))
        types.append(_vote(t for m in members for t in keys[m].types))
        genders.append({keys[m].gender for m in members})
    vecs = np.asarray(embed(texts), dtype=np.float64)
    if vecs.ndim != 2 or vecs.shape[0] != len(texts):
        raise ValueError(f"embed returned shape {vecs.shape} for {len(texts)} texts")
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    # the search in float32 (half the float64 time of an N x N x dim product: 10 s at
    # the 2Wiki pool's 28,000 groups), each candidate's score then taken in float64, so
    # the threshold and the merge order see the same scores as a float64 search
    search = vecs.astype(np.float32)
    near = threshold - _FLOAT32_SLACK

    k_nn = min(k_neighbours + 1, len(roots))
    pairs: list[tuple[float, int, int]] = []
    block = max(1, block_cells // len(roots))
    for start in range(0, len(roots), block):
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
    best: dict[str, float] = {}
    comp_genders = {r: set(g) for r, g in zip(roots, genders)}
    comp_units = {r: set().union(*((units_of or {}).get(m, set()) for m in groups[r]))
                  for r in roots}
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
