"""One huge document: peak resident memory and wall time of ``kgloom index`` (fake LLM).

Usage: python bench/bench_big_document.py [--mb 12] [--work-dir /tmp/kgloom-bench-big]
                                          [--save bench/results/big_document.json]

The document is generated, never committed: the bundled book (its Project Gutenberg
licence header and footer cut) repeated until it holds
``--mb`` million bytes, each copy with its characters renamed (names built from
syllables by a seeded ``random.Random(copy number)``, so every run generates the same
bytes), so the copies yield distinct entities as well as shared ones (Christmas,
London, the Ghost). The bundled book alone (one copy) is the baseline, indexed in the
same bench run: figures are reported as ratios to it (memory, and seconds per million
characters, which is 1.0 when the cost grows linearly with the text).

Each index is one ``kgloom index --fake-llm`` subprocess (:func:`bench.harness.build_index`)
with a fresh output folder and a fresh DAGSTER_HOME. Peak RSS is sampled every 0.2 s over
the process and its children (psutil) and cross-checked with
``getrusage(RUSAGE_CHILDREN).ru_maxrss``. A second run
with nothing changed checks that it is a no-op (0 LLM calls, no LanceDB version added).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import BOOK, build_index  # noqa: E402
from bench.stamp import save_result  # noqa: E402

# the book's recurring characters; each copy gets its own name for each of them
CHARACTERS = ["Scrooge", "Ebenezer", "Marley", "Jacob", "Cratchit", "Bob", "Fezziwig",
              "Tim", "Fred", "Belle", "Topper", "Martha", "Peter", "Joe", "Dick", "Wilkins",
              "Caroline", "Dilber", "Belinda"]
_ONSETS = ["B", "C", "D", "F", "G", "H", "J", "K", "L", "M", "N", "P", "R", "S", "T", "V",
           "W", "Br", "Cl", "Dr", "Gr", "Pr", "St", "Tr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
_CODAS = ["b", "d", "g", "l", "m", "n", "r", "s", "t", "ck", "ll", "nd", "rt", "ss"]


def renamed(copy: int) -> dict[str, str]:
    """The character names of copy ``copy`` (copy 0 keeps the book's)."""
    if copy == 0:
        return {c: c for c in CHARACTERS}
    rng = random.Random(copy)
    names: dict[str, str] = {}
    for c in CHARACTERS:
        syllables = rng.choice([2, 2, 3])
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                       for _ in range(syllables))
        names[c] = name[0] + name[1:].lower()
    return names


def big_text(n_bytes: int) -> tuple[str, int]:
    """The bundled book repeated (copies renamed) until it holds ``n_bytes`` UTF-8 bytes;
    returns (text, copies)."""
    from kgloom.ingest.documents import strip_boilerplate

    # the book's own licence header and footer go first: a Gutenberg END marker in the
    # middle of the document would make kgloom cut everything after it as a footer
    book, _ = strip_boilerplate(BOOK.read_text(encoding="utf-8").lstrip("\ufeff"))
    pattern = re.compile(r"\b(" + "|".join(CHARACTERS) + r")\b")
    parts, size, copy = [], 0, 0
    while size < n_bytes:
        names = renamed(copy)
        part = pattern.sub(lambda m, names=names: names[m.group(1)], book)
        parts.append(part)
        size += len(part.encode("utf-8"))
        copy += 1
    return "\n\n".join(parts), copy


_STEP_EVENT = re.compile(r"^(\S+ \S+),(\d+) .* - (\S+) - (STEP_START|STEP_SUCCESS|STEP_FAILURE) - ")


def peak_rss_by_step(event_log: Path, t0_epoch: float,
                     timeline: list[tuple[float, int]]) -> dict[str, float]:
    """{step: peak RSS in MB while it ran}, from the Dagster event log's step start and end
    times (``$DAGSTER_HOME/logs/kgloom.log``, local time) and the sampler's timeline
    ((seconds since ``t0_epoch``, bytes) pairs). Steps that ran twice keep their higher peak."""
    import datetime

    spans: dict[str, list[float]] = {}
    peaks: dict[str, float] = {}
    if not event_log.exists():
        return peaks
    for line in event_log.read_text(errors="replace").splitlines():
        m = _STEP_EVENT.match(line)
        if not m:
            continue
        t = datetime.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S").timestamp() + int(m[2]) / 1e3
        if m[4] == "STEP_START":
            spans[m[3]] = [t - t0_epoch]
        elif m[3] in spans:
            start = spans.pop(m[3])[0]
            inside = [r for s, r in timeline if start <= s <= t - t0_epoch]
            if inside:
                peaks[m[3]] = max(peaks.get(m[3], 0.0), round(max(inside) / 2**20, 1))
    return peaks


def lancedb_versions(out: Path) -> dict[str, int]:
    """{table: latest version} of the LanceDB folder of an index."""
    import lancedb

    db = lancedb.connect(str(out / "lancedb"))
    return {name: db.open_table(name).version for name in ("text_units", "entities",
                                                           "community_reports")}


def run_index(work: Path, log_name: str) -> dict:
    """Run ``kgloom index --fake-llm`` on ``work/input`` (:func:`bench.harness.build_index`,
    RSS sampled); return wall s, peak RSS, stages."""
    out = work / "output"
    run = build_index(work / "input", out, dagster_home=work / "dagster_home",
                      log=work / f"{log_name}.log", fake_llm=True, sample_rss=True)
    summary = json.loads((out / "index-summary.json").read_text())
    sampler = run.rss
    assert sampler is not None
    return {"wall_s": run.wall_seconds, "peak_rss_mb": round(sampler.peak / 2**20, 1),
            "llm_calls_this_run": run.summary["llm_calls_this_run"],
            "seconds_per_stage": summary["seconds_per_stage"], "rows": summary["rows"],
            "peak_rss_mb_by_step": peak_rss_by_step(
                work / "dagster_home" / "logs" / "kgloom.log", sampler.t0_epoch,
                sampler.timeline),
            "rss_timeline_mb": [(t, round(r / 2**20)) for t, r in sampler.timeline[::25]]}


def index_text(work: Path, text: str, no_change_run: bool) -> dict:
    """Index ``text`` as one document in a fresh ``work`` folder (twice with
    ``no_change_run``); return the figures."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "input").mkdir(parents=True)
    (work / "input" / "big.txt").write_text(text, encoding="utf-8")
    first = run_index(work, "first")
    first["bytes"], first["chars"] = len(text.encode("utf-8")), len(text)
    import polars as pl

    kept = pl.read_parquet(work / "output" / "documents.parquet")["text"].str.len_chars().sum()
    first["document_chars_indexed"] = int(kept)
    if kept < 0.99 * len(text):  # the figures would be those of a smaller document
        raise SystemExit(f"only {kept} of {len(text)} characters were indexed")
    if no_change_run:
        before = lancedb_versions(work / "output")
        again = run_index(work, "again")
        after = lancedb_versions(work / "output")
        first["no_change_run"] = {"wall_s": again["wall_s"],
                                  "llm_calls": again["llm_calls_this_run"],
                                  "lancedb_versions_before": before,
                                  "lancedb_versions_after": after}
    return first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=12.0, help="million bytes of text")
    ap.add_argument("--work-dir", default="/tmp/kgloom-bench-big")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "big_document.json"))
    ap.add_argument("--no-baseline", action="store_true", help="skip the one-book baseline")
    args = ap.parse_args()
    work = Path(args.work_dir)
    text, copies = big_text(int(args.mb * 1_000_000))
    results: dict = {"mb": args.mb, "copies_of_the_book": copies}
    if not args.no_baseline:
        results["baseline_book"] = index_text(work / "book", big_text(1)[0], False)
    big = index_text(work / "big", text, True)
    results["big_document"] = big
    base = results.get("baseline_book")
    if base:
        per_mchar = lambda r: r["wall_s"] / (r["chars"] / 1e6)  # noqa: E731
        results["ratios_to_baseline"] = {
            "peak_rss": round(big["peak_rss_mb"] / base["peak_rss_mb"], 2),
            "text_size": round(big["chars"] / base["chars"], 1),
            "seconds_per_million_chars": round(per_mchar(big) / per_mchar(base), 2)}
    results["ru_maxrss_children_mb"] = round(
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    brief = {k: v for k, v in results.items()}
    for k in ("baseline_book", "big_document"):
        if k in brief:
            brief[k] = {x: y for x, y in brief[k].items() if x != "rss_timeline_mb"}
    print(json.dumps(brief, indent=2))
    save_result(args.save, results, args)


if __name__ == "__main__":
    main()
