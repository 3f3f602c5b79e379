"""Assets: documents and text_units (no LLM)."""


import dagster as dg

from kgloom import schemas
from kgloom.assets._common import Timer, preview
from kgloom.stats import stages_dir, write_stage_stats
from kgloom.chunking import split_text_units
from kgloom.documents import read_documents
from kgloom.resources import IndexConfigResource
from kgloom.storage import write_table
from kgloom.tokenizer import default_tokenizer


@dg.asset(group_name="ingest", kinds={"polars", "parquet"})
def documents(context: dg.AssetExecutionContext, index: IndexConfigResource) -> dg.MaterializeResult:
    """Every supported input file read into documents.parquet; bad files become failures."""
    with Timer() as t:
        docs, failures = read_documents(index.input_dir)
    write_table(docs, stages_dir(index.out), schemas.DOCUMENTS)
    write_table(failures, stages_dir(index.out), f"{schemas.FAILURES}.documents")
    for row in failures.iter_rows(named=True):
        context.log.warning(f"{row['item_id']}: {row['reason']}")
    write_stage_stats(index.out, "documents", t.seconds, documents=docs.height,
                      failures=failures.height)
    return dg.MaterializeResult(metadata={
        "rows": docs.height, "failures": failures.height, "input_dir": index.input_dir,
        "preview": preview(docs, ["human_readable_id", "title", "source", "creation_date"])})


@dg.asset(group_name="ingest", deps=[documents], kinds={"polars", "parquet"})
def text_units(context: dg.AssetExecutionContext, index: IndexConfigResource) -> dg.MaterializeResult:
    """Documents split into text units of chunk_size tokens with chunk_overlap."""
    from kgloom.storage import read_table

    s = index.settings()
    tok = default_tokenizer()
    with Timer() as t:
        docs = read_table(stages_dir(index.out), schemas.DOCUMENTS)
        units, docs = split_text_units(docs, tok, s.chunk_size, s.chunk_overlap)
    write_table(units, stages_dir(index.out), schemas.TEXT_UNITS)
    write_table(docs, stages_dir(index.out), schemas.DOCUMENTS)
    write_stage_stats(index.out, "text_units", t.seconds, text_units=units.height)
    return dg.MaterializeResult(metadata={
        "rows": units.height, "tokenizer": tok.name, "chunk_size_tokens": s.chunk_size,
        "chunk_overlap_tokens": s.chunk_overlap,
        "mean_tokens": float(units["n_tokens"].mean() or 0.0)})
