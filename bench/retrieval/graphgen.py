"""A deterministic synthetic citation graph of ogbn-arxiv's size and shape.

ogbn-arxiv (OGB, Hu et al. 2020, arXiv 2005.00687) has 169,343 papers, 1,166,243
citation edges, 128-dim node features and 40 subject labels. It cannot be downloaded
here, so :func:`generate_graph` builds a stand-in with the same counts:

- labels: ``n_coarse`` coarse labels of unequal size (log-normal shares), each split
  into 8-12 fine labels (a two-level hierarchy; ``SyntheticGraph.fine_parent`` maps a
  fine label to its coarse one);
- a "true topic" vector per node: its fine label's centre (itself near its coarse
  label's centre) plus a few latent topic directions per fine label (LATENT_DIM) plus
  small isotropic noise, unit length;
- edges: every node "cites" ``d_i`` others (d_i log-normal, mean set so the unique
  undirected edge count reaches ``n_edges``): mostly among its ``LOCAL_K`` nearest
  neighbours by true topic inside its fine label, some elsewhere in its coarse label, a
  few anywhere (long-range). Targets are drawn in proportion to a heavy-tailed per-node
  "fitness" (Pareto), as in fitness models of citation networks (Bianconi & Barabási
  2001), which gives hubs; citing near neighbours in a low-dimensional topic space gives
  the triangles (clustering) that a uniform random graph lacks;
- the node's embedding (what a query is matched against): its true topic vector plus
  isotropic noise of norm OBS_NOISE, unit length, as features computed from a paper's
  text observe its topic with noise. OBS_NOISE sets how far ANN neighbours are also
  graph neighbours. It is 1.5 so that the two-step baseline's mean pairwise seed
  neighbourhood Jaccard lands near 0.02, the ogbn-arxiv baseline figure the study's
  targets are set against (the only figure at hand on how ogbn-arxiv's ANN neighbours
  overlap in its graph); with 0.6 it is 0.070-0.097 (bench/results/retrieval/
  sensitivity_obs_noise_0.6/sweep_summary.json).

Everything is numpy, vectorized per label group (the kNN is a chunked matrix product
within each fine label), seeded by one integer: the same arguments give byte-identical
arrays.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

OGBN_ARXIV_NODES = 169_343
OGBN_ARXIV_EDGES = 1_166_243
OGBN_ARXIV_DIM = 128
OGBN_ARXIV_LABELS = 40

FINE_PER_COARSE = (8, 12)  # each coarse label splits into 8..12 fine labels (inclusive)
LOCAL_K = 16  # nearest neighbours (inside the fine label) a node cites from
SHARE_LOCAL, SHARE_COARSE = 0.80, 0.15  # the rest (0.05) is long-range, any label
COARSE_SPREAD = 0.9  # noise of a fine centre around its coarse centre (per-dim std x sqrt(dim))
LATENT_DIM = 3  # a fine label's papers vary along a few topic directions ...
LATENT_SPREAD = 0.45  # ... with this std per direction ...
NODE_SPREAD = 0.25  # ... plus isotropic noise of this norm (the "true" topic vector)
OBS_NOISE = 1.5  # the node's embedding is its true topic vector plus noise of this norm
FITNESS_SHAPE = 1.4  # Pareto shape of the citation fitness (smaller: heavier tail)
DRAW_SURPLUS = 1.3  # citations drawn per wanted unique undirected edge
CHUNK_ROWS = 2048  # rows per kNN matrix product (bounds memory: CHUNK_ROWS x group size)


@dataclass(frozen=True)
class SyntheticGraph:
    """The generated graph.

    Attributes:
        vectors: float32 (n, dim), unit rows.
        coarse: int32 (n,), coarse label 0..n_coarse-1.
        fine: int32 (n,), fine label 0..n_fine-1, numbered coarse label by coarse label
            (fine labels of coarse c are contiguous).
        fine_parent: int32 (n_fine,), the coarse label of each fine label.
        src, dst: int64 (m,), undirected edges, src < dst, unique, sorted by (src, dst).
    """

    vectors: np.ndarray
    coarse: np.ndarray
    fine: np.ndarray
    fine_parent: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    @property
    def n_nodes(self) -> int:
        """Node count n."""
        return int(self.vectors.shape[0])

    @property
    def n_edges(self) -> int:
        """Undirected edge count m."""
        return int(self.src.shape[0])


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _split(total: int, shares: np.ndarray, minimum: int) -> np.ndarray:
    """Integer sizes >= minimum summing to total, roughly proportional to shares."""
    k = len(shares)
    if total < k * minimum:
        raise ValueError(f"{total} nodes cannot fill {k} groups of at least {minimum}")
    extra = total - k * minimum
    raw = shares / shares.sum() * extra
    sizes = np.floor(raw).astype(np.int64)
    # hand the remainder to the largest fractional parts (ties: lower index)
    rest = extra - int(sizes.sum())
    order = np.lexsort((np.arange(k), -(raw - sizes)))
    sizes[order[:rest]] += 1
    return sizes + minimum


def _labels(rng: np.random.Generator, n: int, n_coarse: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    coarse_sizes = _split(n, rng.lognormal(0.0, 1.0, n_coarse), minimum=60)
    lo, hi = FINE_PER_COARSE
    n_fine_of = rng.integers(lo, hi + 1, n_coarse)
    fine_sizes, fine_parent = [], []
    for c in range(n_coarse):
        fine_sizes.append(_split(int(coarse_sizes[c]), rng.dirichlet(np.full(n_fine_of[c], 2.0)),
                                 minimum=5))
        fine_parent += [c] * int(n_fine_of[c])
    fine_sizes = np.concatenate(fine_sizes)
    fine = np.repeat(np.arange(len(fine_sizes), dtype=np.int32), fine_sizes)
    fine_parent = np.asarray(fine_parent, dtype=np.int32)
    return fine_parent[fine], fine, fine_parent


def _vectors(rng: np.random.Generator, fine: np.ndarray, fine_parent: np.ndarray,
             n_coarse: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(true topic vectors, observed embeddings): float32 (n, dim) each, unit rows."""
    scale = 1.0 / np.sqrt(dim)
    coarse_c = _unit(rng.standard_normal((n_coarse, dim)))
    fine_c = _unit(coarse_c[fine_parent]
                   + COARSE_SPREAD * scale * rng.standard_normal((len(fine_parent), dim)))
    n_fine = len(fine_parent)
    axes = rng.standard_normal((n_fine, LATENT_DIM, dim)) * scale  # ~unit, ~orthogonal
    z = LATENT_SPREAD * rng.standard_normal((len(fine), LATENT_DIM))
    x = (fine_c[fine] + np.einsum("nr,nrd->nd", z, axes[fine])
         + NODE_SPREAD * scale * rng.standard_normal((len(fine), dim)))
    true = _unit(x).astype(np.float32)
    observed = _unit(true + OBS_NOISE * scale * rng.standard_normal((len(fine), dim)))
    return true, observed.astype(np.float32)


def _local_candidates(vectors: np.ndarray, fine: np.ndarray, k: int) -> np.ndarray:
    """int64 (n, k): each node's k nearest others (cosine) inside its fine label,
    nearest first; -1 pads a label with fewer than k + 1 members."""
    n = len(fine)
    out = np.full((n, k), -1, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(fine, prepend=-1, append=fine.max() + 1))
    for start, end in itertools.pairwise(bounds):
        x = vectors[start:end]
        kk = min(k, end - start - 1)
        if kk <= 0:
            continue
        for r0 in range(0, end - start, CHUNK_ROWS):
            sims = x[r0:r0 + CHUNK_ROWS] @ x.T
            rows = np.arange(sims.shape[0])
            sims[rows, rows + r0] = -np.inf  # not itself
            part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
            top = np.take_along_axis(sims, part, axis=1)
            # nearest first; ties by index for determinism
            order = np.lexsort((part, -top), axis=1)
            out[start + r0:start + r0 + len(rows), :kk] = start + np.take_along_axis(
                part, order, axis=1)
    return out


def _draw_weighted(rng: np.random.Generator, members: np.ndarray, fitness: np.ndarray,
                   count: int) -> np.ndarray:
    p = fitness[members]
    return rng.choice(members, size=count, p=p / p.sum())


def _cite(rng: np.random.Generator, vectors: np.ndarray, coarse: np.ndarray,
          fine: np.ndarray, mean_cites: float) -> tuple[np.ndarray, np.ndarray]:
    """Directed citation pairs (citing, cited) before deduplication."""
    n = len(fine)
    fitness = rng.pareto(FITNESS_SHAPE, n) + 1.0
    cites = np.maximum(1, np.rint(rng.lognormal(np.log(mean_cites) - 0.5 * 0.8 ** 2, 0.8, n))
                       ).astype(np.int64)
    kind = rng.random(cites.sum())
    owner = np.repeat(np.arange(n), cites)
    local = kind < SHARE_LOCAL
    coarse_only = (kind >= SHARE_LOCAL) & (kind < SHARE_LOCAL + SHARE_COARSE)
    far = ~(local | coarse_only)

    # local: Gumbel top-d over the k nearest, keyed by log fitness (sampling without
    # replacement in proportion to fitness; Vieira 2014, "Gumbel-max trick")
    cand = _local_candidates(vectors, fine, LOCAL_K)
    d_local = np.bincount(owner[local], minlength=n)
    keys = np.where(cand >= 0, np.log(fitness[np.maximum(cand, 0)]), -np.inf) \
        + rng.gumbel(size=cand.shape)
    order = np.argsort(-keys, axis=1, kind="stable")
    ranked = np.take_along_axis(cand, order, axis=1)
    take = np.arange(LOCAL_K)[None, :] < d_local[:, None]
    take &= ranked >= 0
    src_local = np.broadcast_to(np.arange(n)[:, None], ranked.shape)[take]
    dst_local = ranked[take]

    src_c, dst_c = [owner[coarse_only]], []
    for c in range(int(coarse.max()) + 1):
        need = int(np.count_nonzero(coarse[owner[coarse_only]] == c))
        members = np.flatnonzero(coarse == c)
        dst_c.append(_draw_weighted(rng, members, fitness, need))
    # the draws above come out grouped by label: reorder them to the citing nodes' order
    by_label = np.argsort(coarse[owner[coarse_only]], kind="stable")
    dst_coarse = np.empty(len(by_label), dtype=np.int64)
    dst_coarse[by_label] = np.concatenate(dst_c) if dst_c else np.zeros(0, np.int64)
    src_far = owner[far]
    dst_far = _draw_weighted(rng, np.arange(n), fitness, len(src_far))
    return (np.concatenate([src_local, src_c[0], src_far]),
            np.concatenate([dst_local, dst_coarse, dst_far]))


def _undirected_unique(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    keep = src != dst
    a, b = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    return np.unique(a * np.int64(1 << 32) + b)


def generate_graph(n_nodes: int = OGBN_ARXIV_NODES, n_edges: int = OGBN_ARXIV_EDGES,
                   dim: int = OGBN_ARXIV_DIM, n_coarse: int = OGBN_ARXIV_LABELS,
                   seed: int = 0) -> SyntheticGraph:
    """Generate the graph (see the module doc for the model).

    Args:
        n_nodes: nodes n (>= 60 x n_coarse).
        n_edges: undirected unique edges m wanted; reached exactly when the citation
            draws give at least m unique pairs (they are drawn with 30 % to spare and
            the surplus dropped at random), else fewer.
        dim: embedding dimension.
        n_coarse: coarse labels.
        seed: numpy Generator seed; the same arguments give byte-identical arrays.

    Returns:
        A :class:`SyntheticGraph`.

    Raises:
        ValueError: when n_nodes is too small for n_coarse labels.
    """
    rng = np.random.default_rng(seed)
    coarse, fine, fine_parent = _labels(rng, n_nodes, n_coarse)
    true, vectors = _vectors(rng, fine, fine_parent, n_coarse, dim)
    # unique pairs per directed draw fall below 1 (reciprocal and repeated citations):
    # draw DRAW_SURPLUS x the wanted count, then drop the surplus at random
    mean_cites = DRAW_SURPLUS * n_edges / n_nodes
    src, dst = _cite(rng, true, coarse, fine, mean_cites)
    pairs = _undirected_unique(src, dst)
    if len(pairs) > n_edges:
        pairs = np.sort(rng.choice(pairs, size=n_edges, replace=False))
    return SyntheticGraph(vectors, coarse.astype(np.int32), fine, fine_parent,
                          pairs >> 32, pairs & np.int64((1 << 32) - 1))
