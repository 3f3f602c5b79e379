"""How many made-up names a search answer's check lets through, and how many correct answers
it flags, no model (seconds); print and save JSON.

Usage: python bench/eval_answer_check.py [--before REF] [--passages N]
                                         [--save bench/results/answer_check.json]

The check is the one every search method runs on its answer
(:func:`kgloom.query.structured_search.answer_check.check_answer`; its
``ungrounded_names`` is the flag), called directly on (answer, context) pairs:

- ``book``: ``--passages`` text units of the bundled book (the pipeline's own 600-token
  units, evenly spaced), each shown as a search context line (``[T1] (from ...) ...``).
  Correct answers are built from the unit: the first two one-word and two multi-word
  aliases of the precision gold (bench/data/christmas-carol-entities.json) the unit
  writes, in the templates of :data:`TEMPLATES` (bare, with a period, opening a sentence
  before a verb or before "was", inside one, possessive) and in upper case; the unit's
  own sentences (20-200 characters); its first run of four lower-case words; its first
  hyphenated word written with a space; its numbers. Made-up answers are the names of
  :data:`MADE_UP` that share no word with the unit, in the same templates, and the
  unit's first one-word alias followed by an invented surname (``mixed``). Answers
  opening with an ordinary word (:data:`OPENERS`: "According to ...", "Unknown.") are
  correct when the unit holds the word, else ``ordinary_absent``.
- ``own``: the invented paragraphs of bench/data/answer-check/own.json with answers
  written for each (correct, ordinary words the paragraph lacks, made up; each with a
  kind).

Figures per corpus: ``made_up_passed`` (made-up answers with no flag: lower is better),
``correct_flagged`` (correct answers flagged: lower is better), ``ordinary_absent_flagged``
(answers opening with an ordinary word the context lacks, such as "Unknown."), each
broken down by kind and template, with the cases that went wrong.
Search gives the check its index's text units as the evidence of ordinary words (a
capitalized word the context lacks but the corpus writes mostly in lower case): the
book's cases get all the book's units, the own corpus's its paragraphs;
``<corpus>_context_only`` scores the same cases with no corpus (the context alone
decides). ``--before REF`` measures the same cases with the check of commit REF (a ``git archive``
of it, :func:`bench.harness.export_ref`, imported in a child process) and embeds its
figures as ``before``. Stamped with commit, date and load average (bench/stamp.py).
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stamp import commit, save_result  # noqa: E402

BOOK = ROOT / "data" / "input"
BOOK_TITLE = "a-christmas-carol"
GOLD = ROOT / "bench" / "data" / "christmas-carol-entities.json"
OWN = ROOT / "bench" / "data" / "answer-check" / "own.json"
# the forms an answer puts a name in (each applied to made-up and to correct names)
TEMPLATES = (("bare", "{}"), ("bare_period", "{}."),
             ("sentence_start", "{} came to the door."),
             ("sentence_start_copula", "{} was the one who came."),
             ("in_sentence", "It was {}, as the passage says."),
             ("possessive", "At {}'s house."))
# invented or real names the book does not hold, by kind (a name is used on a unit only
# when the unit shares none of its words)
MADE_UP = (("Okafor", "one_word"), ("Weber", "one_word"), ("Lindqvist", "one_word"),
           ("Marta Kowalski", "two_words"), ("Jonas Weber", "two_words"),
           ("Calais-Lille", "hyphenated"), ("Saint-Aubin", "hyphenated"),
           ("Okoro-Lange", "hyphenated"), ("Lyon", "real_place"),
           ("Rotterdam", "real_place"), ("Zaragoza", "real_place"),
           ("Nordlicht Robotics", "two_words"))
INVENTED_SURNAME = "Lindqvist"
# answers that open with an ordinary word: correct when the unit holds that word (in any
# case), else ``ordinary_absent`` (no evidence in the context tells it from a name)
OPENERS = ("According to the passage, it was {}.", "Probably {}.", "Unknown.", "Nobody.")
MAX_EXAMPLES = 25
_WORDS = re.compile(r"\w+")


def _norm_words(text: str) -> set[str]:
    return {w.casefold() for w in _WORDS.findall(text)}


def book_units() -> list[str]:
    """The book's text units, as the pipeline splits it."""
    from kgloom.embedding.tokenizer import default_tokenizer
    from kgloom.ingest.chunking import split_text_units
    from kgloom.ingest.documents import read_documents

    docs, _ = read_documents(BOOK)
    return split_text_units(docs, default_tokenizer())["text"].to_list()


def book_cases(texts: list[str], passages: int) -> list[dict[str, str]]:
    """The book's cases (see the module doc) from its text units ``texts``: dicts of
    ``context``, ``answer``, ``truth`` (correct | ordinary_absent | made_up), ``kind`` and
    ``form``."""
    from kgloom.query.context_builder.context import verbalize_text_unit

    step = max(1, len(texts) // passages)
    aliases = sorted({a for e in json.loads(GOLD.read_text())["entities"]
                      for a in e["aliases"]})
    cases: list[dict[str, str]] = []
    for text in texts[::step][:passages]:
        flat = " ".join(text.split())
        ctx = verbalize_text_unit("T1", text, BOOK_TITLE)
        ctx_words = _norm_words(ctx)

        def add(answer: str, truth: str, kind: str, form: str,
                ctx: str = ctx) -> None:
            cases.append({"context": ctx, "answer": answer, "truth": truth, "kind": kind,
                          "form": form})

        present = sorted((flat.find(a), a) for a in aliases
                         if re.search(rf"(?<!\w){re.escape(a)}(?!\w)", flat))
        one = [a for _, a in present if " " not in a][:2]
        multi = [a for _, a in present if " " in a][:2]
        for names, kind in ((one, "single_name"), (multi, "multi_word_name")):
            for name in names:
                for form, tpl in TEMPLATES:
                    add(tpl.format(name), "correct", kind, form)
                add(name.upper(), "correct", "case_variant", "bare")
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", flat)
                     if 20 <= len(s) <= 200 and s[:1].isupper()]
        for s in sentences[:3]:
            add(s, "correct", "sentence", "bare")
        low = re.search(r"\b[a-z]+ [a-z]+ [a-z]+ [a-z]+\b", flat)
        if low:
            add(low.group(0), "correct", "lowercase_phrase", "bare")
        hyph = re.search(r"\b([A-Za-z]+)-([A-Za-z]+)\b", flat)
        if hyph:
            add(f"{hyph.group(1).capitalize()} {hyph.group(2)}.", "correct",
                "hyphen_variant", "bare_period")
        for num in re.findall(r"\b\d[\d,]*\b", flat)[:2]:
            add(num, "correct", "number", "bare")
        for name in one[:1]:
            for tpl in OPENERS:
                opener = tpl.split()[0].strip(".,").casefold()
                add(tpl.format(name), "correct" if opener in ctx_words else "ordinary_absent",
                    "ordinary_opener", "opener")
        for name, kind in MADE_UP:
            if _norm_words(name) & ctx_words:
                continue
            for form, tpl in TEMPLATES:
                add(tpl.format(name), "made_up", kind, form)
        for name in one[:1]:
            if INVENTED_SURNAME.casefold() not in ctx_words:
                for form, tpl in TEMPLATES:
                    add(tpl.format(f"{name} {INVENTED_SURNAME}"), "made_up", "mixed", form)
    return cases


def own_texts() -> list[str]:
    """The own corpus's paragraphs (bench/data/answer-check/own.json)."""
    return [p["text"] for p in json.loads(OWN.read_text(encoding="utf-8"))["paragraphs"]]


def own_cases() -> list[dict[str, str]]:
    """The own corpus's cases (bench/data/answer-check/own.json): the same dicts, truth
    correct | ordinary_absent | made_up, form ``as_written``."""
    from kgloom.query.context_builder.context import verbalize_text_unit

    data = json.loads(OWN.read_text(encoding="utf-8"))
    cases: list[dict[str, str]] = []
    for p in data["paragraphs"]:
        lines = [f"[E{i}] {e}" for i, e in enumerate(p["entities"], 1)]
        ctx = "\n".join([*lines, verbalize_text_unit("T1", p["text"], p["id"])])
        for truth in ("correct", "ordinary_absent", "made_up"):
            cases += [{"context": ctx, "answer": a, "truth": truth, "kind": k,
                       "form": "as_written", "paragraph": p["id"]} for a, k in p[truth]]
    return cases


def takes_corpus() -> bool:
    """Does the importable :func:`check_answer` take the corpus (the index's text units)
    as search gives it (commits before it took none)?"""
    from kgloom.query.structured_search.search_base import check_answer

    return "corpus" in inspect.signature(check_answer).parameters


def run_check(cases: list[dict[str, str]], corpus: list[str] | None) -> list[list[str]]:
    """The names :func:`check_answer` flags for each case (in order), given ``corpus``
    as search gives it its index's text units (None: a check that takes none)."""
    from kgloom.query.structured_search.search_base import check_answer

    extra = {} if corpus is None else {"corpus": corpus}
    return [check_answer(c["answer"], [], [], c["context"], **extra).ungrounded_names
            for c in cases]


def score(cases: list[dict[str, str]], flags: list[list[str]]) -> dict[str, Any]:
    """Counts per truth (flagged or not), by kind and by template, and the wrong cases."""
    out: dict[str, Any] = {}
    for truth, wrong_if_flagged in (("correct", True), ("ordinary_absent", True),
                                    ("made_up", False)):
        rows = [(c, f) for c, f in zip(cases, flags) if c["truth"] == truth]
        if not rows:
            continue
        wrong = [(c, f) for c, f in rows if bool(f) == wrong_if_flagged]
        label = f"{truth}_flagged" if wrong_if_flagged else f"{truth}_passed"
        by_kind: Counter = Counter(c["kind"] for c, _ in rows)
        wrong_kind: Counter = Counter(c["kind"] for c, _ in wrong)
        by_form: Counter = Counter(c["form"] for c, _ in rows)
        wrong_form: Counter = Counter(c["form"] for c, _ in wrong)
        out[truth] = {
            "cases": len(rows), label: len(wrong),
            "share": round(len(wrong) / len(rows), 4),
            "by_kind": {k: f"{wrong_kind[k]}/{n}" for k, n in sorted(by_kind.items())},
            "by_form": {k: f"{wrong_form[k]}/{n}" for k, n in sorted(by_form.items())},
            "examples": [{"answer": c["answer"], "flagged": f,
                          **({"paragraph": c["paragraph"]} if "paragraph" in c else {})}
                         for c, f in wrong[:MAX_EXAMPLES]]}
    return out


def measure(passages: int) -> dict[str, Any]:
    """Both corpora scored with the check importable now, as search runs it (the whole
    corpus as evidence of ordinary words, when the check takes it), and, when it does,
    with the context alone (``<corpus>_context_only``)."""
    t0 = time.perf_counter()
    result = {}
    units, own = book_units(), own_texts()
    corpus = takes_corpus()
    for name, cases, texts in (("book", book_cases(units, passages), units),
                               ("own", own_cases(), own)):
        result[name] = score(cases, run_check(cases, texts if corpus else None))
        if corpus:
            result[f"{name}_context_only"] = score(cases, run_check(cases, []))
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def measure_ref(ref: str, passages: int) -> dict[str, Any]:
    """:func:`measure` with the kgloom of commit ``ref`` (the cases of this tree), in a
    child process; its short commit added as ``commit``."""
    from bench.harness import export_ref

    with tempfile.TemporaryDirectory() as tmp:
        short = export_ref(ref, Path(tmp) / "src")
        out = subprocess.run([sys.executable, __file__, "--code", str(Path(tmp) / "src"),
                              "--passages", str(passages), "--json-only"],
                             check=True, capture_output=True, text=True).stdout
    return {"commit": short, **json.loads(out)}


def headline(result: dict[str, Any]) -> dict[str, str]:
    """Per corpus (as search runs the check): made-up answers passed, correct answers
    flagged, ordinary-word answers flagged, each as "k/n"."""
    out = {}
    for corpus in ("book", "own"):
        for what, truth, key in (("made-up passed", "made_up", "made_up_passed"),
                                 ("correct flagged", "correct", "correct_flagged"),
                                 ("ordinary flagged", "ordinary_absent",
                                  "ordinary_absent_flagged")):
            row = result[corpus].get(truth)
            if row:
                out[f"{corpus} {what}"] = f"{row[key]}/{row['cases']}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=16, help="book text units measured")
    ap.add_argument("--before", default="", help="a git ref whose check is measured too")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "answer_check.json"))
    ap.add_argument("--code", default="", help=argparse.SUPPRESS)  # kgloom from this tree
    ap.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.code:
        sys.path.insert(0, args.code)
    result = measure(args.passages)
    if args.json_only:
        print(json.dumps(result, ensure_ascii=False))
        return
    result = {"commit": commit(dirty=True), "figures": headline(result), **result}
    if args.before:
        before = measure_ref(args.before, args.passages)
        result["before"] = {"commit": before["commit"], "figures": headline(before),
                            **{k: v for k, v in before.items() if k != "commit"}}
    for label, res in (("before", result.get("before")), ("after", result)):
        if res:
            print(f"{label} ({res['commit']}): " + "; ".join(
                f"{k} {v}" for k, v in res["figures"].items()))
    save_result(args.save, result, args, dirty=True, indent=1)


if __name__ == "__main__":
    main()
