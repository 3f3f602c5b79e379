"""The llama.cpp grammar (GBNF) of a reply schema, with string lengths bounded in UTF-8
bytes, and the longest reply it allows (no Dagster here).

Why bytes: every token of a byte-level BPE vocabulary (SmolLM2, Llama 3, Qwen, GPT-2)
or of a SentencePiece vocabulary with byte fallback is at least one byte of text, so a
reply of at most N bytes is at most N tokens, whatever characters it holds. A bound in
characters is not: one emoji is 4 bytes, a ZWJ sequence such as 👩‍🔬 is 11, a CJK
character or a combining mark 2-3, and llama-cpp-python's grammar also lets a model
write any character as a 6-byte ``\\uXXXX`` escape. A reply of ``maxLength`` such
characters can need 4-6 times ``maxLength`` tokens and be cut at ``max_tokens``.

So :func:`json_grammar` takes llama-cpp-python's conversion of the JSON schema
(``llama_cpp.llama_grammar.json_schema_to_gbnf``) and replaces each bounded string rule
(``"\\"" char (char (...)?)? "\\"" space``, ``maxLength`` characters) by one that counts
bytes: at most ``maxLength`` bytes of UTF-8 (escapes counted as written). Every string it
allows has at most ``maxLength`` characters, so every reply still validates against the
schema, and ASCII text is bounded exactly as before. :func:`max_reply_bytes` then walks
the grammar for the longest reply it can produce (literals and character classes in
UTF-8 bytes, alternatives by their longest, bounded repetitions multiplied out, ``*`` /
``+`` / recursion unbounded), which is the ``max_tokens`` that no grammar-valid reply
can exceed.

Sources: llama.cpp ``grammars/README.md`` (GBNF syntax: literals, ``[...]`` classes,
``\\x``/``\\u``/``\\U`` escapes, ``? * + {m,n}``); RFC 3629 (UTF-8 byte lengths).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

# Characters of a JSON string by their UTF-8 length in bytes, as GBNF: raw characters
# except '"' and '\\' (as llama-cpp-python's ``char`` rule), two-character escapes, and
# the six-byte \uXXXX escape.
BYTE_CLASSES = {
    1: r"[\x00-\x21\x23-\x5B\x5D-\x7F]",
    2: r'[\u0080-\u07FF] | "\\" ["\\/bfnrt]',
    3: r"[\u0800-\uFFFF]",
    4: r"[\U00010000-\U0010FFFF]",
    6: r'"\\u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]',
}
_STRING_RULE = re.compile(r'^"\\"" (?P<chars>[char ()?]+) "\\"" space$')
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class Node:
    """One GBNF expression: ``kind`` is ``lit`` (``text``), ``class`` (``ranges`` of code
    points, ``negated``), ``ref`` (``text`` = rule name), ``seq`` / ``alt`` (``items``)
    or ``rep`` (``items[0]`` repeated ``lo`` to ``hi`` times; ``hi`` None = unbounded)."""

    kind: str
    text: str = ""
    ranges: tuple[tuple[int, int], ...] = ()
    negated: bool = False
    items: tuple[Node, ...] = ()
    lo: int = 0
    hi: int | None = 1


def _char(src: str, i: int) -> tuple[int, int]:
    """The code point of the possibly escaped GBNF character at ``src[i]``, next index."""
    if src[i] != "\\":
        return ord(src[i]), i + 1
    c = src[i + 1]
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width:
        return int(src[i + 2:i + 2 + width], 16), i + 2 + width
    return ord(_ESCAPES.get(c, c)), i + 2


_NAME = re.compile(r"[A-Za-z0-9_-]+")


def _parse_body(src: str) -> Node:
    """Parse one rule body. Iterative (an explicit stack of open groups): the converter
    nests a bounded string as hundreds of ``(char ...)?`` groups."""
    stack: list[list[list[Node]]] = [[[]]]  # open groups -> alternatives -> sequence
    i = 0

    def close(options: list[list[Node]]) -> Node:
        seqs = [Node("seq", items=tuple(seq)) for seq in options]
        return seqs[0] if len(seqs) == 1 else Node("alt", items=tuple(seqs))

    while i < len(src):
        c = src[i]
        if c.isspace():
            i += 1
        elif c == "(":
            stack.append([[]])
            i += 1
        elif c == ")":
            node = close(stack.pop())
            stack[-1][-1].append(node)
            i += 1
        elif c == "|":
            stack[-1].append([])
            i += 1
        elif c in "?*+{":
            (lo, hi), i = _repeat_bounds(src, i)
            seq = stack[-1][-1]
            seq[-1] = Node("rep", items=(seq[-1],), lo=lo, hi=hi)
        elif c == '"':
            node, i = _literal(src, i)
            stack[-1][-1].append(node)
        elif c == "[":
            node, i = _char_class(src, i)
            stack[-1][-1].append(node)
        else:
            m = _NAME.match(src, i)
            if not m:
                raise ValueError(f"GBNF: unexpected {src[i:i + 20]!r}")
            stack[-1][-1].append(Node("ref", text=m.group()))
            i = m.end()
    if len(stack) != 1:
        raise ValueError(f"GBNF: unbalanced parentheses in {src[:60]!r}")
    return close(stack[0])


def _repeat_bounds(src: str, i: int) -> tuple[tuple[int, int | None], int]:
    """((lo, hi), next index) of the repetition operator at ``src[i]``: ``?``, ``*``,
    ``+``, ``{n}``, ``{n,}`` or ``{n,m}`` (hi None: unbounded)."""
    c = src[i]
    if c == "{":
        end = src.index("}", i)
        lo, comma, hi = src[i + 1:end].partition(",")
        bounds = ((int(lo), int(hi) if hi.strip() else None) if comma
                  else (int(lo), int(lo)))
        return bounds, end + 1
    return {"?": (0, 1), "*": (0, None), "+": (1, None)}[c], i + 1


def _literal(src: str, i: int) -> tuple[Node, int]:
    """(a ``lit`` Node, next index) of the quoted GBNF string opening at ``src[i]``."""
    i += 1
    chars = []
    while src[i] != '"':
        cp, i = _char(src, i)
        chars.append(chr(cp))
    return Node("lit", text="".join(chars)), i + 1


def _char_class(src: str, i: int) -> tuple[Node, int]:
    """(a ``class`` Node of code point ranges, next index) of the GBNF character class
    (``[...]`` or negated ``[^...]``) opening at ``src[i]``."""
    i += 1
    negated = src[i] == "^"
    i += negated
    ranges = []
    while src[i] != "]":
        lo_cp, i = _char(src, i)
        hi_cp = lo_cp
        if src[i] == "-" and src[i + 1] != "]":
            hi_cp, i = _char(src, i + 1)
        ranges.append((lo_cp, hi_cp))
    return Node("class", ranges=tuple(ranges), negated=negated), i + 1


def parse_gbnf(gbnf: str) -> dict[str, Node]:
    """Parse a grammar written one rule per line (``name ::= body``) into {name: Node}.

    Raises:
        ValueError: on syntax outside the subset llama-cpp-python's converter writes.
    """
    rules = {}
    for line in gbnf.splitlines():
        name, sep, body = line.partition("::=")
        if sep:
            rules[name.strip()] = _parse_body(body)
    return rules


def postorder(node: Node) -> list[Node]:
    """``node`` and everything under it, children before parents, without recursion."""
    out, todo = [], [(node, False)]
    while todo:
        current, expanded = todo.pop()
        if expanded:
            out.append(current)
        else:
            todo.append((current, True))
            todo.extend((child, False) for child in reversed(current.items))
    return out


def _utf8_len(cp: int) -> int:
    return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


def max_reply_bytes(gbnf: str, start: str = "root") -> float:
    """The length in UTF-8 bytes of the longest text ``gbnf`` can produce from ``start``
    (``math.inf`` when unbounded: ``*``, ``+`` or recursion)."""
    rules = parse_gbnf(gbnf)
    sizes: dict[str, float] = {}
    visiting: set[str] = set()

    def rule_size(name: str) -> float:
        if name in visiting:  # a cycle: unbounded
            return math.inf
        if name not in sizes:
            visiting.add(name)
            sizes[name] = node_size(rules[name])
            visiting.discard(name)
        return sizes[name]

    def node_size(root: Node) -> float:
        done: dict[int, float] = {}
        for node in postorder(root):
            kids = [done[id(k)] for k in node.items]
            if node.kind == "lit":
                v = len(node.text.encode("utf-8"))
            elif node.kind == "class":
                v = 4 if node.negated else max(_utf8_len(hi) for _, hi in node.ranges)
            elif node.kind == "ref":
                v = rule_size(node.text)
            elif node.kind == "seq":
                v = sum(kids)
            elif node.kind == "alt":
                v = max(kids)
            elif node.hi is None:
                v = math.inf if kids[0] else 0
            else:
                v = kids[0] * node.hi
            done[id(node)] = v
        return done[id(root)]

    return rule_size(start)


def bound_strings_in_bytes(gbnf: str) -> str:
    """Rewrite each bounded string rule of llama-cpp-python's output (at most N
    characters, at least 0 or 1) to at most N bytes of UTF-8 (see the module doc). Other
    rules are kept as they are."""
    out, extra = [], {}
    for line in gbnf.splitlines():
        name, sep, body = line.partition(" ::= ")
        m = _STRING_RULE.match(body.strip()) if sep else None
        if m:
            chars = m.group("chars")
            most = len(re.findall(r"\bchar\b", chars))
            least = len(re.findall(r"\bchar\b", chars.split("(")[0]))
            if least <= 1 and re.sub(r"[\s()?]", "", chars) == "char" * most:
                line = f'{name} ::= "\\"" utf8-{least}-{most} "\\"" space'
                for k in range(most + 1):  # utf8-0-k: a string tail of at most k bytes
                    parts = [f"utf8-char{w} utf8-0-{k - w}" for w in BYTE_CLASSES if w <= k]
                    extra[f"utf8-0-{k}"] = " | ".join([*parts, '""'])
                if least == 1:
                    extra[f"utf8-1-{most}"] = " | ".join(
                        f"utf8-char{w} utf8-0-{most - w}" for w in BYTE_CLASSES if w <= most)
        out.append(line)
    if extra:
        extra.update({f"utf8-char{w}": cls for w, cls in BYTE_CLASSES.items()})
    return "\n".join(out + [f"{k} ::= {v}" for k, v in sorted(extra.items())]) + "\n"


def _json_schema_to_gbnf(schema_json: str) -> str:
    """llama-cpp-python's ``json_schema_to_gbnf`` of ``schema_json``, with backslashes
    escaped in its literals. Its converter escapes carriage returns, line feeds and
    quotes in a literal but not the backslash, so a JSON string holding a quote (an
    option such as ``William" Bill" Cruickshanks``, JSON ``\\"``) came out as
    ``\\\\"``: an escaped backslash, then the literal's end, and a grammar that fails to
    parse (a community_reports failure on the 2Wiki slice) or, in llama.cpp's lenient
    parser, one that no longer asks for valid JSON. The converter reads its escape table
    at each call, so adding the backslash to it is the whole fix."""
    from llama_cpp import llama_grammar

    if "\\" not in llama_grammar.GRAMMAR_LITERAL_ESCAPES:
        llama_grammar.GRAMMAR_LITERAL_ESCAPE_RE = re.compile(r'[\r\n"\\]')
        llama_grammar.GRAMMAR_LITERAL_ESCAPES = {
            **llama_grammar.GRAMMAR_LITERAL_ESCAPES, "\\": "\\\\"}
    return llama_grammar.json_schema_to_gbnf(schema_json)


@functools.lru_cache(maxsize=256)
def _grammar(schema_json: str) -> str:
    return bound_strings_in_bytes(_json_schema_to_gbnf(schema_json))


@functools.lru_cache(maxsize=256)
def _char_grammar(schema_json: str) -> str:
    return _json_schema_to_gbnf(schema_json)


def char_grammar(schema: dict[str, Any]) -> str:
    """llama-cpp-python's own GBNF of ``schema``, strings bounded in characters: the
    grammar a model server builds when it is sent the schema (llama-cpp-python's and
    llama.cpp's servers convert it the same way; any converter bounds ``maxLength`` in
    characters, as JSON Schema defines it)."""
    return _char_grammar(json.dumps(schema))


def json_grammar(schema: dict[str, Any]) -> str:
    """The GBNF that constrains a reply to ``schema`` (see the module doc). Property order
    is kept: it is the order the model writes them in."""
    return _grammar(json.dumps(schema))


def reply_token_bound(schema: dict[str, Any]) -> int | None:
    """Return the most tokens any reply constrained to ``schema`` can take, or None when
    the schema is unbounded (an array without ``maxItems``, a string without ``enum`` or
    ``maxLength``).

    The bound is the longest text, in UTF-8 bytes, that the reply's grammar
    (:func:`kgloom.llm.grammar.json_grammar`, where each string holds at most ``maxLength``
    bytes) can produce: every token is at least one byte, so used as ``max_tokens`` no
    grammar-valid reply is ever cut, whatever its characters (emoji, CJK, combining
    marks or ``\\uXXXX`` escapes). See :mod:`kgloom.llm.grammar`.
    """
    return _reply_token_bound(json.dumps(schema))


@functools.lru_cache(maxsize=256)
def _reply_token_bound(schema_json: str) -> int | None:
    """:func:`reply_token_bound` of a schema's JSON, remembered: an extraction unit asks
    it twice of the same per-unit schema (its prompt budget and its call), each time
    parsing the grammar (about 3 ms)."""
    size = max_reply_bytes(_grammar(schema_json))
    return None if size == float("inf") else int(size)


def server_reply_token_bound(schema: dict[str, Any]) -> int | None:
    """Return the most tokens any reply can take when a model server builds the grammar
    from ``schema`` itself (strings of at most ``maxLength`` characters), or None when
    the schema is unbounded.

    Such a grammar counts characters, not bytes, so a string may hold ``maxLength``
    emoji (4 bytes each) or ``\\uXXXX`` escapes (6 bytes): the bound is the longest
    text of :func:`kgloom.llm.grammar.char_grammar` in UTF-8 bytes, at least one byte per
    token. It is :func:`reply_token_bound` for ASCII-only replies and up to 6x it for
    others; :class:`kgloom.llm.http.OpenAIChatBackend` sends it as ``max_tokens``.
    """
    size = max_reply_bytes(char_grammar(schema))
    return None if size == float("inf") else int(size)
