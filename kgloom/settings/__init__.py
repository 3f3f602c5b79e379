"""The one settings model of kgloom and the one function that loads it (no Dagster here).

Sections (``docs/configuration.md`` lists every key):

- ``paths``: the input and output folders;
- ``index``: :class:`kgloom.settings.indexing.IndexSettings`, the knobs of an index build;
- ``llm``: :class:`LLMSettings`, the model (a GGUF file run in-process, OpenAI-compatible
  model servers, or the fake model) that indexing *and* search use;
- ``embedder``: :class:`EmbedderSettings`, the sentence-transformers folder;
- ``retrieval``: :class:`RetrievalSettings`, the retrieval modes' options and scoring knobs
  (``RetrievalConfig``);
- ``search``: :class:`SearchSettings`, the search knobs (``kgloom.query.searcher.SearchConfig``).

:func:`load_settings` reads them, later layers winning: the defaults, one YAML file
(``--config FILE``, else env ``KGLOOM_CONFIG``, else the older ``KGLOOM_SETTINGS``, else
``./kgloom.yaml`` when it exists), the environment (the named variables of
:data:`ENV_VARS`, then ``KGLOOM_<SECTION>__<KEY>`` for any key), then overrides
(``--set section.key=value`` and the CLI's own flags). The CLI, the Dagster code location
(:mod:`kgloom.resources`), ``kgloom query`` and ``kgloom serve`` all call it.

This module imports only pydantic and the standard library (PyYAML when a file is read),
so ``kgloom query`` loads it before it checks its options, without numpy or Dagster.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from kgloom.settings.indexing import (
    IndexSettings,
    load_settings_file,
    split_list,
    validation_message,
)

if typing.TYPE_CHECKING:
    from kgloom.llm import CachedLLM

DEFAULT_CONFIG_FILE = "kgloom.yaml"  # read from the working folder when no file is named
CONFIG_ENV, LEGACY_SETTINGS_ENV = "KGLOOM_CONFIG", "KGLOOM_SETTINGS"


class SettingsError(ValueError):
    """A settings file, variable or override kgloom cannot use; the message names the key
    (``section.key``) and where it came from."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PathsSettings(_Section):
    """Where the index reads and writes (env ``KGLOOM_INPUT_DIR`` / ``KGLOOM_OUTPUT_DIR``)."""

    input_dir: str = Field(default="data/input", description="folder of documents")
    output_dir: str = Field(default="data/output", description="where the index is written")


class LLMSettings(_Section):
    """The LLM. ``model_path`` empty means the bundled SmolLM2-135M-Instruct (its SHA-256 is
    verified); ``fake`` uses :class:`kgloom.llm.fake.FakeBackend` (tests and demos).
    ``urls`` (several allowed) selects OpenAI-compatible model servers instead
    (:class:`kgloom.llm.http.OpenAIChatBackend`); the GGUF fields are then unused.
    ``kgloom.resources.LLMResource`` is this model as a Dagster resource; ``kgloom query``
    and ``kgloom serve`` open it with :meth:`open_cached`, so index and search use the
    same model.

    ``llm_concurrency`` calls of a stage go out at once, spread over the servers;
    in-process they queue on the one model (its lock). ``llm_slots`` is how many
    sequences the servers decode at once in total (0: one per server, 1 in-process).
    Ranges are checked when the model is verified or opened (:meth:`check`).
    """

    model_path: str = ""
    expected_sha256: str = ""
    # prompt (<= ~1.7k model tokens for a 600-token unit or a 1.2k-token report context)
    # plus the longest reply the bounded schemas allow (see llm.reply_token_bound)
    n_ctx: int = 4096
    n_threads: int = 0  # 0: chosen per call from the machine's load (kgloom.llm.cpu)
    n_gpu_layers: int = 0  # -1 offloads every layer where a GPU exists
    n_batch: int = 512  # llama.cpp's logical batch of prompt evaluation (tokens)
    n_ubatch: int = 512  # its physical batch (tokens)
    flash_attn: bool = False  # llama.cpp's fused attention kernel (changes some replies)
    # n_batch / n_ubatch / flash_attn: measured by bench/bench_llama_probe.py (README)
    grammar_first: bool = True  # greedy grammar sampling checks the best token first
    # choice-only replies (extraction) evaluate their forced text in batches (llm.choices)
    choice_decoding: bool = True
    # how the GGUF's weights are loaded: auto (the bundled Q4_1 model as BF16 or F16, about
    # 1.5x faster on the CPU; any other file as it is), file, f16, bf16, q8_0, q4_0
    # (kgloom.llm.model_files.resolve_weights; converted once into ~/.cache/kgloom/models)
    weights: str = "auto"
    temperature: float = 0.0
    fake: bool = False
    urls: list[str] = []  # OpenAI-compatible servers; empty: the GGUF in-process
    model: str = ""  # the served model to use; "": the one each server lists
    api_key: str = ""
    request_timeout_s: float = 300.0  # per request; a slow server is retried elsewhere
    schema_format: str = "auto"  # auto | json_schema (vLLM, llama-server) | json_object
    llm_concurrency: int = 1  # calls in flight per stage
    llm_slots: int = 0  # sequences the servers decode at once in total; 0: one per URL
    # the index's LLM cache file; "": <output_dir>/llm_cache.sqlite. SQLite's WAL needs a
    # local disk: on several machines sharing data/output over NFS, point this at local storage
    cache_path: str = ""

    def check(self) -> None:
        """Raises:
        ValueError: naming ``llm_concurrency`` (< 1), ``llm_slots`` or ``n_threads`` (< 0).
        """
        if self.llm_concurrency <= 0:
            raise ValueError(f"llm_concurrency must be >= 1, got {self.llm_concurrency}")
        if self.llm_slots < 0:
            raise ValueError(f"llm_slots must be >= 0, got {self.llm_slots}")
        if self.n_threads < 0:
            raise ValueError(f"n_threads must be >= 0 (0: by load), got {self.n_threads}")

    def server_urls(self) -> list[str]:
        """The configured server URLs (validated), [] for the in-process or fake model.

        Raises:
            ValueError: naming a malformed URL.
        """
        from kgloom.llm.http import parse_urls

        return [] if self.fake else parse_urls(self.urls)

    def open_cached(self, cache_path: str | Path, log: Any = None) -> CachedLLM:
        """The model these settings name, behind the cache file ``cache_path``: the servers
        (``urls``), else the fake model, else the GGUF in-process (loaded here, about 1 s
        for the bundled one). ``log`` (e.g. a Dagster ``context.log``) receives the
        warnings about failing servers.

        Raises:
            kgloom.llm.ModelFileError: a missing, unreadable or wrong model file.
            kgloom.llm.http.LLMServerError: a server unreachable or not serving the model.
            ValueError: see :meth:`check` and :meth:`server_urls`.
        """
        from kgloom.llm import CachedLLM, LLMCache, open_llm

        self.check()
        urls = self.server_urls()
        if urls:
            from kgloom.llm.http import OpenAIChatBackend

            http = OpenAIChatBackend(urls, timeout_s=self.request_timeout_s,
                                     temperature=self.temperature, api_key=self.api_key,
                                     model=self.model, schema_format=self.schema_format,
                                     log=log)
            return CachedLLM(http, LLMCache(cache_path), http.model_id,
                             concurrency=self.llm_concurrency)
        return open_llm(cache_path, self.model_path or None, fake=self.fake, n_ctx=self.n_ctx,
                        n_threads=self.n_threads or None, n_gpu_layers=self.n_gpu_layers,
                        temperature=self.temperature,
                        expected_sha256=self.expected_sha256 or None,
                        concurrency=self.llm_concurrency,
                        # env KGLOOM_FAKE_LLM_DELAY_S slows each fake call (crash tests, demos)
                        fake_delay_s=float(os.environ.get("KGLOOM_FAKE_LLM_DELAY_S", "0") or 0),
                        n_batch=self.n_batch, n_ubatch=self.n_ubatch, flash_attn=self.flash_attn,
                        grammar_first=self.grammar_first,
                        choice_decoding=self.choice_decoding, weights=self.weights)


class EmbedderSettings(_Section):
    """``model_path``: a sentence-transformers model folder; empty means the bundled
    all-MiniLM-L6-v2 (384 dims, 256 tokens). Queries must use the index's embedder."""

    model_path: str = ""


# GraphRAG's local search shares, in packing order (its local search defaults)
LOCAL_SHARES: dict[str, float] = {"entities": 0.15, "relationships": 0.2, "reports": 0.15,
                                  "text_units": 0.5}
DEFAULT_THRESHOLD = 1  # dynamic global search: a report is relevant at rating >= this


class RetrievalConfig(_Section):
    """The scoring knobs of the graph modes (defaults chosen by bench/eval_qa.py on
    2WikiMultihopQA; docs/measurements.md has the figures). Frozen; change a copy with
    ``config.model_copy(update={...})``.

    Attributes:
        hop_decay: activation kept per hop away from a seed entity (multihop, fused).
        similarity_weight: weight of the question-unit cosine in multihop/fused unit
            scores (the graph part has weight 1).
        one_hop_weight: weight of the entity bonus in one_hop unit scores.
        one_hop_oversample: one_hop expands the ``one_hop_oversample x top_k`` nearest units.
        neighbor_decay: one_hop: a neighbour entity counts this much of a mentioned one.
        ann_link_min_similarity: a question span links the nearest entity (LanceDB
            ``entities`` vectors of "title: description") at cosine >= this.
        ann_link_question_k: entities linked by whole-question ANN (0 = off).
        rrf_k: reciprocal-rank fusion constant (Cormack et al. 2009 use 60).
        hybrid_pool: hybrid fuses the best ``hybrid_pool`` units of each ranking.
        hybrid_weights: RRF weights of the (vector, ppr) rankings.
        hit_seeds: the entities of this many nearest text units also seed multihop, ppr
            and hybrid (0 = only the question's linked entities).
        hit_seed_weight: their seed score is this times the unit's similarity.
        bridge_hits: bridge expands the entities of this many nearest text units.
        bridge_keep: bridge ranks this many nearest units first, then the bridged ones.
        bridge_relevance_power: bridge weighs an entity by (question-entity cosine,
            clipped at 0) to this power (0 = every entity of a hit counts alike).
        bridge_link_weight: the question's linked entities count as named by a hit of
            this similarity (bridge).
        bridge_specificity_power: bridge weighs an entity by its specificity, 1 / (text
            units mentioning it), to this power (0 = a nationality named in every
            biography bridges like a person named in two units).
        bridge_vector_weight: after the kept nearest units, a further vector hit competes
            with the bridged units at its cosine with the question times this times the
            largest share of the text units one of the question's linked entities is
            mentioned in (0 = every bridged unit comes first). A question about a
            narrative's main character (in 90 % of the book's units) bridges through
            every neighbour of a hub, so the units nearest the question come back; a
            film named in two of 6,119 passages leaves bridging as it was. 0.5: the
            smallest value at which the book's 30 development questions
            (bench/data/book-questions.jsonl) stop gaining (R@5 60.0 -> 70.0; vector
            73.3), while the 2Wiki slice and the HotpotQA sample do not move up to 2
            (bench/eval_sets.py, bench/results/eval_sets.json).
        bridge_match_power: bridge weighs a unit it reaches within the hit's own
            document (or from the question's linked entities), other than the bridging
            entity's own titled one, by its first-hop score over the best unit's, to this
            power (0 = every unit that names the entity counts alike). A unit of another
            document is a hop and is not weighed so. 1 was chosen on the development sets
            (bench/eval_sets.py, bench/results/eval_sets-match.json): the book's bridge
            R@2 / R@5 70.0 / 80.0 -> 73.3 / 83.3 at 0 -> 1 (no change from 1 to 4), the
            Wikipedia sets unchanged (each passage a document of its own).
        lexical_weight: bridge and hybrid rank their first hop (bridge's nearest units
            and the hits it follows, hybrid's vector list) by the question's cosine with
            a unit plus this times the unit's BM25 score over the best unit's
            (:mod:`kgloom.query.lexical`; 0 = cosine alone, as the ``vector`` mode).
            The bundled embedder misses units a word of the question finds (a name, a
            rare noun): on the book's 30 development questions BM25 alone finds the
            answer in the top 5 for 25, the embedder for 22. 0.5 was chosen on the
            development sets (bench/eval_sets.py): bridge R@2 / R@5 on the book 50.0 /
            70.0 -> 66.7 / 80.0, on the HotpotQA sample 68.0 / 87.0 -> 69.5 / 89.0, on
            the 2Wiki slice 69.4 / 91.9 -> 68.1 / 91.2; the sweep with bridge's later
            rules is in bench/results/eval_sets-lexical.json (docs/query.md).
        adjacent_unit_weight: bridge scores a unit in its first hop at least this times
            the first-hop score of the unit just before or after it in its document (0 =
            off; a one-unit document, a Wikipedia passage, is never raised): a long
            document's scene runs across units, and the unit next to the best match
            often holds the rest of the answer. 0.9 was chosen on the book's 30
            development questions (bench/eval_sets.py, bench/results/
            eval_sets-adjacent.json): bridge R@2 / R@5 73.3 / 83.3 -> 73.3 / 90.0 (0.8:
            70.0 / 86.7, 0.95: 70.0 / 90.0); the Wikipedia sets do not move. Hybrid
            went 60.0 / 76.7 -> 50.0 / 80.0 on the book with it, so hybrid does not
            use it.
        entity_affinity: weigh an entity's contribution to a unit by how much the unit is
            about it: the cosine of the entity's vector ("title: description") and the
            unit's vector, clipped at 0 (multihop, fused, ppr, hybrid); off, every
            mention counts 1.
        seed_diagnostics: fused / two_step also report ``seed_overlap`` (and fused
            ``baseline_seed_overlap``) in ``info``: mean pairwise Jaccard of the seeds'
            neighbourhoods, O(top_k^2) set operations that answer nothing; a latency
            benchmark turns them off and computes them outside the timed call.
        low_relevance_similarity: a result says that nothing in the index is relevant
            (``info["low_relevance"]`` and ``info["notice"]``, every retrieval and search
            mode) when the question's cosine with its nearest text unit is under this
            (-1: never); a corpus-wide question (a thematic cue) is not judged
            (:mod:`kgloom.query.retrieval.relevance`). Calibrated by
            bench/eval_relevance.py (bench/results/relevance.json) with the bundled
            embedder (all-MiniLM-L6-v2) on development questions only (bench/data): 180
            questions asked of their own corpus (the book, the 2Wiki slice, the HotpotQA
            sample) score 0.338 and up (the lowest, "Who is Fred?" on the book's
            600-token units); 0.31 is that, rounded down, less 0.02. It flags 46 of 50
            2Wiki and 99 of 100 HotpotQA questions asked of the book, but only 14 of 30
            book and 34 of 100 HotpotQA questions asked of the 2Wiki slice (Wikipedia
            passages are near any short factual question). Another embedder needs its own
            value.
        fused_first_hop: the fused retrieve's BFS over files starts from the chosen
            seeds' neighbourhoods, which its rerank read from the handle's adjacency:
            no edge-file query at depth 1, one recursion round fewer beyond (the same
            rows). False: it reads every hop from graph-edges.parquet, as the two-call
            baseline's traversal call does (the retrieval bench's ``files_reread``
            handle). The in-memory BFS is the same either way.
    """

    hop_decay: float = 0.25
    similarity_weight: float = 0.5
    one_hop_weight: float = 0.5
    one_hop_oversample: int = 3
    neighbor_decay: float = 0.0
    ann_link_min_similarity: float = 0.75
    ann_link_question_k: int = 0
    rrf_k: float = 60.0
    hybrid_pool: int = 20
    hybrid_weights: tuple[float, float] = (1.0, 1.0)
    entity_affinity: bool = True
    hit_seeds: int = 0
    hit_seed_weight: float = 0.5
    bridge_hits: int = 5
    bridge_keep: int = 1
    bridge_relevance_power: float = 1.0
    bridge_link_weight: float = 0.5
    bridge_specificity_power: float = 0.25
    bridge_vector_weight: float = 0.5
    bridge_match_power: float = 1.0
    lexical_weight: float = Field(default=0.5, ge=0.0)
    adjacent_unit_weight: float = Field(default=0.9, ge=0.0, le=1.0)
    seed_diagnostics: bool = True
    fused_first_hop: bool = True
    low_relevance_similarity: float = Field(default=0.31, ge=-1.0, le=1.0)


class SearchConfig(_Section):
    """Search knobs (tokens are the counter's: the model's own when a GGUF is loaded).
    Frozen; change a copy with ``config.model_copy(update={...})``.

    Attributes:
        budget: tokens of a local or direct context.
        shares: local context shares per section, in packing order (GraphRAG's local
            search defaults; see :mod:`kgloom.query.context_builder.context`).
        retrieval_mode: the Retriever mode that ranks local search's text units.
        top_k: text units asked of the retrieval (local and direct).
        max_neighbors: neighbour entities considered around the seeds.
        seed_units: when no entity links, the entities of this many best units seed.
        threshold: dynamic selection: a report is relevant at rating >= this (0-5).
        rate_shortlist: dynamic selection rates at most this many communities at each
            step (roots, children of the relevant ones, a fallback level): the ones
            whose report title and summary are nearest to the question by the index's
            embedder (cosine); the others are pruned unrated. 0: rate every one
            (GraphRAG's behaviour: one call per root).
        rate_max_tokens: dynamic selection rates each report on one line, ``[C5] title:
            summary`` (the full content when it has no summary), cut to this many
            tokens (per report, title included).
        rate_budget: tokens of the report lines of one rating call (several reports are
            rated per call: kgloom's change to GraphRAG's one report per call); 650
            holds 8 full lines of 80 tokens.
        rate_batch: reports per rating call at most.
        keep_parent: dynamic selection keeps a relevant community beside its relevant
            children (GraphRAG's ``keep_parent``, off by default there too).
        map_fallback: when dynamic selection's reports give no key point above 0, map
            the relevant communities their children replaced (broader reports), once.
        map_budget: tokens of one map batch of reports.
        map_report_max_tokens: a report is cut to this many tokens in a map batch.
        reduce_budget: tokens of the key points the global answer reads.
        answer_max_chars: the longest answer the schema allows (characters).
        default_level: static global search's level when none is given (falls back to
            the deepest level when the index has fewer).
        seed: the LLM sampler's seed.
        lazy_reports: on an index built with ``llm_reports: lazy``, global search with a
            model writes the LLM report of each community awaiting one the first time
            it reaches it, and keeps it for the next query
            (:mod:`kgloom.query.context_builder.lazy_reports`); off: it reads the rule
            reports as published (no report call).
        lazy_reports_per_search: write at most this many lazy reports (model calls) in
            one global search, the first reached first (static: by report rank); the
            others keep their rule report until a later search reaches them. 0: no
            limit (a static search then writes every lazy report of its level).
    """

    budget: int = 2000
    shares: tuple[tuple[str, float], ...] = tuple(LOCAL_SHARES.items())
    retrieval_mode: str = "bridge"
    top_k: int = 10
    max_neighbors: int = 30
    seed_units: int = 3
    threshold: int = DEFAULT_THRESHOLD
    rate_shortlist: int = 8
    rate_max_tokens: int = 80
    rate_budget: int = 650
    rate_batch: int = 8
    keep_parent: bool = False
    map_fallback: bool = True
    map_budget: int = 1500
    map_report_max_tokens: int = 500
    reduce_budget: int = 1500
    answer_max_chars: int = 200
    default_level: int = 1
    seed: int = 0xDEADBEEF
    lazy_reports: bool = True
    lazy_reports_per_search: int = Field(default=0, ge=0)


# the retrieval options each query may also give (kgloom.query.modes.RETRIEVAL_DEFAULTS and
# `kgloom query`'s --graph-backend); the other RetrievalSettings fields are RetrievalConfig's
QUERY_OPTIONS: tuple[str, ...] = ("top_k", "depth", "lam", "oversample", "damping",
                                  "graph_backend")


class RetrievalSettings(RetrievalConfig):
    """Retrieval: the per-query options' defaults (``top_k`` .. ``graph_backend``, what
    ``kgloom query`` uses when its flag is not given; ranges checked by
    ``kgloom.query.modes.check_options``) and the scoring knobs it inherits from
    :class:`RetrievalConfig`."""

    top_k: int = Field(default=5, description="text units returned")
    depth: int = Field(default=1, description="BFS hops (multihop, fused, two_step)")
    lam: float = Field(default=1.0, description="fused: neighbourhood-overlap penalty")
    oversample: int = Field(default=5, description="fused: entity candidates per seed")
    damping: float = Field(default=0.5,
                           description="ppr / hybrid: probability of following an edge")
    graph_backend: str = Field(default="duckdb", description="duckdb | memory")

    def options(self) -> dict[str, Any]:
        """The per-query options (:data:`QUERY_OPTIONS`) as ``name -> value``."""
        return {name: getattr(self, name) for name in QUERY_OPTIONS}

    def scoring(self) -> dict[str, Any]:
        """The ``RetrievalConfig`` knobs as keyword arguments
        (``RetrievalConfig(**settings.retrieval.scoring())``)."""
        return {k: v for k, v in self.model_dump().items() if k not in QUERY_OPTIONS}


class SearchSettings(SearchConfig):
    """The ``search`` section: the knobs of :class:`SearchConfig` (local, direct and global
    search)."""

    def config_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``SearchConfig(**settings.search.config_kwargs())``."""
        return self.model_dump()


class Settings(_Section):
    """Every setting of kgloom, by section (module docstring). Frozen; build one with
    :func:`load_settings`."""

    paths: PathsSettings = PathsSettings()
    index: IndexSettings = IndexSettings()
    llm: LLMSettings = LLMSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    search: SearchSettings = SearchSettings()


SECTIONS: dict[str, type[BaseModel]] = {
    name: typing.cast(type[BaseModel], info.annotation)
    for name, info in Settings.model_fields.items()}

# the environment variables kgloom has always read, by the setting each sets; any setting
# can also be given as KGLOOM_<SECTION>__<KEY> (e.g. KGLOOM_RETRIEVAL__HOP_DECAY=0.3)
ENV_VARS: dict[str, str] = {
    "KGLOOM_INPUT_DIR": "paths.input_dir",
    "KGLOOM_OUTPUT_DIR": "paths.output_dir",
    "KGLOOM_MODEL_PATH": "llm.model_path",
    "KGLOOM_N_GPU_LAYERS": "llm.n_gpu_layers",
    "KGLOOM_N_THREADS": "llm.n_threads",
    "KGLOOM_FAKE_LLM": "llm.fake",
    "KGLOOM_LLM_URL": "llm.urls",
    "KGLOOM_LLM_MODEL": "llm.model",
    "KGLOOM_LLM_API_KEY": "llm.api_key",
    "KGLOOM_LLM_CONCURRENCY": "llm.llm_concurrency",
    "KGLOOM_LLM_SLOTS": "llm.llm_slots",
    "KGLOOM_LLM_TIMEOUT_S": "llm.request_timeout_s",
    "KGLOOM_LLM_SCHEMA_FORMAT": "llm.schema_format",
    "KGLOOM_LLM_CACHE": "llm.cache_path",
    "KGLOOM_EMBEDDER_PATH": "embedder.model_path",
}


def _key(dotted: str, source: str) -> tuple[str, str]:
    """``section.key`` (a bare ``key`` is an index setting, as ``--set chunk_size=400``
    always was) split and checked.

    Raises:
        SettingsError: naming the unknown section or key, with the known ones.
    """
    section, sep, key = dotted.partition(".")
    if not sep:
        section, key = "index", dotted
    if section not in SECTIONS:
        raise SettingsError(f"unknown settings section {section!r} in {dotted!r} ({source}); "
                            f"known: {', '.join(SECTIONS)}")
    fields = SECTIONS[section].model_fields
    if key not in fields:
        raise SettingsError(f"unknown setting {section}.{key} ({source}); known in "
                            f"{section}: {', '.join(sorted(fields))}")
    return section, key


def _is_sequence(section: str, key: str) -> bool:
    origin = typing.get_origin(SECTIONS[section].model_fields[key].annotation)
    return origin in (list, tuple)


def config_file_path(config_file: str | Path | None = None,
                     env: Mapping[str, str] | None = None) -> Path | None:
    """The settings file to read: ``config_file``, else env ``KGLOOM_CONFIG``, else env
    ``KGLOOM_SETTINGS`` (its older name), else ``./kgloom.yaml`` when it exists, else
    None."""
    env = os.environ if env is None else env
    named = config_file or env.get(CONFIG_ENV) or env.get(LEGACY_SETTINGS_ENV)
    if named:
        return Path(named)
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def _file_layer(path: Path) -> dict[str, dict[str, Any]]:
    """The sections of a settings file. A file whose top-level keys are not section
    names is the older form, a mapping of index settings (optionally under
    ``settings:``): it is the ``index`` section.

    Raises:
        FileNotFoundError: the file does not exist.
        SettingsError: not YAML, not a mapping, a section that is not a mapping, or an
            unknown key (named).
    """
    try:
        data = load_settings_file(path)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if not set(data) & set(SECTIONS):
        # the older form, index settings only; a mapping under an unknown name is more
        # likely a misspelt section than an index setting
        sections = [k for k, v in data.items() if isinstance(v, dict)]
        if sections:
            raise SettingsError(f"unknown settings section {sections[0]!r} in {path}; "
                                f"known: {', '.join(SECTIONS)}")
        data = {"index": data}
    out: dict[str, dict[str, Any]] = {}
    for section, values in data.items():
        if section not in SECTIONS:
            raise SettingsError(f"unknown settings section {section!r} in {path}; known: "
                                f"{', '.join(SECTIONS)}")
        if not isinstance(values, dict):
            raise SettingsError(f"section {section!r} of {path} must be a mapping of "
                                "setting names to values")
        for key in values:
            _key(f"{section}.{key}", str(path))
        out[section] = dict(values)
    return out


def _env_layer(env: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The settings the environment gives (empty values count as unset), and for each
    ``section.key`` the variable it came from.

    Raises:
        SettingsError: for ``KGLOOM_<SECTION>__<KEY>`` naming an unknown setting.
    """
    out: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    items = [(var, dotted) for var, dotted in ENV_VARS.items()]
    for var in sorted(env):
        head, sep, key = var.partition("__")
        if sep and head.startswith("KGLOOM_"):
            items.append((var, f"{head.removeprefix('KGLOOM_').lower()}.{key.lower()}"))
    for var, dotted in items:
        raw = env.get(var, "")
        if raw == "":
            continue
        section, key = _key(dotted, f"env {var}")
        out.setdefault(section, {})[key] = split_list(raw) if _is_sequence(section, key) else raw
        origin[f"{section}.{key}"] = var
    return out, origin


def _env_message(exc: pydantic.ValidationError, origin: dict[str, str]) -> str | None:
    """A message naming the environment variable whose value was refused, in the words
    kgloom always used (``KGLOOM_N_THREADS must be an integer, got 'four'``); None when
    no error comes from a variable."""
    for err in exc.errors():
        dotted = ".".join(str(p) for p in err["loc"][:2])
        if dotted in origin:
            section, key = dotted.split(".")
            tp = SECTIONS[section].model_fields[key].annotation
            kind = {int: "an integer", float: "a number", bool: "true or false"}.get(
                typing.cast(type, tp), "valid")
            return (f"{origin[dotted]} must be {kind}, got {err['input']!r} "
                    f"(setting {dotted}: {err['msg']})")
    return None


def load_settings(config_file: str | Path | None = None,
                  overrides: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None) -> Settings:
    """The settings: defaults, then the settings file, then the environment, then
    ``overrides``, each later one winning key by key.

    Args:
        config_file: a YAML file (default: :func:`config_file_path`). Top-level keys are
            sections (``paths``, ``index``, ``llm``, ``embedder``, ``retrieval``,
            ``search``); a file of bare index settings (the older ``--settings`` form,
            optionally under ``settings:``) is the ``index`` section.
        overrides: ``section.key`` (or a bare index setting) -> value: the CLI's ``--set``
            pairs and flags. None values are skipped. Strings are converted by the
            field's type (pydantic's lax mode: ``"5"`` -> 5, ``"true"`` -> True); a
            comma-separated string gives a list.
        env: the environment (default ``os.environ``): the variables of :data:`ENV_VARS`
            and ``KGLOOM_<SECTION>__<KEY>``.

    Returns:
        a frozen :class:`Settings`.

    Raises:
        FileNotFoundError: the named settings file does not exist.
        SettingsError (a ValueError): an unknown section or key, or a value its field
            refuses; the message names the key (and the variable or file it came from).
    """
    env = os.environ if env is None else env
    layers: list[dict[str, dict[str, Any]]] = []
    path = config_file_path(config_file, env)
    if path is not None:
        layers.append(_file_layer(path))
    env_values, origin = _env_layer(env)
    layers.append(env_values)
    over: dict[str, dict[str, Any]] = {}
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, key = _key(dotted, "override")
        over.setdefault(section, {})[key] = (split_list(value) if _is_sequence(section, key)
                                             else value)
        origin.pop(f"{section}.{key}", None)  # no longer the variable's value
    layers.append(over)
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            merged.setdefault(section, {}).update(values)
    try:
        return Settings.model_validate(merged)
    except pydantic.ValidationError as exc:
        raise SettingsError(_env_message(exc, origin) or validation_message(exc)) from None


def parse_set(pairs: list[str]) -> dict[str, str]:
    """The CLI's ``--set`` items, ``section.key=value`` (or ``key=value`` for an index
    setting), as ``{dotted key: raw string}`` for :func:`load_settings`.

    Raises:
        SettingsError: an item without ``=`` or with an empty key.
    """
    from kgloom.settings.indexing import parse_assignments

    try:
        return parse_assignments(pairs)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
