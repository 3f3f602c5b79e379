"""Reading an input folder into documents: formats, bad files, duplicates, stable ids."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.core.ids import content_id
from kgloom.core.inputs import list_input_files
from kgloom.ingest.documents import normalize_text, read_documents, strip_boilerplate

MARLEY = ("Marley was dead, to begin with. There is no doubt whatever about that. The "
          "register of his burial was signed by the clergyman, the clerk, the undertaker, "
          "and the chief mourner. Scrooge signed it.")
FOG = ("Foggier yet, and colder! Piercing, searching, biting cold. If the good St. Dunstan "
       "had but nipped the Evil Spirit's nose with a touch of such weather as that, instead "
       "of using his familiar weapons, then indeed he would have roared to lusty purpose.")
FEZZIWIG = "In came Mrs. Fezziwig, one vast substantial smile."
BALL = "When the clock struck eleven, this domestic ball broke up."
CRATCHIT = "Bob Cratchit carried Tiny Tim upon his shoulder."


def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def _by_source(failures) -> dict[str, dict]:
    return {r["item_id"].split(":")[0]: r for r in failures.iter_rows(named=True)}


def test_each_format_is_read_one_document_per_record(tmp_path):
    _write(tmp_path / "stave1.txt", MARLEY)
    _write(tmp_path / "notes.md", "# Stave Three\n\n" + CRATCHIT)
    _write(tmp_path / "ball.jsonl",
           json.dumps({"title": "The ball", "text": FEZZIWIG}) + "\n\n"
           + json.dumps({"text": BALL}) + "\n")
    _csv(tmp_path / "weather.csv", ["title", "text"], [["Fog", FOG], ["", "It was cold."]])

    docs, failures = read_documents(tmp_path)

    assert failures.height == 0
    assert docs.columns == list(schemas.DOCUMENTS_SCHEMA)
    assert docs.height == 6  # 1 txt + 1 md + 2 jsonl lines (blank line skipped) + 2 csv rows
    by_title = {r["title"]: r for r in docs.iter_rows(named=True)}
    # txt / md: file stem is the title, the whole file the text; no raw record
    assert by_title["stave1"]["text"] == MARLEY
    assert by_title["stave1"]["raw_data"] is None
    assert by_title["notes"]["text"].endswith(CRATCHIT)
    # jsonl / csv: the title field, or "<stem>#<line or row number>" when absent or empty
    assert by_title["The ball"]["text"] == FEZZIWIG
    assert by_title["ball#3"]["text"] == BALL  # line 3 (line 2 is blank)
    assert by_title["Fog"]["text"] == FOG
    assert by_title["weather#3"]["text"] == "It was cold."  # row 3 (row 1 is the header)
    assert json.loads(by_title["The ball"]["raw_data"]) == {"title": "The ball",
                                                            "text": FEZZIWIG}
    assert by_title["Fog"]["source"] == "weather.csv"
    # text_unit_ids are filled by chunking, not here
    assert docs["text_unit_ids"].to_list() == [[]] * 6
    assert sorted(docs["human_readable_id"]) == list(range(6))


def test_bad_files_become_failures_while_good_files_are_read(tmp_path):
    _write(tmp_path / "good.txt", MARLEY)
    _write(tmp_path / "empty.txt", "")
    _write(tmp_path / "blank.md", "  \n\t\r\n   \n")
    _write(tmp_path / "latin1.txt", "Scrooge said \u2018Bah!\u2019".encode("cp1252") + b"\xff")
    _write(tmp_path / "broken.jsonl", json.dumps({"text": FEZZIWIG}) + "\n{not json}\n")
    _csv(tmp_path / "notext.csv", ["title", "body"], [["Fog", FOG]])
    _csv(tmp_path / "good.csv", ["text"], [[CRATCHIT]])

    docs, failures = read_documents(tmp_path)

    # one bad JSONL line loses only itself: the good line of broken.jsonl is kept
    assert sorted(docs["text"]) == sorted([MARLEY, CRATCHIT, FEZZIWIG])
    assert failures.columns == list(schemas.FAILURES_SCHEMA)
    rows = _by_source(failures)
    assert set(rows) == {"empty.txt", "blank.md", "latin1.txt", "broken.jsonl", "notext.csv"}
    assert all(r["stage"] == "documents" for r in rows.values())
    assert "empty" in rows["empty.txt"]["reason"]
    assert "empty" in rows["blank.md"]["reason"]
    # 20 characters whose 3 non-ASCII bytes mean different letters in each code page
    assert "best guess" in rows["latin1.txt"]["reason"]
    assert rows["broken.jsonl"]["item_id"] == "broken.jsonl:line 2"
    assert "not JSON" in rows["broken.jsonl"]["reason"]
    assert "'text'" in rows["notext.csv"]["reason"]
    assert all(r["reason"] for r in rows.values())


@pytest.mark.parametrize("name, content", [
    ("nothing.jsonl", ""),
    ("blank-lines.jsonl", "\n\n  \n"),
    ("header-only.csv", "title,text\n"),
])
def test_record_file_without_records_is_not_silent(tmp_path, name, content):
    # a bad file is never a crash and never silence
    _write(tmp_path / name, content)
    _write(tmp_path / "good.txt", MARLEY)
    docs, failures = read_documents(tmp_path)
    assert docs["text"].to_list() == [MARLEY]
    assert failures["item_id"].to_list() == [name]
    assert "no records" in failures["reason"][0]


def test_duplicate_text_is_kept_once_and_reported(tmp_path):
    _write(tmp_path / "a.txt", MARLEY)
    # same text after normalization: CRLF line ends and outer whitespace
    _write(tmp_path / "b.txt", "\r\n  " + MARLEY + "  \r\n")
    _write(tmp_path / "c.jsonl", json.dumps({"title": "again", "text": MARLEY}) + "\n")

    docs, failures = read_documents(tmp_path)

    assert docs.height == 1
    assert docs["source"][0] == "a.txt"  # files are read in path order: the first is kept
    assert failures.height == 2
    assert all("duplicate" in r for r in failures["reason"])
    assert all("a.txt" in d for d in failures["detail"])
    assert sorted(failures["item_id"]) == ["b.txt:b", "c.jsonl:again"]


def test_ids_are_content_derived_stable_and_independent_of_file_name(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    _write(one / "stave1.txt", MARLEY)
    _write(one / "fog.txt", FOG)
    _write(two / "renamed-chapter.md", MARLEY + "\n")

    first, _ = read_documents(one)
    second, _ = read_documents(one)
    other, _ = read_documents(two)

    assert first["id"].to_list() == second["id"].to_list()
    marley_id = first.filter(first["title"] == "stave1")["id"][0]
    assert other["id"].to_list() == [marley_id]
    assert marley_id == content_id("document", normalize_text(MARLEY))
    assert len(set(first["id"])) == 2


def test_missing_input_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        read_documents(tmp_path / "does-not-exist")
    with pytest.raises(FileNotFoundError):
        list_input_files(tmp_path / "does-not-exist")


def test_hidden_and_unsupported_files_are_skipped(tmp_path):
    _write(tmp_path / "stave1.txt", MARLEY)
    _write(tmp_path / ".draft.txt", FOG)
    _write(tmp_path / ".cache" / "old.txt", FEZZIWIG)
    _write(tmp_path / "sub" / "ball.md", BALL)
    _write(tmp_path / "cover.png", b"\x89PNG\r\n")

    files = list_input_files(tmp_path)
    docs, failures = read_documents(tmp_path)

    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["stave1.txt", "sub/ball.md"]
    assert sorted(docs["text"]) == sorted([MARLEY, BALL])
    assert failures.height == 0


def test_only_the_given_files_are_read(tmp_path):
    a = _write(tmp_path / "a.txt", MARLEY)
    _write(tmp_path / "b.txt", FOG)
    docs, _ = read_documents(tmp_path, files=[a])
    assert docs["text"].to_list() == [MARLEY]
    assert docs["source"].to_list() == ["a.txt"]


def test_normalize_text_unifies_line_ends_and_unicode():
    # "e" + combining acute (NFD) becomes the single NFC code point
    assert normalize_text("  Caf\u0065\u0301\r\nbar\rbaz \n") == "Caf\u00e9\nbar\nbaz"


GUTENBERG = """The Project Gutenberg eBook of A Tale

This ebook is for the use of anyone anywhere in the United States and most other
parts of the world at no cost. You may copy it under the terms of the Project
Gutenberg License included with this ebook or online at www.gutenberg.org.

Title: A Tale

*** START OF THE PROJECT GUTENBERG EBOOK A TALE ***

{body}

*** END OF THE PROJECT GUTENBERG EBOOK A TALE ***

Updated editions will replace the previous one. Section 1. General Terms of Use
and Redistributing Project Gutenberg electronic works. The Project Gutenberg
Literary Archive Foundation ...
"""


def test_gutenberg_header_and_footer_are_cut_and_recorded(tmp_path):
    _write(tmp_path / "tale.txt", GUTENBERG.format(body=MARLEY))
    _write(tmp_path / "plain.txt", FOG)
    docs, failures = read_documents(tmp_path)
    assert failures.height == 0
    tale = docs.filter(pl.col("source") == "tale.txt").row(0, named=True)
    assert tale["text"] == normalize_text(MARLEY)
    assert "Gutenberg" not in tale["text"] and "START OF" not in tale["text"]
    cut = json.loads(tale["boilerplate_cut"])
    assert cut["marker"] == "project_gutenberg"
    assert cut["header_chars"] > 200 and cut["footer_chars"] > 100
    assert docs.filter(pl.col("source") == "plain.txt")["boilerplate_cut"][0] is None


def test_boilerplate_cut_can_be_turned_off_and_never_empties_a_text(tmp_path):
    _write(tmp_path / "tale.txt", GUTENBERG.format(body=MARLEY))
    docs, _ = read_documents(tmp_path, cut_boilerplate=False)
    assert "START OF THE PROJECT GUTENBERG" in docs["text"][0]
    assert docs["boilerplate_cut"][0] is None
    # markers around nothing: the text is kept whole rather than lost
    text, cut = strip_boilerplate("*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n"
                                  "*** END OF THE PROJECT GUTENBERG EBOOK X ***")
    assert cut is None and "START OF" in text
    # only a footer
    text, cut = strip_boilerplate(
        "Body text.\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\nlicence")
    assert text == "Body text." and json.loads(cut)["header_chars"] == 0


def test_a_csv_cell_over_the_csv_modules_field_limit_loses_nothing(tmp_path):
    # the csv module refuses fields over 131,072 characters by default: the file was lost
    long_text = ("Scrooge counted coins. " * 9000).strip()  # 206,999 characters
    assert len(long_text) > 131_072
    _csv(tmp_path / "big.csv", ["title", "text"], [["Long", long_text], ["Fog", FOG]])
    docs, failures = read_documents(tmp_path)
    assert failures.height == 0, failures.to_dicts()
    by_title = {r["title"]: r["text"] for r in docs.iter_rows(named=True)}
    assert by_title == {"Long": long_text, "Fog": FOG}


def test_an_unparsable_csv_row_loses_only_itself(tmp_path):
    # a bare carriage return inside an unquoted field is a csv.Error for that row alone
    _write(tmp_path / "mixed.csv", f'title,text\nA,"{MARLEY}"\nB,broken\rrow\nC,"{FOG}"\n')
    docs, failures = read_documents(tmp_path)
    assert sorted(docs["title"]) == ["A", "C"]
    assert failures["item_id"].to_list() == ["mixed.csv:row 3"]
    assert "not CSV" in failures["reason"][0]
