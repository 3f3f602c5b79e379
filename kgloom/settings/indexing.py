"""Index settings shared by the domain modules (no Dagster here).

:class:`IndexSettings` is the one list of index settings: the ``index`` section of the
settings model (:class:`kgloom.settings.Settings`, loaded by
:func:`kgloom.settings.load_settings` from ``kgloom.yaml`` / ``KGLOOM_*`` / ``--set``),
and, through ``kgloom.resources.IndexSettingsConfig`` (a subclass), the typed
``index_settings`` field of the Dagster resource ``IndexConfigResource``. Every default
below is the value the README's main command uses.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

# GraphRAG's defaults are organization, person, geo, event (config/defaults.py); kgloom
# says "location" for "geo" and adds what narrative corpora such as the sample book need.
DEFAULT_ENTITY_TYPES: tuple[str, ...] = ("PERSON", "ORGANIZATION", "LOCATION", "EVENT")
SUMMARY_METHODS: tuple[str, ...] = ("extractive", "llm")  # see kgloom.graph.summaries
EXTRACTION_TEXTS: tuple[str, ...] = ("named_sentences", "full")  # see kgloom.extraction.extract
METHODS: tuple[str, ...] = ("standard", "fast")  # see kgloom.extraction.cooccurrence
LLM_REPORTS: tuple[str, ...] = ("eager", "lazy")  # see kgloom.reports.community_reports
LLM_REPORT_FORMS: tuple[str, ...] = ("choices", "free")  # see kgloom.report_writer
# community detection: igraph's C community_leiden (the default, measured 255x faster at
# 10^5 edges by bench/bench_scale.py --part leiden) or the leidenalg package
COMMUNITY_BACKENDS: tuple[str, ...] = ("igraph", "leidenalg")
# every pass of kgloom.graph.resolution (kgloom.names.normalize.RESOLUTION_METHODS; a test
# checks they agree)
DEFAULT_RESOLUTION_METHODS: tuple[str, ...] = ("normalized", "name_extension", "name_context",
                                               "embedding")


class IndexSettings(BaseModel):
    """Knobs of one index build (a frozen pydantic model: checked when built, hashable;
    ``repr`` lists every field as a dataclass's does, which the graph fingerprint hashes).

    Attributes:
        method: ``standard`` (the LLM types the candidate names and states their
            relationships; LLM reports for communities of 3 or more members) or ``fast``
            (no model for the index: every candidate name is an entity typed by its cues,
            OTHER otherwise; relationships are co-occurrences within a sentence, weaker
            within a text unit; descriptions are evidence sentences; every community gets
            a rule report; the embedding resolution pass, whose safeguard is the LLM
            check, is skipped, and extractive summaries take the first descriptions, so the
            entities stage loads no embedder). Same tables, same schemas: see
            :mod:`kgloom.extraction.cooccurrence` and ``docs/fast-method.md``.
        cooccurrence_window: with ``fast``, a name is paired with at most this many
            following names of its sentence (GloVe's symmetric context window of 10,
            Pennington et al. 2014, counted in names), so a long list of names costs
            pairs linear in its length.
        cooccurrence_max_pairs: with ``fast``, the strongest pairs kept per text unit;
            the rest are dropped and counted (``cooccurrence_pairs_dropped``).
        record_edges: fields of a JSONL/CSV record whose values become relationships of
            the record's title (both methods), each ``field:RELATION`` or
            ``field:RELATION:TYPE`` (e.g. ``authors:AUTHORED_BY:PERSON,tags:TAGGED``): a
            string or a list of strings per field; each value becomes an entity (TYPE,
            else its cue, else OTHER) joined to the record's title entity
            (:mod:`kgloom.extraction.records`). Empty: none.
        chunk_size: text-unit length in tokens of the chunking tokenizer (600).
        chunk_overlap: tokens shared by consecutive text units (100).
        entity_types: allowed entity types (upper case); the extraction schema enforces them.
        max_relationships_per_unit: ``maxItems`` bound on relationships per reply (3:
            the bundled 135M model filled every slot it was given, and of its 4th and
            5th relationships on the book 17 of 148 were not a self-loop or a repeat;
            gold pair recall was the same with 3 as with 5; raise it for larger models).
        llm_descriptions: the LLM writes entity and relationship descriptions; off, they
            are the text's evidence sentences (better with tiny models, fewer tokens).
        resolution_methods: entity-resolution passes to run (see ``kgloom.graph.resolution``);
            drop one to turn its merges off.
        embedding_merge_threshold: cosine similarity of "title: description" embeddings
            (all-MiniLM-L6-v2) at or above which two entities are merge candidates.
        verify_merges_with_llm: ask the LLM yes/no about each embedding candidate pair.
        max_gleanings: extra "find what you missed" rounds per text unit (0 = off).
        extract_claims: one more LLM call per text unit with entities, for claims
            (GraphRAG's covariates; off by default there too); they join report contexts.
        co_mention_edges: add co-mention edges when a unit yields entities but no
            relationships, and for entities a unit's relationships leave out, so the
            graph stays connected.
        co_mention_strength: weight of one co-mention (an extracted relationship mention
            weighs ``extraction.EXTRACTED_STRENGTH`` = 2.0).
        summary_min_descriptions: summarize an entity's descriptions only when it has at
            least this many distinct ones; fewer are joined as they are.
        summary_method: ``extractive`` (the most central descriptions by TF-IDF, no
            model call; see :mod:`kgloom.graph.summaries` for why it is the default) or
            ``llm`` (one LLM summary per item; for larger models).
        summary_max_sentences / summary_max_chars: bounds of an extractive summary
            (descriptions kept, characters; 300 is also the LLM summary's bound).
        summary_max_input_tokens: token budget of the descriptions fed to one summary call.
        summary_max_candidates: descriptions an extractive summary ranks per item, spread
            evenly over its list (a hub entity of a long document has thousands; the
            centroid of 64 spread ones stands for them at a fixed cost per item).
        max_cluster_size: Leiden recurses into any community larger than this (GraphRAG: 10).
        community_backend: ``igraph`` (igraph's C ``community_leiden``, the default) or
            ``leidenalg`` (the leidenalg package's ``find_partition``, seeded, to
            convergence; slower): who runs each Leiden pass of
            :func:`kgloom.graph.communities.hierarchical_leiden`. Both give a seeded,
            valid hierarchical partition; they need not give the same one.
        seed: seed of Leiden and of the LLM sampler.
        report_max_input_tokens: token budget of one community report's context.
        report_llm_min_members / report_llm_min_relationships: a community with fewer
            members or fewer internal relationships gets a rule-based report from its
            members and relationship sentences (``reports.rule_report``), no LLM call;
            0 and 0: every community gets an LLM report. The defaults (3 members, 0
            relationships) keep an LLM report for every community of 3 or more members,
            however few relationships it has inside.
        report_llm_min_source_tokens: a community whose internal relationships were
            all extracted from text units of fewer tokens in all gets a rule-based report
            too: an LLM report (~270 tokens with the default model) would be longer than
            the passages it summarizes (a 2WikiMultihopQA passage has ~50); 0: no such
            rule. Text units of the default 600-token chunking never fall under it alone.
        report_brief_max_members: a community with at most this many members gets a
            brief LLM report (``reports.BRIEF_REPORT_SCHEMA``: one finding, a summary of
            at most 200 characters) from the same prompt; 0: every LLM report is full
            size. A many-member community has more to report than a three-member one.
        reuse_reports: keep the report of a community whose members and internal
            relationships are unchanged since the last run (``reports.report_key``), so an
            incremental run rewrites only the communities it changed.
        llm_reports: when the communities that get an LLM report (the rules above) get
            it: ``eager`` (the reports stage writes it) or ``lazy`` (LazyGraphRAG's idea:
            the stage makes no model call and publishes their rule reports with
            ``generated_by`` ``lazy``; global search with a model writes a community's
            LLM report, with the same prompt, context and checks, the first time it
            reaches the community, and keeps it in ``lazy_reports.sqlite`` beside the
            query cache for the next query; ``docs/lazy-reports.md``). With
            ``method=fast`` no community gets an LLM report either way.
        llm_report_form: what the model writes of an LLM report. ``choices`` (default):
            it chooses, from options taken from the community's own data, the title, the
            sentence that says how the members relate, up to three relationships for
            findings and a rating; the report is then written in the rule report's whole
            sentences around those choices (``report_writer.report_options``), so it
            names nothing its data lacks and passes the grounding check by construction.
            ``free``: GraphRAG's form, the model writes every field (for larger models;
            the bundled 135M model's free reports were rejected by the grounding check
            in 96 of 100 cases on 600 pool passages).
        report_llm_eager_max: with ``eager``, at most this many communities get their LLM
            report from the reports stage: those nearest the root first (lowest level,
            then most members), where global search starts; the others that need one are
            published as ``lazy`` (above) and written by the first global search that
            reaches them. 0: no cap. Communities needing a report grow with the corpus
            (32 on the bundled book, 155 on the 354-passage 2Wiki slice, 469 on 600 pool
            passages), and with the default model a report cost 8.4 s on 2 cores and was
            rejected by the grounding check (published as the rule report) in 96 of 100
            cases on those 600 passages (``bench/results/eval_pool_standard.json``, in git
            history at 2e25abc), so
            the cap bounds the stage at about 3.5 minutes at any corpus size (on the
            book: 25 communities eager, 18 distinct calls, 7 lazy).
        report_llm_give_up_after: with ``eager``, once this many LLM report replies in a
            row were rejected by the grounding check (``check_report``), the reports stage
            writes no more: the remaining eager communities are published as ``lazy``
            (global search writes them when it reaches them, under the same check). 0: never
            give up. Why: with the default 135M model every one of the 25 replies on 600
            pool passages (2026-12-03, 226 s) and 15 of 16 on the book were rejected, so the
            stage spent its minutes on rule reports; a model whose reports pass keeps
            writing them. 3, not 5: on 2026-12-04 the five replies before giving up were
            again all rejected (a phrase repeated tens of times): 51 of the 312 s of 600
            pool passages and 21 of the 2,621 s of the whole pool
            (``bench/results/eval_pool_s13_600_2000.json`` at c75a7f1,
            ``eval_pool_full_s13.json`` at de05eb2, in git history); each call saved is 4-10
            s on 2 cores. Counted in call order, so with ``llm_concurrency`` > 1 the calls
            already in flight still finish.
        cut_boilerplate: cut Project Gutenberg licence headers and footers in the
            documents stage (recorded in the ``boilerplate_cut`` column).
        candidate_source: where the names the model types come from
            (``kgloom.names.candidates``): ``auto`` (per script of each text unit: capitalized
            names for cased scripts, a part-of-speech segmenter for Chinese and
            Japanese, corpus n-grams for other caseless scripts), ``proper_names``,
            ``segmenter``, ``ngram``, or ``open`` (the model proposes names, kept when
            found verbatim in the unit; one more LLM call per unit, better with large
            models).
        extraction_text: what the extraction call is shown of a text unit:
            ``named_sentences`` (its sentences that name a candidate, gaps marked ``…``:
            ``kgloom.extraction.extract.named_sentences``) or ``full`` (the whole unit).
            Descriptions, evidence and type cues always come from the whole unit.
        type_cued_names: ask the model the type of every candidate; off (the default),
            a name whose type a cue decides (``kgloom.extraction.type_cues.type_cue``, which
            overrules the model's type anyway) is left out of the reply's ``entities``.
        title_candidates: a record's own title (the ``title`` field of a JSONL/CSV
            record, without a trailing parenthesis) is a candidate name of the record's
            first text unit, shown to the model as the text's title.
        extraction_pack_tokens: short text units share an extraction call: consecutive
            units of at most this many chunking tokens go into one call while their sum
            stays within it (``kgloom.extraction.extract.pack_units``, ``extract_pack``:
            each unit keeps its own names and the relationships between them); 0 (the
            default) asks one call per unit.
    """

    method: str = "standard"
    cooccurrence_window: int = 10
    cooccurrence_max_pairs: int = 200
    record_edges: tuple[str, ...] = ()
    chunk_size: int = 600
    chunk_overlap: int = 100
    entity_types: tuple[str, ...] = DEFAULT_ENTITY_TYPES
    max_relationships_per_unit: int = 3
    max_gleanings: int = 0
    extract_claims: bool = False
    llm_descriptions: bool = False
    resolution_methods: tuple[str, ...] = DEFAULT_RESOLUTION_METHODS
    embedding_merge_threshold: float = 0.92
    verify_merges_with_llm: bool = True
    co_mention_edges: bool = True
    co_mention_strength: float = 1.0
    summary_min_descriptions: int = 3
    summary_method: str = "extractive"
    summary_max_sentences: int = 2
    summary_max_chars: int = 300
    summary_max_input_tokens: int = 600
    summary_max_candidates: int = 64
    max_cluster_size: int = 10
    community_backend: str = "igraph"
    seed: int = 0xDEADBEEF
    report_max_input_tokens: int = 800
    report_llm_min_members: int = 3
    report_llm_min_relationships: int = 0
    report_llm_min_source_tokens: int = 200
    report_brief_max_members: int = 5
    reuse_reports: bool = True
    llm_reports: str = "eager"
    llm_report_form: str = "choices"
    report_llm_eager_max: int = 25
    report_llm_give_up_after: int = 3
    cut_boilerplate: bool = True
    candidate_source: str = "auto"
    title_candidates: bool = True
    extraction_text: str = "named_sentences"
    type_cued_names: bool = False
    extraction_pack_tokens: int = 0

    @property
    def uses_model(self) -> bool:
        """Whether indexing with these settings calls an LLM (False for ``method=fast``):
        the one place assets and stages ask before opening or using a model."""
        return self.method != "fast"

    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("entity_types", mode="after")
    @classmethod
    def _upper_types(cls, value: typing.Sequence[str]) -> typing.Sequence[str]:
        # the schema's enum and the prompts use upper-case types, whatever the input
        upper = [t.upper() for t in value]
        return upper if isinstance(value, list) else tuple(upper)  # lists: Dagster config

    @model_validator(mode="after")
    def _check(self) -> IndexSettings:
        """Refuse out-of-range or contradictory values before any work, concern by
        concern, in this order: the method, the LLM reports, chunking and extraction,
        summaries and communities, entity types and resolution, the counts and the merge
        threshold.

        Raises:
            ValueError: naming the setting (pydantic reports it as a ValidationError).
        """
        self._check_method()
        self._check_llm_reports()
        self._check_extraction()
        self._check_summaries_and_communities()
        self._check_resolution()
        self._check_counts()
        return self

    def _check_method(self) -> None:
        """Raises ValueError: an unknown ``method``, or ``method=fast`` with a setting that
        asks the model (candidate_source open, summary_method llm, extract_claims,
        max_gleanings > 0, llm_descriptions), naming them."""
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.method == "fast":
            # each of these asks the model; fast must not load one (verify_merges_with_llm,
            # on by default, is ignored with the embedding pass it guards)
            needs_model = {"candidate_source": self.candidate_source == "open",
                           "summary_method": self.summary_method == "llm",
                           "extract_claims": self.extract_claims,
                           "max_gleanings": self.max_gleanings > 0,
                           "llm_descriptions": self.llm_descriptions}
            bad = sorted(k for k, v in needs_model.items() if v)
            if bad:
                raise ValueError(f"method=fast uses no model, but {bad} ask(s) for one; "
                                 "use method=standard or reset them")

    def _check_llm_reports(self) -> None:
        """Raises ValueError: an unknown ``llm_report_form`` or ``llm_reports``."""
        if self.llm_report_form not in LLM_REPORT_FORMS:
            raise ValueError(f"llm_report_form must be one of {LLM_REPORT_FORMS}, "
                             f"got {self.llm_report_form!r}")
        if self.llm_reports not in LLM_REPORTS:
            raise ValueError(f"llm_reports must be one of {LLM_REPORTS}, "
                             f"got {self.llm_reports!r}")

    def _check_extraction(self) -> None:
        """Raises ValueError: cooccurrence_window or cooccurrence_max_pairs < 1, a bad
        ``record_edges`` item (:func:`parse_record_edges`), chunk_size <= 0,
        chunk_overlap outside [0, chunk_size), an unknown ``candidate_source`` or
        ``extraction_text``."""
        for name in ("cooccurrence_window", "cooccurrence_max_pairs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        # the checks that import a kernel module run only on a value other than the
        # default (valid), so loading default settings (kgloom query) imports no polars
        if self.record_edges:
            parse_record_edges(self.record_edges)  # field:RELATION[:TYPE] items
        if self.chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0, got {self.chunk_size}")
        if not 0 <= self.chunk_overlap < self.chunk_size:
            raise ValueError(
                f"chunk_overlap must be in [0, chunk_size), got {self.chunk_overlap}")
        if self.candidate_source != "auto":
            from kgloom.names.candidates import SOURCES

            if self.candidate_source not in SOURCES:
                raise ValueError(f"candidate_source must be one of {SOURCES}, "
                                 f"got {self.candidate_source!r}")
        if self.extraction_text not in EXTRACTION_TEXTS:
            raise ValueError(f"extraction_text must be one of {EXTRACTION_TEXTS}, "
                             f"got {self.extraction_text!r}")

    def _check_summaries_and_communities(self) -> None:
        """Raises ValueError: an unknown ``summary_method``, summary_max_sentences,
        summary_max_chars or summary_max_candidates < 1, an unknown
        ``community_backend``, max_cluster_size < 2."""
        if self.summary_method not in SUMMARY_METHODS:
            raise ValueError(f"summary_method must be one of {SUMMARY_METHODS}, "
                             f"got {self.summary_method!r}")
        if min(self.summary_max_sentences, self.summary_max_chars,
               self.summary_max_candidates) < 1:
            raise ValueError("summary_max_sentences, summary_max_chars and "
                             "summary_max_candidates must be >= 1")
        if self.community_backend not in COMMUNITY_BACKENDS:
            raise ValueError(f"community_backend must be one of {COMMUNITY_BACKENDS}, "
                             f"got {self.community_backend!r}")
        if self.max_cluster_size < 2:
            raise ValueError(f"max_cluster_size must be >= 2, got {self.max_cluster_size}")

    def _check_resolution(self) -> None:
        """Raises ValueError: no entity type (or a blank one), an unknown
        ``resolution_methods`` entry (:data:`kgloom.names.normalize.RESOLUTION_METHODS`)."""
        # checked here, before any work, not when the stage that reads them runs
        if not self.entity_types or not all(t.strip() for t in self.entity_types):
            raise ValueError(f"entity_types must name at least one type, got "
                             f"{list(self.entity_types)}")
        if set(self.resolution_methods) - set(DEFAULT_RESOLUTION_METHODS):
            from kgloom.names.normalize import RESOLUTION_METHODS

            unknown = sorted(set(self.resolution_methods) - RESOLUTION_METHODS)
            if unknown:
                raise ValueError(f"unknown resolution_methods {unknown}; known: "
                                 f"{sorted(RESOLUTION_METHODS)}")

    def _check_counts(self) -> None:
        """Raises ValueError: a count that must be >= 1 (max_relationships_per_unit,
        summary_min_descriptions, the input token limits) or >= 0 (max_gleanings, the
        report thresholds, extraction_pack_tokens) out of range, or an
        embedding_merge_threshold outside the cosine range [-1, 1]."""
        for name in ("max_relationships_per_unit", "summary_min_descriptions",
                     "summary_max_input_tokens", "report_max_input_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_gleanings", "report_llm_min_members",
                     "report_llm_min_relationships", "report_llm_min_source_tokens",
                     "report_brief_max_members", "report_llm_eager_max",
                     "report_llm_give_up_after", "extraction_pack_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not -1.0 <= self.embedding_merge_threshold <= 1.0:
            raise ValueError(f"embedding_merge_threshold is a cosine, in [-1, 1], got "
                             f"{self.embedding_merge_threshold}")


def settings_fields() -> dict[str, tuple[Any, Any]]:
    """Every :class:`IndexSettings` field as ``name -> (type, default)``, with tuples
    given as lists (``tuple[str, ...]`` -> ``list[str]``), the form config systems (the
    Dagster resource, YAML files) hold them in."""
    out: dict[str, tuple[Any, Any]] = {}
    for name, info in IndexSettings.model_fields.items():
        tp, default = info.annotation, info.default
        if typing.get_origin(tp) is tuple:
            tp, default = list[typing.get_args(tp)[0]], list(default)
        out[name] = (tp, default)
    return out


def validation_message(exc: pydantic.ValidationError, prefix: str = "") -> str:
    """One line per error of ``exc``: ``setting <prefix><field>: <message> (got <input>)``,
    so the key at fault is named."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        got = f" (got {err['input']!r})" if where and not isinstance(err["input"], dict) else ""
        lines.append(f"setting {prefix}{where}: {msg}{got}" if where else f"{prefix}{msg}")
    return "; ".join(lines)


def split_list(raw: Any) -> Any:
    """A comma-separated string (from ``--set`` or an environment variable) as a list of
    its stripped, non-empty parts; any other value unchanged."""
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    return raw


def settings_from_mapping(values: dict[str, Any], base: IndexSettings | None = None
                          ) -> IndexSettings:
    """``base`` (default: the defaults) with the fields in ``values`` replaced; values are
    checked and converted by their field's type (pydantic's lax mode: ``"5"`` -> 5,
    ``"true"`` -> True; a comma-separated string or a list for tuple fields).

    Raises:
        ValueError: naming an unknown key, or a value its field's type cannot take, or
            one :class:`IndexSettings` refuses.
    """
    fields = IndexSettings.model_fields
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}; known: {sorted(fields)}")
    merged = (base or IndexSettings()).model_dump()
    for key, raw in values.items():
        is_seq = typing.get_origin(fields[key].annotation) is tuple
        merged[key] = split_list(raw) if is_seq else raw
    try:
        return IndexSettings.model_validate(merged)
    except pydantic.ValidationError as exc:
        raise ValueError(validation_message(exc)) from None


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` (the CLI's ``--set``) as a dict of raw strings.

    Raises:
        ValueError: for an item without ``=`` or with an empty key.
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set wants key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def load_settings_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML (or JSON) settings file, unwrapped from a top-level
    ``settings:`` key when it has one: sections (see :func:`kgloom.settings.load_settings`,
    which reads files through this) or, the older form, :class:`IndexSettings` field
    names to values. Values are checked when applied.

    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: when it is not YAML or does not hold a mapping.
    """
    import yaml

    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("settings"), dict):
        data = data["settings"]
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a mapping of setting names to values")
    return data


def parse_record_edges(specs: tuple[str, ...] | list[str]) -> dict[str, tuple[str, str]]:
    """The setting ``record_edges`` (see :class:`IndexSettings`; used by
    :mod:`kgloom.extraction.records`): ``["authors:AUTHORED_BY:PERSON", "tags:TAGGED"]``
    as ``{field: (RELATION, TYPE)}`` (TYPE upper case, "" when not given).

    Raises:
        ValueError: for an item without a field or a relation.
    """
    out: dict[str, tuple[str, str]] = {}
    for spec in specs:
        parts = [p.strip() for p in spec.split(":")]
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            raise ValueError(f"record_edges wants field:RELATION[:TYPE] items, got {spec!r}")
        out[parts[0]] = (parts[1], parts[2].upper() if len(parts) == 3 else "")
    return out
