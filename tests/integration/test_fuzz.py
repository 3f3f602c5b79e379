"""Bad input at the two front doors of an index, drawn at random: every route of
``kgloom serve`` and ``kgloom query``'s arguments.

A seeded ``random.Random`` (no hypothesis) draws a bounded number of cases (a few hundred
requests, a hundred command lines) from pools of odd values: JSON nested past any limit
(the 64 KB body of 32,000 ``[`` that answered 500), numbers beyond 64 bits, NaN and
Infinity, bytes that are not UTF-8, lone surrogates, wrong types, strings at and over
the limits, odd query parameters and path segments, other content types and encodings;
valid-looking requests run to the end on the fake-LLM index of the book. Each failure is
listed with the case that made it (its index, so a failure can be replayed with the
same seed).

- Every HTTP answer has a status below 500; a 4xx is ``{"error": {"message"}}`` with a
  message; a 200 is JSON (a streamed chat: events of JSON, none a server error).
- Every ``kgloom query`` run exits 0, 1 or 2; a failure says so in words, and no run
  raises out of the command (no traceback).

The server reads the index through LanceDB (its flat snapshots removed: the path a big
index takes, where a huge ``k`` once overflowed); the command line reads both kinds.
"""

from __future__ import annotations

import http.client
import json
import random
import shutil
import urllib.parse
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgloom.cli import app as cli
from kgloom.llm import open_llm
from kgloom.llm.testing import ASGIService
from kgloom.query.modes import MODES
from kgloom.serve.app import Limits, open_app
from kgloom.serve.openai_chat import CHAT_MODELS
from kgloom.serve.request_json import MAX_JSON_DEPTH
from tests.conftest import index_fake_book

pytestmark = pytest.mark.integration  # the book indexed with the fake LLM (~1 minute)

SEED = 20261206
LIMITS = Limits()  # the defaults: the 64 KB body of the report fits under max_body_bytes
CASES = {"query": 110, "subgraph": 40, "chat": 45, "raw": 45, "get": 90, "cli": 90}
QUESTION = "Who was Scrooge's business partner?"

# --- pools of odd values -----------------------------------------------------------------
ODD_STRINGS = [
    "", " ", "\t\n", "q", QUESTION, "Scrooge", "\x00", "who\x00is", "\x07\x1b[31m",
    "\u202eevil", "\ufeff", "\u200b" * 300, "🎄" * 400, "e\u0301" * 600, "狄更斯" * 100,
    "A " * 999, "Mr. " * 500, "'" * 2000, "." * 2000, "[T1] " * 400, "x" * 2000,
    "x" * 2001, "Scrooge " * 2000, "%s%n%x", "{}", "<script>alert(1)</script>",
    "' OR 1=1 --", "../../etc/passwd", "\\", '"', "null", "NaN", "-1", "Ebenezer\nScrooge",
]
SURROGATE_ESCAPES = ['"\\ud800"', '"who \\udcff is"', '"\\udfff\\ud800"']  # JSON text
INT_TEXTS = ["0", "1", "-1", "2", "3", "5", "20", "50", "51", "300", "301", "2147483648",
             "9223372036854775807", "9223372036854775808", "-9223372036854775809",
             "1" + "0" * 30, "1" + "0" * 5000]
FLOAT_TEXTS = ["0.5", "-0.0", "1.5", "0.9999999999999999", "5e-324", "1e-400", "1e308",
               "1.7976931348623157e308", "1e400", "-1e400", "3.0", "1E2"]
CONSTANTS = ["NaN", "Infinity", "-Infinity", "true", "false", "null"]
PARAM_TOKENS = ["0", "1", "2", "3", "-1", "4", "200", "201", "300", "301", "1e3", "nan",
                "inf", "-inf", "99999999999999999999", "", "abc", "%205", "5.0", "0x10",
                "1_000", "%00", "%FF", "%ED%A0%80", "%", "%zz", "%D9%A3", "true"]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain",
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                 "application/json; charset=latin-1", "application/octet-stream", None]
CLI_NUMBERS = ["0", "1", "2", "3", "-1", "-2", "0.5", "1.5", "99999999999999999999",
               "9223372036854775808", "1e400", "nan", "inf", "-inf", "abc", "", " 3", "0x10",
               "1_000", "٣"]


def odd_string(rng: random.Random) -> str:
    """A JSON string literal: an odd string (escaped or raw), or a lone surrogate escape."""
    if rng.random() < 0.1:
        return rng.choice(SURROGATE_ESCAPES)
    return json.dumps(rng.choice(ODD_STRINGS), ensure_ascii=rng.random() < 0.5)


def nested(rng: random.Random, inner: str = "1") -> str:
    """``inner`` inside arrays or objects nested around the depth limit or far past it."""
    n = rng.choice([2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 999, 5000])
    if rng.random() < 0.5:
        return "[" * n + inner + "]" * n
    return '{"a":' * n + inner + "}" * n


def odd_value(rng: random.Random, depth: int = 0) -> str:
    """JSON text of one odd value of any type."""
    kind = rng.choice(["int", "float", "constant", "string", "string", "list", "object",
                       "nested"])
    if kind == "int":
        return rng.choice(INT_TEXTS)
    if kind == "float":
        return rng.choice(FLOAT_TEXTS)
    if kind == "constant":
        return rng.choice(CONSTANTS)
    if kind == "string" or depth > 2:
        return odd_string(rng)
    if kind == "list":
        return "[" + ", ".join(odd_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + "]"
    if kind == "object":
        return "{" + ", ".join(f"{odd_string(rng)}: {odd_value(rng, depth + 1)}"
                               for _ in range(rng.randint(0, 3))) + "}"
    return nested(rng)


def obj(fields: dict[str, str]) -> str:
    """JSON object text of already-encoded field values."""
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}"


# --- the cases -----------------------------------------------------------------------------
QUERY_VALUES = {
    "top_k": lambda r: str(r.randint(1, 50)), "depth": lambda r: str(r.randint(0, 3)),
    "lam": lambda r: str(r.uniform(0, 5)), "oversample": lambda r: r.choice(
        ["1", "5", "1000000000000", "9223372036854775807"]),
    "damping": lambda r: str(r.uniform(0, 0.999)), "level": lambda r: str(r.randint(0, 4)),
    "budget": lambda r: str(r.choice([30, 500, 2000, 8000])),
    "dynamic": lambda r: r.choice(["true", "false"]),
    "keep_parent": lambda r: r.choice(["true", "false"]),
    "answer": lambda r: r.choice(["true", "false"]),
}


def query_body(rng: random.Random) -> str:
    """A /api/query body: a question (mostly one that runs), a mode (mostly a real one)
    and some options, each either plausible or odd; now and then an unknown field."""
    fields = {"question": json.dumps(QUESTION) if rng.random() < 0.4 else odd_string(rng)}
    fields["mode"] = json.dumps(rng.choice(MODES)) if rng.random() < 0.85 else \
        odd_value(rng)
    for name in rng.sample(sorted(QUERY_VALUES), rng.randint(0, 3)):
        fields[name] = QUERY_VALUES[name](rng) if rng.random() < 0.6 else odd_value(rng)
    if rng.random() < 0.05:
        fields["colour"] = odd_value(rng)
    if rng.random() < 0.1:
        fields.pop(rng.choice(sorted(fields)))
    return obj(fields)


def subgraph_body(rng: random.Random, ids: dict[str, list[str]]) -> str:
    """A /api/graph/subgraph body: lists of real and odd ids, depth and max_nodes."""
    fields = {}
    for name, real in (("entity_ids", ids["entities"]), ("text_unit_ids", ids["units"])):
        if rng.random() < 0.7:
            items = [json.dumps(rng.choice(real)) if rng.random() < 0.6 else odd_string(rng)
                     for _ in range(rng.choice([0, 1, 3, 10]))]
            if rng.random() < 0.05:
                items = [json.dumps(real[0])] * 501  # over max_entity_ids
            fields[name] = "[" + ", ".join(items) + "]"
        elif rng.random() < 0.5:
            fields[name] = odd_value(rng)
    for name, plausible in (("depth", lambda: str(rng.randint(0, 3))),
                            ("max_nodes", lambda: str(rng.randint(1, 300)))):
        if rng.random() < 0.5:
            fields[name] = plausible() if rng.random() < 0.5 else odd_value(rng)
    if rng.random() < 0.05:
        fields["extra"] = "1"
    return obj(fields)


def chat_body(rng: random.Random) -> str:
    """A /v1/chat/completions body: a model, one to three messages ending with the
    user's question (a string or text parts), maybe ``stream``, and (60% of the time) one
    odd thing: the model, the messages, a role or a content of another type or value, an
    odd ``stream``, or an OpenAI field the endpoint ignores with an odd value."""
    def message(role: str, content: str) -> str:
        return obj({"role": json.dumps(role), "content": content})

    question = json.dumps(QUESTION) if rng.random() < 0.7 else \
        "[" + ", ".join(obj({"type": json.dumps("text"), "text": json.dumps(QUESTION)})
                        for _ in range(rng.randint(1, 2))) + "]"
    messages = [message(rng.choice(["system", "assistant", "user"]), json.dumps("Hello"))
                for _ in range(rng.randint(0, 2))] + [message("user", question)]
    fields = {"model": json.dumps(rng.choice(list(CHAT_MODELS)))}
    if rng.random() < 0.3:
        fields["stream"] = rng.choice(["true", "false"])
    odd = rng.choice(["model", "messages", "role", "content", "parts", "stream", "extra"]) \
        if rng.random() < 0.6 else None
    if odd == "model":
        fields["model"] = odd_value(rng)
    elif odd == "messages":
        messages = [] if rng.random() < 0.3 else [odd_value(rng)]
    elif odd == "role":
        messages[-1] = obj({"role": odd_value(rng), "content": question})
    elif odd == "content":
        messages[-1] = message("user", odd_value(rng))
    elif odd == "parts":
        messages[-1] = message("user", "[" + ", ".join(
            obj({"type": odd_value(rng) if rng.random() < 0.3 else json.dumps("text"),
                 "text": odd_value(rng)}) for _ in range(rng.randint(0, 3))) + "]")
    elif odd == "stream":
        fields["stream"] = odd_value(rng)
    elif odd == "extra":
        fields[rng.choice(["temperature", "max_tokens", "tools", "response_format", "n",
                           "user"])] = odd_value(rng)
    fields["messages"] = "[" + ", ".join(messages) + "]"
    return obj(fields)


def raw_body(rng: random.Random) -> bytes:
    """A body that is not plain UTF-8 JSON: other encodings, bytes that are no text,
    cut JSON, the report's 64 KB nest, over the size limit, empty."""
    good = json.dumps({"question": QUESTION, "mode": "vector"})
    kind = rng.randrange(12)
    if kind == 0:
        return good.encode(rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32",
                                       "utf-8-sig"]))
    if kind == 1:
        return good.encode("latin-1").replace(b"Scrooge", b"Scr\xf6\xf6ge")
    if kind == 2:
        return b'{"question": "' + bytes(rng.randrange(256) for _ in range(40)) + b'"}'
    if kind == 3:
        return b'{"question": "\xed\xa0\x80"}'  # a surrogate encoded as UTF-8
    if kind == 4:
        return good.encode()[:rng.randrange(1, len(good))]
    if kind == 5:  # the report's example: 64 KB nested 32,000 levels deep
        return rng.choice([b"[" * 32000 + b"]" * 32000, b'{"a":' * 6500 + b"1" + b"}" * 6500])
    if kind == 6:
        return b"x" * (LIMITS.max_body_bytes + 1)
    if kind == 7:
        return rng.choice([b"", b" ", b"\n", b"null", b"\xef\xbb\xbf", b"0"])
    if kind == 8:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if kind == 9:
        return b"question=Who+is+Scrooge%3F&mode=vector"
    if kind == 10:
        return ('{"question": "' + "\\" * rng.choice([1, 2, 3]) + '"' * rng.choice([1, 2])
                + "}").encode()
    return nested(rng, good).encode()


def get_path(rng: random.Random, ids: dict[str, list[str]]) -> str:
    """A GET request's path and query with real or odd ids and parameters."""
    def segment(real: list[str]) -> str:
        if real and rng.random() < 0.4:
            return urllib.parse.quote(rng.choice(real), safe="")
        if rng.random() < 0.3:
            return rng.choice(["%00", "%FF", "%ED%A0%80", "%2F..%2F", "..", "%25", "x" * 3000,
                               "%20", "-1", "99999999999999999999"])
        return urllib.parse.quote(rng.choice(ODD_STRINGS)[:1000] or "x", safe="")

    def param() -> str:
        if rng.random() < 0.3:
            return urllib.parse.quote(rng.choice(ODD_STRINGS)[:1000], safe="")
        return rng.choice(PARAM_TOKENS)

    kind = rng.randrange(8)
    if kind == 0:
        q = [f"q={param()}"] if rng.random() < 0.9 else []
        q += [f"limit={param()}" for _ in range(rng.choice([0, 1, 2]))]
        return "/api/graph/entities?" + "&".join(q)
    if kind == 1:
        return f"/api/graph/entities/{segment(ids['entities'])}"
    if kind == 2:
        q = [f"{name}={param()}" for name in ("depth", "max_nodes") if rng.random() < 0.7]
        return f"/api/graph/entities/{segment(ids['entities'])}/neighbourhood?" + "&".join(q)
    if kind == 3:
        return f"/api/text_units/{segment(ids['units'])}"
    if kind == 4:
        return f"/api/graph/communities/{segment(ids['communities'])}"
    if kind == 5:
        return rng.choice(["/api/health", "/api/modes", "/v1/models", "/api/graph/communities",
                           "/"]) + f"?{param()}={param()}"
    if kind == 6:  # a POST route asked with GET
        return rng.choice(["/api/query", "/api/graph/subgraph", "/v1/chat/completions"])
    return "/" + segment([]) + rng.choice(["", "/api", "/static/%2e%2e/app.py"])


def server_cases(ids: dict[str, list[str]]) -> list[tuple[str, str, bytes | None, str | None]]:
    """Every HTTP case: (method, path, body, content type), in a fixed order."""
    rng = random.Random(SEED)
    cases: list[tuple[str, str, bytes | None, str | None]] = []
    json_type = "application/json"
    for _ in range(CASES["query"]):
        cases.append(("POST", "/api/query", query_body(rng).encode(), json_type))
    for _ in range(CASES["subgraph"]):
        cases.append(("POST", "/api/graph/subgraph", subgraph_body(rng, ids).encode(),
                      json_type))
    for _ in range(CASES["chat"]):
        cases.append(("POST", "/v1/chat/completions", chat_body(rng).encode(), json_type))
    for _ in range(CASES["raw"]):
        cases.append(("POST", rng.choice(["/api/query", "/api/graph/subgraph",
                                          "/v1/chat/completions"]), raw_body(rng),
                      rng.choice(CONTENT_TYPES)))
    for _ in range(CASES["get"]):
        cases.append(("GET", get_path(rng, ids), None, None))
    return cases


# --- the server ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def book_index(tmp_path_factory) -> Path:
    return index_fake_book(tmp_path_factory, reports=True)


@pytest.fixture(scope="module")
def lancedb_index(book_index, tmp_path_factory) -> Path:
    """The same index without its flat snapshots: every vector search goes to LanceDB."""
    copy = tmp_path_factory.mktemp("fuzz_lancedb") / "index"
    shutil.copytree(book_index, copy)
    snapshots = list(copy.rglob("*.flat.parquet"))
    assert snapshots
    for snap in snapshots:
        snap.unlink()
    return copy


@pytest.fixture(scope="module")
def server(lancedb_index, tmp_path_factory):
    llm = open_llm(tmp_path_factory.mktemp("fuzz_cache") / "answers.sqlite", fake=True)
    svc = ASGIService(open_app(lancedb_index, llm, limits=LIMITS)).start()
    yield svc
    svc.stop()


def request(url: str, method: str, path: str, body: bytes | None = None,
            content_type: str | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) of one request sent as given (no re-encoding)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        if content_type:
            conn.putheader("Content-Type", content_type)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, r.headers.get("content-type", ""), r.read()
    finally:
        conn.close()


def answer_fault(status: int, kind: str, body: bytes) -> str | None:
    """What is wrong with one answer (None: nothing)."""
    if status >= 500:
        return f"status {status}: {body[:300]!r}"
    if kind.startswith("text/event-stream"):
        for line in body.decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                if (event.get("error") or {}).get("type") == "server_error":
                    return f"a server error in the stream: {line[:300]}"
        return None
    if kind.startswith("text/html"):  # the explorer page
        return None if status == 200 else f"status {status} as HTML"
    try:
        out = json.loads(body)
    except ValueError:
        return f"status {status} with a body that is not JSON: {body[:300]!r}"
    if status >= 400:
        message = (out.get("error") or {}).get("message") if isinstance(out, dict) else None
        if not isinstance(message, str) or not message.strip():
            return f"status {status} without an error message: {body[:300]!r}"
    return None


def known_ids(url: str) -> dict[str, list[str]]:
    """Real entity, text unit and community ids of the served index, asked of the API."""
    def get(path: str, body: dict | None = None):
        status, _, out = request(url, "POST" if body else "GET", path,
                                 json.dumps(body).encode() if body else None,
                                 "application/json")
        assert status == 200, out
        return json.loads(out)

    entities = [e["id"] for e in get("/api/graph/entities?q=e&limit=200")["entities"]]
    units = [u["id"] for u in get("/api/query", {"question": QUESTION, "mode": "vector",
                                                 "top_k": 20})["text_units"]]
    communities = [str(c["community"]) for c in get("/api/graph/communities")["communities"]]
    assert entities and units and communities
    return {"entities": entities, "units": units, "communities": communities}


def test_no_request_gets_a_5xx_and_every_4xx_says_why(server):
    cases = server_cases(known_ids(server.url))
    assert len(cases) == sum(v for k, v in CASES.items() if k != "cli")
    faults, statuses = [], {}
    for i, (method, path, body, content_type) in enumerate(cases):
        status, kind, out = request(server.url, method, path, body, content_type)
        statuses[status] = statuses.get(status, 0) + 1
        fault = answer_fault(status, kind, out)
        if fault:
            faults.append(f"case {i}: {method} {path[:120]} {(body or b'')[:120]!r} "
                          f"({content_type}) -> {fault}")
    assert not faults, f"{len(faults)} of {len(cases)} answers are wrong:\n" + "\n".join(faults)
    # the draw reached both sides: answers and refusals
    assert statuses.get(200, 0) > 0 and statuses.get(400, 0) > 0, statuses


def test_the_report_s_deep_body_is_a_400_naming_the_limit(server):
    for body in (b"[" * 32000 + b"]" * 32000, b'{"a":' * 6500 + b"1" + b"}" * 6500):
        assert len(body) <= LIMITS.max_body_bytes
        for path in ("/api/query", "/api/graph/subgraph", "/v1/chat/completions"):
            status, _, out = request(server.url, "POST", path, body, "application/json")
            assert status == 400, (path, out[:300])
            assert f"more than {MAX_JSON_DEPTH} levels" in json.loads(out)["error"]["message"]


# --- the command line ------------------------------------------------------------------------
# the options' plausible values: in range, extremes included (a top_k past the index's
# size, an oversample of 10^12, a depth past the graph's diameter)
CLI_PLAUSIBLE = {
    "--top-k": ["1", "3", "5", "50", "99999999999999999999"],
    "--depth": ["0", "1", "2", "3", "50", "99999999999999999999"],
    "--lambda": ["0", "0.5", "1", "1e308"],
    "--oversample": ["1", "5", "1000000000000", "99999999999999999999"],
    "--damping": ["0", "0.5", "0.999999"],
    "--level": ["0", "1", "2", "99"],
    "--budget": ["30", "500", "2000"],
}


def cli_cases(indexes: list[Path], cache: Path) -> list[list[str]]:
    """Every ``kgloom query`` command line, in a fixed order: a question and a mode with
    a few plausible options, and (half of the time) one odd thing: a question that is no
    text or looks like an option, a mode or option value out of its domain, a bad
    ``--set``, a folder as the cache."""
    rng = random.Random(SEED + 1)
    cases = []
    for _ in range(CASES["cli"]):
        question = QUESTION if rng.random() < 0.5 else rng.choice(ODD_STRINGS) or "q"
        args = ["query", question, "--output-dir", str(rng.choice(indexes)), "--mode",
                rng.choice(MODES), "--fake-llm", "--cache-path", str(cache)]
        for flag in rng.sample(sorted(CLI_PLAUSIBLE), rng.randint(0, 2)):
            args += [flag, rng.choice(CLI_PLAUSIBLE[flag])]
        if rng.random() < 0.3:
            args += ["--graph-backend", rng.choice(["duckdb", "memory"])]
        for flag in ("--json", "--dynamic", "--keep-parent", "--context-only"):
            if rng.random() < 0.15:
                args.append(flag)
        odd = rng.choice(["question", "mode", "number", "number", "backend", "set",
                          "cache"]) if rng.random() < 0.5 else None
        if odd == "question":
            args[1] = rng.choice(["\udcff who", "who \ud800 is", "-x", "--", "--json",
                                  "Scrooge " * 600, "\x00", "", "  "])
        elif odd == "mode":
            args[5] = rng.choice(["", "VECTOR", "vector ", "telepathy", "\udcff"])
        elif odd == "number":
            args += [rng.choice(sorted(CLI_PLAUSIBLE)), rng.choice(CLI_NUMBERS)]
        elif odd == "backend":
            args += ["--graph-backend", rng.choice(["neo4j", "", "DUCKDB"])]
        elif odd == "set":
            args += ["--set", rng.choice(["retrieval.top_k=abc", "retrieval.damping=2",
                                          "search.budget=-5", "nonsense", "retrieval.x=1",
                                          "retrieval.top_k=99999999999999999999"])]
        elif odd == "cache":
            args[args.index("--cache-path") + 1] = str(cache.parent)  # a folder
        cases.append(args)
    return cases


def test_no_command_line_ends_in_a_traceback(book_index, lancedb_index, tmp_path):
    runner = CliRunner()
    cases = cli_cases([book_index, lancedb_index], tmp_path / "query_cache.sqlite")
    faults, codes = [], {}
    for i, args in enumerate(cases):
        res = runner.invoke(cli, args)
        codes[res.exit_code] = codes.get(res.exit_code, 0) + 1
        shown = [a[:40] for a in args[1:2]] + args[2:]
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            faults.append(f"case {i}: {shown} raised {res.exception!r}")
        elif res.exit_code not in (0, 1, 2):
            faults.append(f"case {i}: {shown} exited {res.exit_code}")
        elif "Traceback" in res.output:
            faults.append(f"case {i}: {shown} printed a traceback")
        elif res.exit_code and not any(w in res.output.lower() for w in ("error", "usage")):
            faults.append(f"case {i}: {shown} exited {res.exit_code} saying "
                          f"{res.output[-200:]!r}")
        elif res.exit_code == 0 and "--json" in args[2:]:
            try:
                json.loads(res.stdout)  # the whole stdout is the result
            except ValueError:
                faults.append(f"case {i}: {shown} printed no JSON: {res.stdout[:200]!r}")
    assert not faults, f"{len(faults)} of {len(cases)} runs are wrong:\n" + "\n".join(faults)
    # the draw reached both sides (answers and refusals) and every mode
    assert codes.get(0, 0) > 0 and codes.get(2, 0) > 0, codes
    assert set(MODES) <= {args[args.index("--mode") + 1] for args in cases}
