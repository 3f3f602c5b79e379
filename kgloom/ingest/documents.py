"""Read an input folder into the ``documents`` table; bad files become failures rows.

Supported: ``.txt`` and ``.md`` (one document per file), ``.jsonl`` (one document per
line; text in ``text``, optional ``title``), ``.csv`` (one document per row; same
columns). Text is decoded as UTF-8, or by its byte-order mark (UTF-16/32), or in the
legacy encoding detected with enough confidence (:mod:`kgloom.ingest.decoding`; the encoding
and confidence are recorded on each document, a file decoded with too little
confidence is a failures row naming the guess), Unicode-normalized (NFC), with
``\\r\\n`` turned into ``\\n`` and outer whitespace stripped; the document id is the
SHA-256 of that text, so an unchanged document keeps its id across runs and renames.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import sys
import unicodedata
from pathlib import Path

import polars as pl

from kgloom.core import layout, schemas
from kgloom.core.ids import content_id, file_sha256
from kgloom.core.inputs import input_path, scan_input_files
from kgloom.core.storage import failures_frame
from kgloom.ingest.decoding import MIN_CONFIDENCE, Decoded, decode_bytes

STAGE = layout.DOCUMENTS


def normalize_text(text: str) -> str:
    """Return ``text`` NFC-normalized, with ``\\n`` line ends and no outer whitespace."""
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n")).strip()


# Licence blocks around the text of an e-book: Project Gutenberg's "*** START OF THE
# PROJECT GUTENBERG EBOOK <title> ***" / "*** END OF ..." lines (also "THIS", older
# "***START OF", and the 1990s "*END*THE SMALL PRINT!" header end), per gutenberg.org's
# own description of its header and footer.
_BOILERPLATE_START = re.compile(
    r"^[ \t]*(?:\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK[^\n]*"
    r"|\*END\*THE SMALL PRINT![^\n]*)$", re.IGNORECASE | re.MULTILINE)
_BOILERPLATE_END = re.compile(
    r"^[ \t]*(?:\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK[^\n]*"
    r"|End of (?:the )?Project Gutenberg(?:'s)? [^\n]*)$", re.IGNORECASE | re.MULTILINE)

# the transcribers' credits paragraph that often opens the text after the START marker
_CREDITS = re.compile(r"\s*(?:Produced by|E-?text prepared by|Transcribed (?:from|by))"
                      r"(?:.+\n)*?(?:\s*\n|\Z)", re.IGNORECASE)


def strip_boilerplate(text: str) -> tuple[str, str | None]:
    """Cut a Project Gutenberg header and footer (licence, credits) from ``text``.

    The header ends at the line of the START marker (and the transcribers' "Produced
    by ..." paragraph right after it), the footer begins at the line of the END marker
    (see ``_BOILERPLATE_START``/``_BOILERPLATE_END``); marker lines go with them. A text
    without either marker is returned unchanged.

    Returns:
        (kept text, stripped of outer whitespace; a JSON record of the cut, e.g.
        ``{"marker": "project_gutenberg", "header_chars": 914, "footer_chars": 18490}``,
        or None when nothing was cut).
    """
    start = _BOILERPLATE_START.search(text)
    a = start.end() if start else 0
    end = _BOILERPLATE_END.search(text, a)
    b = end.start() if end else len(text)
    if not start and not end:
        return text, None
    credits = _CREDITS.match(text, a)  # "Produced by ... Proofreading Team" after START
    if start and credits:
        a = credits.end()
    kept = text[a:b].strip()
    if not kept:  # markers around nothing: keep the text rather than lose it
        return text, None
    return kept, json.dumps({"marker": "project_gutenberg", "header_chars": a,
                             "footer_chars": len(text) - b})


def _records(path: Path, raw: str) -> tuple[list[tuple[str, str, str | None]],
                                            list[tuple[str, str]]]:
    """Split one file's decoded content into records.

    Returns:
        ((title, text, raw_data json) per good record, (record label, reason) per bad
        record): one bad JSONL line or CSV row loses only itself, never the whole file.

    Raises:
        csv.Error: when the CSV cannot be parsed at all.
    """
    suffix = path.suffix.lower()
    if suffix in (".txt", ".md"):
        return [(path.stem, raw, None)], []
    rows: list[tuple[str, object]] = []
    bad: list[tuple[str, str]] = []
    if suffix == ".jsonl":
        for n, line in enumerate(raw.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((f"line {n}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    bad.append((f"line {n}", f"not JSON: {exc.msg}"))
    else:  # .csv
        rows, csv_bad = _csv_rows(raw)
        bad += csv_bad
    out = []
    for label, row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("text"), (str, type(None))) \
                or "text" not in row:
            bad.append((label, "record has no 'text' string field"))
            continue
        title = str(row.get("title") or f"{path.stem}#{label.split()[-1]}")
        out.append((title, str(row["text"] or ""), json.dumps(row, ensure_ascii=False)))
    return out, bad


# The csv module refuses a field over 131,072 characters by default; a file is already in
# memory whole, so one long cell (a document's text) costs nothing more: lift the limit
# (the C long's maximum, 2**31 - 1 where a long is 32-bit).
CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


def _csv_rows(raw: str) -> tuple[list[tuple[str, object]], list[tuple[str, str]]]:
    """Parse CSV text (header row first) into ``("row N", {column: value})`` records,
    ``N`` the record's number counting the header as 1 (blank lines not counted).

    A record the csv module cannot parse (e.g. a NUL byte, a stray quote in strict
    dialects) is returned as ``("row N", reason)`` in the second list and parsing goes on
    with the next record, so a bad row loses only itself. Fields may be up to
    :data:`CSV_FIELD_LIMIT` characters (the csv module's limit is lifted while parsing
    and restored after).

    Raises:
        csv.Error: when the header row itself cannot be parsed.
    """
    before = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        reader = csv.reader(io.StringIO(raw))
        header = next(reader, None)
        if header is None:
            return [], []
        rows: list[tuple[str, object]] = []
        bad: list[tuple[str, str]] = []
        n = 1
        while True:
            n += 1
            try:
                values = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                bad.append((f"row {n}", f"not CSV: {exc}"))
                continue
            if not values:  # a blank line: skipped and not counted, as csv.DictReader does
                n -= 1
                continue
            row: dict[str | None, object] = dict(zip(header, values))
            for col in header[len(values):]:
                row.setdefault(col, None)
            if len(values) > len(header):
                row[None] = values[len(header):]  # csv.DictReader's restkey
            rows.append((f"row {n}", row))
        return rows, bad
    finally:
        csv.field_size_limit(before)


def _undecodable_reason(decoded) -> str:
    """The failures-row reason for a file whose text encoding is not known well enough."""
    if decoded.encoding is None:
        return "undecodable file: no text encoding fits (binary data?)"
    return (f"undecodable file: text encoding not detected with confidence (best guess "
            f"{decoded.encoding}, confidence {decoded.confidence:.2f} < {MIN_CONFIDENCE}); "
            "convert it to UTF-8")


def read_documents(input_dir: str | Path, files: list[Path] | None = None,
                   cut_boilerplate: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read every supported file of ``input_dir`` into documents.

    Args:
        input_dir: the input folder; ``source`` paths are relative to it.
        files: only these files (e.g. one partition); default: all supported files.
        cut_boilerplate: cut Project Gutenberg headers and footers
            (:func:`strip_boilerplate`); the cut is recorded in ``boilerplate_cut``.

    Returns:
        (documents, failures): documents conform to ``schemas.DOCUMENTS_SCHEMA`` with
        ``text_unit_ids`` empty (chunking fills it), one row per distinct document id
        (a duplicate text is kept once, and the duplicate is a failures row); failures
        conform to ``schemas.FAILURES_SCHEMA`` with one row per unreadable file, file
        whose encoding is not detected with confidence, bad record, empty document or
        (reading the whole folder) symlink skipped by :func:`scan_input_files`.

    Raises:
        FileNotFoundError: when ``input_dir`` does not exist.
    """
    root = Path(input_dir)
    failures: list[dict] = []
    if files is None:
        paths, failures = scan_input_files(root)  # links leading outside: failures rows
    else:
        paths = sorted(files)
    docs: list[dict] = []
    seen: dict[str, str] = {}
    for path in paths:
        source = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        read = _file_records(path, source, failures)
        if read is None:
            continue
        records, decoded = read
        mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC).isoformat()
        for title, text, raw_data in records:
            text = normalize_text(text)
            cut = None
            if cut_boilerplate:
                text, cut = strip_boilerplate(text)
            if not text:
                failures.append({"stage": STAGE, "item_id": f"{source}:{title}",
                                 "reason": "empty document (no text after normalization)",
                                 "detail": ""})
                continue
            doc_id = content_id("document", text)
            if doc_id in seen:
                failures.append({"stage": STAGE, "item_id": f"{source}:{title}",
                                 "reason": "duplicate document: same text already read",
                                 "detail": f"kept {seen[doc_id]}"})
                continue
            seen[doc_id] = f"{source}:{title}"
            docs.append({"id": doc_id, "title": title, "text": text, "text_unit_ids": [],
                         "creation_date": mtime, "raw_data": raw_data, "source": source,
                         "encoding": decoded.encoding,
                         "encoding_confidence": decoded.confidence,
                         "boilerplate_cut": cut})
    return _documents_frame(docs), failures_frame(failures)


def _file_records(path: Path, source: str, failures: list[dict],
                  ) -> tuple[list[tuple[str, str, str | None]], Decoded] | None:
    """(records, decoded): the (title, text, raw_data) records of input file ``path``
    (:func:`_records`) and its decoding (:func:`decode_bytes`), or None when it gives no
    record. Appends to ``failures`` (item id ``source``, or ``source:label`` for a bad
    record) a row for a file that cannot be read or decoded with confidence, each bad
    record, and a file with no records (an empty .jsonl, a header-only .csv)."""
    try:
        decoded = decode_bytes(path.read_bytes())
        if decoded.text is None or not decoded.confident:
            failures.append({"stage": STAGE, "item_id": source,
                             "reason": _undecodable_reason(decoded), "detail": ""})
            return None
        records, bad = _records(path, decoded.text)
    except (OSError, csv.Error) as exc:
        failures.append({"stage": STAGE, "item_id": source,
                         "reason": f"unreadable file: {type(exc).__name__}",
                         "detail": str(exc)})
        return None
    for label, reason in bad:
        failures.append({"stage": STAGE, "item_id": f"{source}:{label}",
                         "reason": f"bad record: {reason}", "detail": ""})
    if not records and not bad:  # empty .jsonl / header-only .csv: never silence
        failures.append({"stage": STAGE, "item_id": source,
                         "reason": "empty file: no records", "detail": ""})
        return None
    return records, decoded


def _documents_frame(docs: list[dict]) -> pl.DataFrame:
    """Document rows (every ``DOCUMENTS_SCHEMA`` column but ``human_readable_id``) as a
    ``DOCUMENTS_SCHEMA`` frame sorted by source and title, numbered 0..n-1 in that
    order."""
    frame = pl.DataFrame(docs, schema={k: v for k, v in schemas.DOCUMENTS_SCHEMA.items()
                                       if k != "human_readable_id"})
    frame = frame.sort("source", "title").with_row_index("human_readable_id").with_columns(
        pl.col("human_readable_id").cast(pl.Int64))
    return schemas.conform(frame, schemas.DOCUMENTS_SCHEMA)


def read_partition_documents(input_dir: str | Path, key: str, cut_boilerplate: bool = True
                             ) -> tuple[pl.DataFrame, pl.DataFrame, str | None]:
    """Read the documents of partition ``key``'s input file (``cut_boilerplate``: see
    :func:`kgloom.ingest.documents.read_documents`).

    Returns:
        (documents, failures, sha256): as :func:`kgloom.ingest.documents.read_documents`, plus
        the file's hex SHA-256. A missing file gives no documents, one failures row
        ("input file is gone") and sha256 None: the partition should be deleted, which
        the sensor and ``kgloom index`` do.

    Raises:
        PartitionKeyError: when ``key`` does not name a file inside ``input_dir``
            (:func:`input_path`), before anything is read.
    """
    path = input_path(input_dir, key)
    if not path.is_file():
        return (schemas.empty(schemas.DOCUMENTS_SCHEMA),
                failures_frame([{"stage": STAGE, "item_id": key,
                                 "reason": "input file is gone: delete its partition",
                                 "detail": str(path)}]), None)
    docs, failures = read_documents(input_dir, files=[path], cut_boilerplate=cut_boilerplate)
    return docs, failures, file_sha256(str(path))
