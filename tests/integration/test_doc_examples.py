"""The README's and the docs' examples, run against the bundled data as a new user runs them.

One index of the bundled book (``data/input``) is built the way ``make index`` builds it
(``kgloom index``, the bundled model, default settings, no DAGSTER_HOME exported); then
every ``kgloom query`` line of the README's and docs/query.md's command blocks, the
README's Python example and docs/outputs.md's DuckDB two-hop query run against it, each
checked for what the text next to it says it gives. Commands that need something the
repository does not ship (another GGUF, a model server, a Neo4j server) are not run here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # the bundled model on the book

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUERY_DOC = ROOT / "docs" / "query.md"
OUTPUTS_DOC = ROOT / "docs" / "outputs.md"


def code_blocks(path: Path, lang: str) -> list[str]:
    """The bodies of the fenced ``lang`` blocks of ``path``, in order."""
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def query_lines(path: Path) -> list[list[str]]:
    """Every ``kgloom query "QUESTION" ...`` command of ``path``'s bash blocks and inline
    code, as argv after ``kgloom`` (comments dropped)."""
    found = []
    text = path.read_text(encoding="utf-8")
    lines = [ln for block in code_blocks(path, "bash") for ln in block.splitlines()]
    lines += re.findall(r"`((?:\.venv/bin/)?kgloom query [^`]+)`", text)
    for line in lines:
        argv = shlex.split(line, comments=True)
        if (len(argv) > 2 and argv[0].endswith("kgloom") and argv[1] == "query"
                and not argv[2].startswith("-")):  # a command, not a mention of an option
            found.append(argv[1:])
    return found


@pytest.fixture(scope="module")
def book_index(tmp_path_factory) -> Path:
    """The bundled book indexed by ``kgloom index`` with default settings, run from a
    folder of its own with no DAGSTER_HOME (as ``make index`` does, into a temporary
    output folder)."""
    work = tmp_path_factory.mktemp("book")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KGLOOM_") and k != "DAGSTER_HOME"}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    res = subprocess.run([sys.executable, "-m", "kgloom.cli", "index", "--input-dir",
                          str(ROOT / "data" / "input"), "--output-dir", "out"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return work / "out"


def run_query(argv: list[str], index: Path) -> str:
    """``kgloom ARGV --output-dir INDEX`` in this process; its output (stdout + stderr)."""
    from kgloom.cli import app

    res = CliRunner().invoke(app, [*argv, "--output-dir", str(index)])
    assert res.exit_code == 0, f"kgloom {shlex.join(argv)}:\n{res.output}"
    return res.output


def as_json(output: str) -> dict:
    return json.loads(output[output.index("{"):])


def test_the_readme_and_query_doc_lines_are_found():
    readme, query = query_lines(README), query_lines(QUERY_DOC)
    assert len(readme) >= 4 and len(query) >= 5  # the parser still sees the examples
    assert any("business partner" in " ".join(a) for a in readme)


def test_every_readme_query_runs_and_says_when_nothing_is_relevant(book_index):
    for argv in query_lines(README):
        out = run_query(argv, book_index)
        info = as_json(run_query([*argv, "--json"] if "--json" not in argv else argv,
                                 book_index))["info"]
        # a 2Wiki question asked of the book: nothing relevant, and it is said; the
        # book's own questions are not flagged
        assert info["low_relevance"] is ("Billy Elliot" in argv[1]), (argv, info)
        assert (info["notice"] or "no notice") in out or not info["low_relevance"], out


def test_the_readme_partner_questions_find_marley_in_the_default_top_5(book_index):
    """The README's own question, asked as it is written (the default mode)."""
    questions = {a[1] for a in query_lines(README) if "partner" in a[1] and "--mode" not in a}
    assert len(questions) >= 2
    for question in sorted(questions):
        units = as_json(run_query(["query", question, "--json"], book_index))["text_units"]
        found = [i for i, u in enumerate(units[:5], 1)
                 if "Marley" in u["text"] and "partner" in u["text"]]
        assert found, (question, [u["text"][:60] for u in units[:5]])


def test_the_readme_python_example_runs(book_index):
    block = next(b for b in code_blocks(README, "python") if "Retriever(" in b)
    code = block.replace('"data/output"', repr(str(book_index)))
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # the README's own code
    res = scope["res"]
    assert res.text_units.height == 5
    # the columns and fields the example's comments list
    comments = dict(re.findall(r"^(res\.\w+)\s+# (.*)$", block, flags=re.M))
    listed = re.findall(r"\w+", comments["res.text_units"])
    assert listed == res.text_units.columns, (listed, res.text_units.columns)
    assert {"hop_depth", "score"} <= set(res.entities.columns)
    assert {"fallback", "low_relevance", "notice", "ann", "seconds"} <= set(res.info)
    assert "Ebenezer Scrooge" in res.linked["title"].to_list()  # "the question's entities"


def test_the_query_doc_search_examples_give_what_they_say(book_index):
    for argv in query_lines(QUERY_DOC):
        out = run_query(argv, book_index)
        if "--json" in argv:  # "route + reason in the JSON"
            got = as_json(out)
            assert got["route"] and got["route_reason"], got
        elif "--context-only" in argv:  # "no model call": the context, no answer
            assert not re.search(r"^answer:", out, flags=re.M), out
            assert re.search(r"^\s*\[C\d+\] \S", out, flags=re.M), out
            assert not re.search(r"^llm: .*[1-9]\d* calls", out, flags=re.M), out
        else:  # an answer, and what each citation is
            assert "answer:" in out, out
            assert re.search(r"^\s+\[[CERTP]\d+\] \S", out, flags=re.M), out


def test_the_outputs_doc_two_hop_query_finds_scrooges_neighbourhood(book_index,
                                                                   monkeypatch):
    import duckdb

    block = next(b for b in code_blocks(OUTPUTS_DOC, "sql") if b.startswith("-- two-hop"))
    monkeypatch.chdir(book_index)  # "run it in the output folder"
    rows = duckdb.sql(block).pl()
    assert rows.height > 0 and set(rows["start"]) == {"Ebenezer Scrooge"}
    assert "Jacob Marley" in set(rows["via"]) | set(rows["reached"])


def test_make_index_leaves_the_instance_with_the_index(book_index):
    home = book_index / ".dagster_home"
    assert (home / "dagster.yaml").exists() and (home / "storage").is_dir()
    assert not (book_index.parent / ".dagster_home").exists()
