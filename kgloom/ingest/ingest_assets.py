"""Assets: documents and text_units (no LLM), one partition per input file."""

from typing import cast

import dagster as dg

from kgloom import schemas
from kgloom.corpus.partitions import mark_stage, read_partition_documents
from kgloom.ingest.chunking import split_text_units
from kgloom.ingest.documents import STAGE as DOCUMENTS_STAGE
from kgloom.ingest.tokenizer import default_tokenizer
from kgloom.pipelines.input_files import input_files_partitions
from kgloom.pipelines.wiring import Timer, preview
from kgloom.resources import IndexConfigResource
from kgloom.stats import write_stage_stats
from kgloom.storage import read_table, write_table


@dg.asset(group_name="ingest", partitions_def=input_files_partitions, kinds={"polars", "parquet"})
def documents(context: dg.AssetExecutionContext,
              index: IndexConfigResource) -> dg.MaterializeResult:
    """The documents of one input file (a JSONL/CSV file holds many); bad files and
    records become failures rows. Rewrites only this partition's folder."""
    key = context.partition_key
    clock = Timer.started()
    pdir = index.partition_folder(key)  # refuses a key leading outside the input folder
    docs, failures, sha = read_partition_documents(index.input_dir, key,
                                                   index.settings().cut_boilerplate)
    write_table(docs, pdir, schemas.DOCUMENTS)
    write_table(failures, pdir, f"{schemas.FAILURES}.{DOCUMENTS_STAGE}")
    for row in failures.iter_rows(named=True):
        context.log.warning(f"{row['item_id']}: {row['reason']}")
    cut = int(docs["boilerplate_cut"].is_not_null().sum())
    write_stage_stats(index.out, DOCUMENTS_STAGE, clock.elapsed, folder=pdir,
                      documents=docs.height, failures=failures.height, boilerplate_cut=cut)
    mark_stage(index.out, key, DOCUMENTS_STAGE, sha256=sha)
    return dg.MaterializeResult(metadata={
        "rows": docs.height, "failures": failures.height, "input_file": key,
        "documents_with_boilerplate_cut": cut,
        "sha256": sha or "(missing)",
        "preview": preview(docs, ["human_readable_id", "title", "source", "creation_date"])})


@dg.asset(group_name="ingest", partitions_def=input_files_partitions, deps=[documents],
          kinds={"polars", "parquet"})
def text_units(context: dg.AssetExecutionContext,
               index: IndexConfigResource) -> dg.MaterializeResult:
    """One input file's documents split into text units of chunk_size tokens with
    chunk_overlap (the partition level: no graph columns, numbered later over the
    corpus)."""
    clock = Timer.started()
    s = index.settings()
    tok = default_tokenizer()
    pdir = index.partition_folder(context.partition_key)
    units = split_text_units(read_table(pdir, schemas.DOCUMENTS), tok, s.chunk_size,
                             s.chunk_overlap)
    write_table(units, pdir, schemas.TEXT_UNITS)
    write_stage_stats(index.out, "text_units", clock.elapsed, folder=pdir,
                      text_units=units.height)
    mark_stage(index.out, context.partition_key, "text_units")
    return dg.MaterializeResult(metadata={
        "rows": units.height, "tokenizer": tok.name, "chunk_size_tokens": s.chunk_size,
        "chunk_overlap_tokens": s.chunk_overlap,
        # polars annotates mean() for every dtype; of an integer column it is float | None
        "mean_tokens": float(cast(float | None, units["n_tokens"].mean()) or 0.0)})
