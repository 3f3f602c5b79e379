"""Pure graph-retrieval algorithms over integer node ids: no files, no Dagster.

The :class:`Adjacency` is a compressed sparse row (CSR) view of the undirected entity
graph (node keys 0..n-1 as in graph-nodes.parquet). The functions here are what the
retrieval modes of :mod:`kgloom.query.retrieval` are built from, and each is small
enough to check by hand in a test:

- :func:`bfs` — multi-source breadth-first search with hop depth, first-reaching seed
  and the edge it came through (:func:`reach`: the same as arrays, vectorized over the
  CSR arrays, each level optionally split across threads).
- :func:`diversity_rerank` — the greedy seed selection of the fused retrieve:
  ``score(c) = ann(c) - lambda * max_{s in S} Jaccard(N(c), N(s))``.
- :func:`personalized_pagerank` — igraph's PRPACK personalized PageRank.
- :func:`reciprocal_rank_fusion` — RRF of several rankings.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where the first pool is made
    from concurrent.futures import ThreadPoolExecutor


@dataclass(frozen=True)
class Adjacency:
    """Undirected weighted graph in CSR form.

    Attributes:
        indptr: int64 array (n + 1,); the neighbours of node v are
            ``indices[indptr[v]:indptr[v + 1]]``, sorted ascending.
        indices: int64 array (2m,), neighbour node keys (each undirected edge twice).
        weights: float64 array (2m,), the edge weight of each ``indices`` entry.
        edge_rows: int64 array (2m,), the row of the edge in the edge list it was built
            from (so a caller can map back to relationship ids).
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    edge_rows: np.ndarray

    @property
    def n_nodes(self) -> int:
        """Number of nodes n."""
        return int(self.indptr.shape[0] - 1)

    @classmethod
    def from_edges(cls, n_nodes: int, src: Sequence[int] | np.ndarray,
                   dst: Sequence[int] | np.ndarray,
                   weight: Sequence[float] | np.ndarray | None = None) -> Adjacency:
        """Build from an undirected edge list (each edge given once, any direction).

        Args:
            n_nodes: node count n; keys must lie in [0, n).
            src, dst: int sequences of length m (edge endpoints).
            weight: float sequence of length m (default all 1.0).

        Raises:
            ValueError: on an endpoint outside [0, n) or length mismatch.
        """
        s = np.asarray(src, dtype=np.int64)
        d = np.asarray(dst, dtype=np.int64)
        w = np.ones(len(s), dtype=np.float64) if weight is None else np.asarray(
            weight, dtype=np.float64)
        if not len(s) == len(d) == len(w):
            raise ValueError(f"src, dst and weight lengths differ: {len(s)}, {len(d)}, {len(w)}")
        if len(s) and (min(s.min(), d.min()) < 0 or max(s.max(), d.max()) >= n_nodes):
            raise ValueError(f"edge endpoint outside [0, {n_nodes})")
        rows = np.arange(len(s), dtype=np.int64)
        a = np.concatenate([s, d])
        b = np.concatenate([d, s])
        ww = np.concatenate([w, w])
        rr = np.concatenate([rows, rows])
        keep = a != b  # a self-loop adds no neighbour
        a, b, ww, rr = a[keep], b[keep], ww[keep], rr[keep]
        order = np.lexsort((b, a))
        a, b, ww, rr = a[order], b[order], ww[order], rr[order]
        indptr = np.zeros(n_nodes + 1, dtype=np.int64)
        np.add.at(indptr, a + 1, 1)
        return cls(np.cumsum(indptr), b, ww, rr)

    def neighbors(self, v: int) -> np.ndarray:
        """Neighbour keys of ``v`` (sorted; a neighbour joined by parallel edges repeats)."""
        return self.indices[self.indptr[v]:self.indptr[v + 1]]

    def neighbor_set(self, v: int) -> frozenset[int]:
        """The open 1-hop neighbourhood N(v): distinct neighbours, v itself excluded."""
        return frozenset(self.neighbors(v).tolist())


@dataclass(frozen=True)
class Reached:
    """One node reached by :func:`bfs`.

    Attributes:
        node: node key.
        hops: minimum number of edges from any seed (0 for a seed).
        seed: the seed it is attributed to (itself for a seed).
        parent: the node of the previous level it is attributed to (-1 for a seed).
        edge_row: row of the parent-node edge in the source edge list (-1 for a seed).
        weight: weight of that edge (0.0 for a seed).
    """

    node: int
    hops: int
    seed: int
    parent: int
    edge_row: int
    weight: float


@dataclass(frozen=True)
class ReachedSet:
    """The nodes a BFS reached, as parallel arrays (one entry per node), sorted by
    (hops, seed rank, node): the array form of a list of :class:`Reached`.

    Attributes:
        node, hops, seed, parent, edge_row: int64 arrays (r,), as in :class:`Reached`.
        weight: float64 array (r,).
    """

    node: np.ndarray
    hops: np.ndarray
    seed: np.ndarray
    parent: np.ndarray
    edge_row: np.ndarray
    weight: np.ndarray

    def __len__(self) -> int:
        return int(self.node.shape[0])

    def to_list(self) -> list[Reached]:
        """The same nodes as :class:`Reached` objects, in the same order."""
        return [Reached(*row) for row in zip(
            self.node.tolist(), self.hops.tolist(), self.seed.tolist(),
            self.parent.tolist(), self.edge_row.tolist(), self.weight.tolist())]


# A BFS level whose frontier has fewer nodes than this is expanded on the calling thread
# even when threads > 1: below it, handing chunks to a pool costs more than it saves.
PARALLEL_MIN_FRONTIER = 512
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _row_positions(adj: Adjacency, nodes: np.ndarray) -> np.ndarray:
    """Positions in ``adj.indices`` of the rows of ``nodes``, row after row (int64)."""
    starts = adj.indptr[nodes]
    counts = adj.indptr[nodes + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # start of each row, repeated over its length, plus the offset inside the row
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(total, dtype=np.int64)


def _fresh_neighbors(adj: Adjacency, frontier: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Sorted distinct neighbours of ``frontier`` not marked in ``seen`` (read only)."""
    nbrs = adj.indices[_row_positions(adj, frontier)]
    return np.unique(nbrs[~seen[nbrs]])


def _pool(threads: int) -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor

    if threads not in _POOLS:
        _POOLS[threads] = ThreadPoolExecutor(max_workers=threads,
                                             thread_name_prefix="kgloom-bfs")
    return _POOLS[threads]


def bfs_levels(adj: Adjacency, seeds: Iterable[int], depth: int,
               threads: int = 1) -> list[np.ndarray]:
    """Multi-source BFS to ``depth`` hops, edges undirected, level-synchronous and
    vectorized: each level gathers the CSR rows of the whole frontier at once.

    With ``threads`` > 1, a frontier of at least PARALLEL_MIN_FRONTIER nodes is split
    into ``threads`` chunks whose rows are gathered and filtered against the nodes seen
    so far on a thread pool (numpy releases the GIL in these array operations); their
    results are merged (``np.unique``) before the next level, so the answer is the same
    for any thread count. This is the level-synchronous parallel BFS of Buluç & Madduri
    (SC 2011, "Parallel breadth-first search on distributed memory systems"), with the
    merge standing in for their shared visited set.

    Args:
        adj: the graph.
        seeds: node keys; duplicates and keys outside [0, n) are ignored.
        depth: maximum hops, >= 0.
        threads: workers per level, >= 1.

    Returns:
        ``levels``: levels[h] is the sorted int64 array of the nodes at exactly h hops;
        at most depth + 1 arrays (fewer when the search runs out of nodes).

    Raises:
        ValueError: when ``depth`` < 0 or ``threads`` < 1.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    n = adj.n_nodes
    s = np.asarray([int(x) for x in seeds], dtype=np.int64)
    frontier = np.unique(s[(s >= 0) & (s < n)])
    seen = np.zeros(n, dtype=bool)
    seen[frontier] = True
    levels = [frontier]
    for _ in range(depth):
        if not frontier.size:
            break
        if threads > 1 and frontier.size >= PARALLEL_MIN_FRONTIER:
            chunks = np.array_split(frontier, threads)
            parts = list(_pool(threads).map(lambda c: _fresh_neighbors(adj, c, seen), chunks))
            fresh = np.unique(np.concatenate(parts))
        else:
            fresh = _fresh_neighbors(adj, frontier, seen)
        if not fresh.size:
            break
        seen[fresh] = True
        levels.append(fresh)
        frontier = fresh
    return levels


def bfs_hops(adj: Adjacency, seeds: Iterable[int], depth: int) -> dict[int, int]:
    """Multi-source BFS to ``depth`` hops, edges undirected: node key -> minimum hops.

    Seeds outside [0, n) are ignored. Raises ValueError when ``depth`` < 0.
    """
    return {v: h for h, level in enumerate(bfs_levels(adj, seeds, depth))
            for v in level.tolist()}


def attribute_levels(adj: Adjacency, levels: Sequence[np.ndarray],
                     seeds: Sequence[int]) -> ReachedSet:
    """Give every reached node a parent edge and a seed, level by level, vectorized.

    A node at hop h > 0 is attributed to the neighbour at hop h - 1 whose own seed ranks
    first in ``seeds``, then by the heavier edge, then by the smaller key (then by the
    earlier entry of its CSR row, for parallel edges); it inherits that neighbour's
    seed. A node with no attributed neighbour one hop closer (possible only in a hop map
    that no BFS produced) is left out. The rule depends only on the hop levels, so the
    in-memory BFS and DuckDB's recursive CTE (which returns hops only) give the same
    provenance.

    Args:
        adj: the graph.
        levels: levels[h] = int64 array of the distinct nodes at h hops (as
            :func:`bfs_levels` returns), all keys in [0, n).
        seeds: the seeds in priority order (those of levels[0]).

    Returns:
        A :class:`ReachedSet` sorted by (hops, seed rank, node).
    """
    n = adj.n_nodes
    first_rank: dict[int, int] = {}
    for s in seeds:
        first_rank.setdefault(int(s), len(first_rank))
    rank = np.full(n, len(first_rank), dtype=np.int64)  # a node that is no seed ranks last
    for s, r in first_rank.items():
        if 0 <= s < n:
            rank[s] = r
    level_of = np.full(n, -1, dtype=np.int64)
    seed_of = np.full(n, -1, dtype=np.int64)
    parts = []
    for h, level in enumerate(levels):
        level = np.asarray(level, dtype=np.int64)
        if h == 0:
            level_of[level] = 0
            seed_of[level] = level
            parts.append((level, np.zeros_like(level), level, np.full_like(level, -1),
                          np.full_like(level, -1), np.zeros(len(level))))
            continue
        pos = _row_positions(adj, level)
        owner = np.repeat(level, adj.indptr[level + 1] - adj.indptr[level])
        nbr = adj.indices[pos]
        ok = level_of[nbr] == h - 1
        pos, owner, nbr = pos[ok], owner[ok], nbr[ok]
        w = adj.weights[pos]
        order = np.lexsort((pos, nbr, -w, rank[seed_of[nbr]], owner))
        pos, owner, nbr, w = pos[order], owner[order], nbr[order], w[order]
        first = np.ones(len(owner), dtype=bool)
        first[1:] = owner[1:] != owner[:-1]
        v, u, p, ww = owner[first], nbr[first], pos[first], w[first]
        level_of[v] = h
        seed_of[v] = seed_of[u]
        parts.append((v, np.full_like(v, h), seed_of[u], u, adj.edge_rows[p], ww))
    cols = [np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
            for i in range(6)]
    node, hops, seed, parent, edge_row, weight = cols
    order = np.lexsort((node, rank[seed] if len(seed) else seed, hops))
    return ReachedSet(node[order], hops[order], seed[order], parent[order],
                      edge_row[order], weight[order].astype(np.float64))


def attribute(adj: Adjacency, hops: dict[int, int], seeds: Sequence[int]) -> list[Reached]:
    """:func:`attribute_levels` for a hop map (node key -> minimum hops from the seeds,
    as :func:`bfs_hops` returns); one :class:`Reached` per attributed node, sorted by
    (hops, seed rank, node)."""
    nodes = np.fromiter(hops.keys(), dtype=np.int64, count=len(hops))
    h = np.fromiter(hops.values(), dtype=np.int64, count=len(hops))
    return attribute_levels(adj, hop_levels(nodes, h), seeds).to_list()


def hop_levels(nodes: np.ndarray, hops: np.ndarray) -> list[np.ndarray]:
    """Per-node hop counts as per-level node arrays: levels[h] = sorted int64 array of
    the ``nodes`` whose ``hops`` is h (empty for a level no node has)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    hops = np.asarray(hops, dtype=np.int64)
    if not len(nodes):
        return []
    return [np.sort(nodes[hops == level]) for level in range(int(hops.max()) + 1)]


def reach(adj: Adjacency, seeds: Sequence[int], depth: int, threads: int = 1) -> ReachedSet:
    """Multi-source BFS with provenance, as arrays: :func:`bfs_levels` then
    :func:`attribute_levels`. Raises ValueError when ``depth`` < 0 or threads < 1."""
    return attribute_levels(adj, bfs_levels(adj, seeds, depth, threads), seeds)


def bfs(adj: Adjacency, seeds: Sequence[int], depth: int) -> list[Reached]:
    """Multi-source BFS with provenance: :func:`reach` as a list of :class:`Reached`.

    Every node is settled at its minimum hop count; see :func:`attribute_levels` for
    which seed and parent edge a node is credited to.

    Args:
        adj: the graph.
        seeds: node keys to start from, in priority order; duplicates and keys outside
            [0, n) are ignored.
        depth: maximum hops (0 returns the seeds).

    Returns:
        One :class:`Reached` per reached node, sorted by (hops, seed rank, node).

    Raises:
        ValueError: when ``depth`` < 0.
    """
    return reach(adj, seeds, depth).to_list()


def first_hop(adj: Adjacency, seeds: Sequence[int]) -> np.ndarray:
    """The distinct neighbours of ``seeds`` (the seeds themselves included when they
    neighbour each other), sorted int64: the union of the N(s) that the fused rerank
    reads, i.e. the BFS's first hop plus possibly seeds."""
    if not len(seeds):
        return np.zeros(0, dtype=np.int64)
    return np.unique(adj.indices[_row_positions(adj, np.asarray(seeds, dtype=np.int64))])


def jaccard(a: frozenset[int] | set[int], b: frozenset[int] | set[int]) -> float:
    """|a ∩ b| / |a ∪ b|; 0.0 when both are empty."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


@dataclass(frozen=True)
class RerankedSeed:
    """A seed chosen by :func:`diversity_rerank`.

    Attributes:
        node: node key.
        ann_score: its similarity to the query (as given).
        overlap: max Jaccard of its neighbourhood with the seeds chosen before it (0.0
            for the first).
        score: ``ann_score - lam * overlap``, the value it was chosen with.
    """

    node: int
    ann_score: float
    overlap: float
    score: float


def diversity_rerank(candidates: Sequence[tuple[int, float]],
                     neighborhoods: dict[int, frozenset[int]] | None, top_k: int,
                     lam: float, adj: Adjacency | None = None) -> list[RerankedSeed]:
    """Greedy graph-aware seed selection (the fused retrieve's rerank step).

    Repeatedly picks the candidate with the highest
    ``ann(c) - lam * max_{s in S} Jaccard(N(c), N(s))`` over the seeds S chosen so far
    (the max is 0 while S is empty), adds it to S, and stops at ``top_k`` seeds or when
    candidates run out. N(x) is the open 1-hop neighbourhood (x itself excluded). Ties
    go to the candidate listed first (candidates usually come sorted by ANN score), so
    with ``lam = 0`` the result is the first ``top_k`` candidates by ANN score: the
    plain two-step baseline. The greedy pass is evaluated lazily, CELF-style
    (:func:`_lazy_greedy_seeds`), with the picks, scores and ties of the eager pass.

    Source: the fused graph-RAG retrieve procedure (ANN with oversampling, greedy
    overlap-penalized rerank, BFS from the chosen seeds) described in the NeoFuse
    project write-up; the penalty is a maximal-marginal-relevance step (Carbonell &
    Goldstein, SIGIR 1998) with Jaccard overlap of graph neighbourhoods as the redundancy.

    Args:
        candidates: (node key, ANN score) pairs, e.g. 5 x top_k of them; a repeated
            node counts once, at its first position.
        neighborhoods: node -> N(node); missing nodes are looked up in ``adj``.
        top_k: seeds to choose, > 0.
        lam: overlap penalty lambda, >= 0.
        adj: the graph, used for nodes missing from ``neighborhoods``.

    Returns:
        The chosen seeds in pick order.

    Raises:
        ValueError: when top_k <= 0 or lam < 0.
    """
    if top_k <= 0:
        raise ValueError(f"top_k must be > 0, got {top_k}")
    if lam < 0:
        raise ValueError(f"lambda must be >= 0, got {lam}")
    pool = _first_occurrences(candidates)
    if lam == 0:  # no penalty: the first top_k by position, no neighbourhood needed
        return [RerankedSeed(node, ann, 0.0, ann) for node, ann in pool[:top_k]]
    return _lazy_greedy_seeds(pool, _neighborhood_lookup(neighborhoods, adj), top_k, lam)


def _first_occurrences(candidates: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    """``candidates`` as (int node key, float ANN score), each node once, at its first
    position."""
    pool: list[tuple[int, float]] = []
    seen: set[int] = set()
    for node, score in candidates:
        if node not in seen:
            seen.add(node)
            pool.append((int(node), float(score)))
    return pool


def _neighborhood_lookup(neighborhoods: dict[int, frozenset[int]] | None,
                         adj: Adjacency | None) -> Callable[[int], frozenset[int]]:
    """node -> its open neighbourhood N(node): from ``neighborhoods`` when given there,
    else from ``adj`` (an empty set without it); each node looked up once, on first
    need."""
    given = neighborhoods or {}
    hood: dict[int, frozenset[int]] = {}

    def n_of(node: int) -> frozenset[int]:
        if node not in hood:
            hood[node] = given[node] if node in given else (
                adj.neighbor_set(node) if adj is not None else frozenset())
        return hood[node]

    return n_of


def _lazy_greedy_seeds(pool: Sequence[tuple[int, float]],
                       n_of: Callable[[int], frozenset[int]], top_k: int,
                       lam: float) -> list[RerankedSeed]:
    """The overlap-penalized greedy pass of :func:`diversity_rerank` over ``pool``
    ((node key, ANN score), each node once, in tie order), at most ``top_k`` seeds in
    pick order.

    The greedy pass is evaluated lazily, as CELF does for submodular greedy selection
    (Leskovec et al., KDD 2007, "Cost-effective outbreak detection in networks"): a
    candidate's penalty only grows as seeds are added, so its score against the seeds
    it was last compared with is an upper bound. Candidates wait in a heap on that
    bound; the top one is compared with the seeds added since, and is picked when its
    bound is still the best (its score is then exact). The picks, scores and ties are
    those of the eager pass over every candidate; only the neighbourhoods and Jaccards
    nobody needed are never computed (about top_k + the penalized ones instead of
    oversample x top_k neighbourhoods and top_k x oversample x top_k Jaccards).
    """
    overlap = [0.0] * len(pool)  # max Jaccard against chosen[:compared[i]]
    compared = [0] * len(pool)
    # (-upper bound, position): the heap's order is the eager pass's (score, then first)
    heap = [(-ann, i) for i, (_, ann) in enumerate(pool)]
    chosen: list[RerankedSeed] = []
    while heap and len(chosen) < top_k:
        neg, i = heapq.heappop(heap)
        if compared[i] < len(chosen):
            mine = n_of(pool[i][0])
            for s in chosen[compared[i]:]:
                overlap[i] = max(overlap[i], jaccard(mine, n_of(s.node)))
            compared[i] = len(chosen)
            heapq.heappush(heap, (-(pool[i][1] - lam * overlap[i]), i))
            continue
        node, ann = pool[i]
        chosen.append(RerankedSeed(node, ann, overlap[i], -neg))
    return chosen


def mean_pairwise_jaccard(nodes: Sequence[int], adj: Adjacency) -> float:
    """Mean Jaccard overlap of N(a), N(b) over all unordered pairs of ``nodes`` (0.0 for
    fewer than two): the seed-redundancy figure of the fused-retrieve study."""
    hoods = [adj.neighbor_set(v) for v in nodes]
    pairs = [(i, j) for i in range(len(hoods)) for j in range(i + 1, len(hoods))]
    return float(np.mean([jaccard(hoods[i], hoods[j]) for i, j in pairs])) if pairs else 0.0


def personalized_pagerank(adj: Adjacency, personalization: dict[int, float],
                          damping: float = 0.5) -> np.ndarray:
    """Personalized PageRank over the undirected weighted graph.

    The random surfer follows an edge with probability ``damping`` (chosen in proportion
    to edge weight) and otherwise jumps back to a node drawn from the personalization
    distribution. Computed by igraph's ``Graph.personalized_pagerank`` (PRPACK solver).
    HippoRAG (Gutiérrez et al. 2024, arXiv 2405.14831) retrieves passages with this,
    seeded by the query's entities, at damping 0.5.

    Args:
        adj: the graph (n nodes).
        personalization: node key -> non-negative reset weight; normalized here.
        damping: probability of following an edge, in [0, 1).

    Returns:
        float64 array (n,), the stationary probabilities (sum 1); all zeros when the
        personalization is empty or sums to 0.

    Raises:
        ValueError: on damping outside [0, 1) or a negative weight.
    """
    import igraph as ig

    if not 0 <= damping < 1:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    n = adj.n_nodes
    reset = np.zeros(n, dtype=np.float64)
    for node, w in personalization.items():
        if w < 0:
            raise ValueError(f"personalization weights must be >= 0, got {w} for {node}")
        if 0 <= node < n:
            reset[node] += w
    if n == 0 or reset.sum() <= 0:
        return np.zeros(n, dtype=np.float64)
    # each undirected edge once: the entries with source < target
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(adj.indptr))
    once = src < adj.indices
    g = ig.Graph(n=n, edges=np.column_stack([src[once], adj.indices[once]]).tolist(),
                 directed=False)
    weights = adj.weights[once]
    pr = g.personalized_pagerank(damping=damping, directed=False,
                                 weights=weights.tolist() if len(weights) else None,
                                 reset=(reset / reset.sum()).tolist())
    return np.asarray(pr, dtype=np.float64)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: float = 60.0,
                           weights: Sequence[float] | None = None) -> list[tuple[str, float]]:
    """Fuse ranked lists by reciprocal rank: ``score(d) = sum_i w_i / (k + rank_i(d))``,
    ranks from 1; a list that lacks ``d`` adds nothing.

    Source: Cormack, Clarke & Büttcher, "Reciprocal rank fusion outperforms Condorcet
    and individual rank learning methods", SIGIR 2009 (k = 60).

    Returns:
        (id, fused score) sorted by score descending, ties by first appearance.
    """
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    score: dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, item in enumerate(ranking, 1):
            score[item] = score.get(item, 0.0) + w / (k + rank)
    first = {item: i for i, item in enumerate(dict.fromkeys(x for r in rankings for x in r))}
    return sorted(score.items(), key=lambda kv: (-kv[1], first[kv[0]]))
