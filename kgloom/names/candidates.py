"""Candidate entity names of a text unit, for any script (no LLM, no Dagster): a kernel
that extraction, grounding and query linking share.

The extraction prompt asks the model to type a closed list of names taken from the
unit's own text, so what this module finds bounds what the graph can hold. Three
sources, chosen per script of each text unit (:func:`scripts_of`) by the setting
``candidate_source`` (``auto`` picks per script; see :data:`AUTO_SOURCE`):

- ``proper_names`` (cased scripts: Latin, Greek, Cyrillic, Armenian, ...): runs of
  capitalized, all-caps or mixed-case words (letters by Unicode category, with the
  ``regex`` package), joined by name particles (``of``, ``van``, ``de``, ``al-`` ...),
  led by honorifics or initials, followed by numerals (``Apollo 11``, ``Harvard Mark I``),
  and quoted titles. Sentence-opening common words and shouted headings are told apart
  from names by corpus statistics (:func:`word_counts`). In inflected languages
  (:mod:`kgloom.names.morphology`) a capitalized adjective takes its lower-case head
  noun along (``Казанском университете``, ``Karlově univerzitě``), and two names that
  only stand side by side (``В Москве Толстой купил``: a place, then a person) are
  split.
- ``segmenter`` (Chinese: jieba's part-of-speech tags; Japanese: janome's): runs of
  nouns holding a proper-noun tag, plus quoted titles (《…》, 『…』, 「…」).
- ``ngram`` (any script without letter case): character n-grams that recur in the
  corpus, maximal and not led or ended by the corpus's most frequent characters.

A fourth source, ``open`` (the model proposes names, kept only when found verbatim in the
unit), needs the LLM and lives in :mod:`kgloom.extraction.extract`. The type cues of a found
name are extraction's (:mod:`kgloom.extraction.type_cues`).

Every candidate is a substring of the unit's text, so names stay grounded.
"""

from __future__ import annotations

import functools
import itertools
import logging
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import regex

if TYPE_CHECKING:
    from janome.tokenizer import Token

from kgloom.names.morphology import is_adjective, is_form_of, proper_type
from kgloom.names.normalize import MAX_NAME_CHARS, normalize_for_match

MAX_NAME_WORDS = 6  # "Ghost of Christmas Yet to Come"; longer spans are run-on headings
TO_SPAN_MIN_COUNT = 3  # corpus occurrences (overlaps count twice) to keep "X to Y" whole
NGRAM_MIN_COUNT = 2  # corpus occurrences of a character n-gram to be a candidate
NGRAM_SIZES = range(2, 7)
NGRAM_FUNCTION_CHARS = 30  # the corpus's most frequent characters never lead or end a name
SOURCES = ("auto", "proper_names", "segmenter", "ngram", "open")  # setting candidate_source
MAX_CANDIDATES = 24  # names classified per unit (~6 output tokens each); most frequent kept

# Scripts without letter case, as Unicode script property names of the `regex` module.
CASELESS_SCRIPTS = ("Han", "Hiragana", "Katakana", "Hangul", "Thai", "Lao", "Khmer",
                    "Myanmar", "Arabic", "Hebrew", "Devanagari", "Bengali", "Tamil",
                    "Telugu", "Kannada", "Malayalam", "Gujarati", "Gurmukhi", "Sinhala",
                    "Ethiopic", "Tibetan", "Georgian")
# What ``auto`` uses per script group of :func:`scripts_of`, chosen by the measurements
# of bench/bench_multilingual.py (README "Extraction for any script").
AUTO_SOURCE = {"cased": "proper_names", "zh": "segmenter", "ja": "segmenter",
               "caseless": "ngram"}

# --- tokens --------------------------------------------------------------------------
_L = r"\p{L}\p{M}*"
# "U.S." style initialisms, else a word of letters/digits with inner ' ’ - joints; a
# hyphen followed by spaces or a line break and a capital joins too: "Solms- Baruth",
# "Jean- Paul" (how the 2Wiki passages write every hyphen) and "Saxe-\nCoburg" (a
# hyphenated line break), one word as "Saxe-Coburg" is
_WORD = regex.compile(
    r"(?:\p{Lu}\p{M}*\.){2,}"
    r"|[\p{L}\p{N}][\p{L}\p{M}\p{N}]*(?:['’\-‐][\p{L}\p{N}][\p{L}\p{M}\p{N}]*"
    r"|[\-‐][ \t]*\n?[ \t]*\p{Lu}[\p{L}\p{M}\p{N}]*)*")
ROMAN_NUMERAL = regex.compile(r"(?:X{0,3})(?:IX|IV|V?I{0,3})")
HONORIFICS = frozenset("""Mr Mrs Ms Miss Dr St Sir Lady Master Madame Mme Mlle Mx Prof Rev
Fr Sr Jr Hr Frau Herr Dame Lord Mgr Msgr Gen Col Capt Lt Sgt Cpl Gov Sen Rep Hon Pres""".split())
_ABBREVIATIONS = frozenset({"Mr", "Mrs", "Ms", "Dr", "St", "Mme", "Mlle", "Prof", "Rev", "Fr",
                            "Sr", "Jr", "Hr", "Mgr", "Msgr", "Gen", "Col", "Capt", "Lt", "Sgt",
                            "Cpl", "Gov", "Sen", "Rep", "Hon", "Pres", "Mx"})
# lower-case words that may stand inside a name between two name words
_PARTICLES = frozenset("""of the to de del della dei degli di da das dos do du des van von
der den ter te zu zum zur am an im la le les y e al el bin ibn bint ben av af mac ni
nic ap ua""".split())
NAME_PARTICLES = _PARTICLES  # the words that join the parts of a name, for other modules
# a particle that may only follow "of": "Bank of the United States"
_AFTER_OF_ONLY = frozenset({"the"})
# Function words of the languages of the test suite and their neighbours: a capitalized
# one opens a sentence or a quote, it names nothing (Scrooge "said", "Perhaps" ...).
STOPWORDS = frozenset("""a an and as at but by for from he her here his how i if in is it
its let me my no not now o of oh on or our she so that the their then there these they this
those thus to up upon we what when where which while who why will with yes yet you your
said says god good come well ah ha alas hallo hello bah hush pooh after before also
although because during once since
though until unless whether every each some any all both many most much more other such
only very just even still again never always often perhaps however therefore meanwhile
der die das den dem des ein eine einen einem einer eines und oder aber doch im am zum zur
vom beim ins er sie es wir ihr ich du mit nach bei seit von aus auf für über unter vor
hinter neben zwischen durch gegen ohne um wie wo wann warum was wer nicht auch noch nur
schon sehr dann dort heute hier da als wenn weil dass ob so
le la les un une des du et ou mais donc car ni en au aux ce cet cette ces il elle ils
elles nous vous je tu on qui que quoi dont où dans sur sous avec sans pour par chez
vers son sa ses leur leurs mon ma mes ton ta tes après avant pendant depuis puis aussi
très plus moins ne pas c est à
el los las unos unas y o pero con sin por para según desde hasta
il lo gli uno una e ma che non per tra fra
een het en maar niet ook bij voor naar
w we z ze na do od o u i a oraz lub ale że jak gdy gdzie kiedy który która które jej jego
ich jest był była było są się dla przez pod nad przed po przy bez też także dziś tam
ponieważ potem później jednak gdyż więc
v ve k ke s se na do od o u i a ale že jak když kde který která které je byl byla bylo
jsou pro při bez také dnes tam
january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday januar februar märz juni juli
oktober dezember montag dienstag mittwoch donnerstag freitag samstag sonntag
в во на с со к ко о об от до по за из под над при без для и а но или что как когда где
который которая которое он она оно они мы вы я ты его её их это этот эта эти тот та те
не ни же ли бы уже ещё тоже также сегодня там тут здесь после перед во время""".split())

# ranks and offices that lead a name without being part of it
RANKS = frozenset("""Prince Princess King Queen Duke Duchess Count Countess Earl Baron
Baroness Emperor Empress Pope Saint Bishop Archbishop Cardinal Sultan Emir Tsar Czar
Chancellor President General Admiral Captain Colonel Professor Rev Sheikh Rabbi Imam""".split())
# ", Countess of Burgundy", ", 2nd Earl of Portsmouth", ", King of Italy"
_APPOSITIVE_TITLE = regex.compile(
    r",\s+(?:\d+(?:st|nd|rd|th)\s+)?(\p{Lu}[\p{L}\p{M}\-]*)\s+of\s+(?:the\s+)?"
    r"\p{Lu}[\p{L}\p{M}\-]*(?:[\s\-]\p{Lu}[\p{L}\p{M}\-]*)*")
_TITLE_HEADS = RANKS | {"Margrave", "Landgrave", "Elector", "Viscount", "Marquess", "Lord",
                        "Lady"}  # what may head it; or an office by the corpus (_office)
# articles that open titles of works ("The Private Life of Helen of Troy")
_TITLE_ARTICLES = frozenset({"The", "A", "An", "Der", "Die", "Das", "Le", "La", "Les", "El",
                             "Los", "Las", "Il", "Lo"})
_OPEN_QUOTES = "\"“„«‹‘'「『《〈【"
_QUOTE_PAIRS = {"\"": "\"", "“": "”", "„": "“", "«": "»", "‹": "›", "‘": "’", "「": "」",
                "『": "』", "《": "》", "〈": "〉", "【": "】"}
_QUOTED = regex.compile("|".join(
    rf"{regex.escape(a)}\s?([^{regex.escape(a + b)}\n.,;:!?。，、！？；：]"
    rf"{{1,{MAX_NAME_CHARS}}}){regex.escape(b)}"
    for a, b in _QUOTE_PAIRS.items() if a != "'" and a != "‘"))
_SENTENCE_END_CHARS = ".!?…。！？"
_CLOSERS = "\"'”’»›)]」』》〉】"
_POSSESSIVE = regex.compile(r"['’]s$")
# what follows the subject of a definition: "(born 1950)", "is a", "war ein", "est un" ...
# or an apposition ("Belle, a comely matron"), or an address in dialogue ("'Belle,' said";
# a comma only: "'Humbug!' said" and "'Eh?' said" are exclamations, not addresses)
_DEFINED = regex.compile(r"\s*\(|\s+(?:is|was|are|were|ist|war|sind|waren|est|était|sont|es|"
                         r"fue|era|è|fu|jest|był|była|było|je|byl|byla|bylo|является|был|"
                         r"была|было)\b|,\s+(?:a|an|wife|husband|son|daughter|father|"
                         r"mother|brother|sister)\s|,['’\"”]\s+(?:said|cried|replied|"
                         r"asked|returned|exclaimed)\b")
# the address in dialogue alone: evidence of a name, but no definition of a title
_ADDRESSED = regex.compile(r",['’\"”]\s+(?:said|cried|replied|asked|returned|exclaimed)\b")
# a drawn-out sound written with hyphens ("Scro-o-o-o-oge", "No-o-o"): no name as written
_DRAWN_OUT = regex.compile(r"(?:[\p{L}\p{M}]-){3,}")
_EXCLAIMED = regex.compile(r"[!?¡¿]")
# Determiners and possessives that open an English noun phrase: a capitalized word between
# one of them and a lower-case word is a modifier ("a Welsh wig", "his Christian name").
_ATTRIBUTIVE_BEFORE = frozenset("""a an another any each every her his its my no our some
their these this those your""".split())
ATTRIBUTIVE_SHARE = 0.7  # share of a word's lone uses that run into a lower-case content word
ATTRIBUTIVE_DETERMINED = 0.25  # ... and that also follow a determiner
# between a determiner and a modifier: lower-case words, numbers, ordinals ("a 1957
# Mexican film", "a 17th century Persian architect"), at most this many
ATTRIBUTIVE_REACH = 3
MODIFIER_MAX_WORDS = 2  # capitalized words of a modifier ("South Korean", "West German")
# a title held in turn ("John Boyle, 15th Earl of Cork"): "Head of X" written after a
# name and a comma or after an ordinal; see :func:`_office`
_OFFICE_USE = regex.compile(
    r"(?:\p{Lu}[\p{L}\p{M}.'’\-]*,[ \t]+|\b\d+(?:st|nd|rd|th)[ \t]+)(?:the[ \t]+)?"
    r"(\p{Lu}[\p{L}\p{M}\-]*)[ \t]+of[ \t]+(?:the[ \t]+)?\p{Lu}")
_OF_USE = regex.compile(r"(?<![\p{L}\p{M}])(\p{Lu}[\p{L}\p{M}\-]*)[ \t]+of[ \t]+"
                        r"(?:the[ \t]+)?\p{Lu}")
# English determiners before a noun: a word mostly written after one is a class noun
# ("the Ghost"; :func:`_class_noun`, and entity resolution's ``common_words_of``)
DETERMINERS = _ATTRIBUTIVE_BEFORE | {"the", "that"}
CLASS_NOUN_SHARE = 0.5  # of a word's capitalized uses after a determiner (_class_noun)
OFFICE_MIN_USES = 3  # appositive or ordinal uses of a head word before it is an office
OFFICE_SHARE = 0.2  # ... and their share of all its "Head of X" uses


# --- all-caps words: acronyms or shouting? ---------------------------------------------
# An all-caps word is a name only with evidence (:func:`_acronym_evidence`). These are
# ordinary English words, SQL, programming and markup keywords, data formats and the
# vocabulary of instructions and prompt injection ("IGNORE ALL PREVIOUS INSTRUCTIONS",
# "SYSTEM", "DROP TABLE", "JSON", "PWNED"): shouted, they still name nothing. Collected
# by hand from common English, the SQL-92 reserved words, Python/JavaScript/C keywords
# and the injection strings of the OWASP LLM01 (prompt injection) examples.
_SHOUTED_WORDS = frozenset("""
about above access act action add admin administrator after again against agent ai alert
all allow alter always am analysis and answer any api app apply are as ask assistant at
attention auth authority avoid back backup bad be before begin below best block body bold
boss bot break bug build but by call cancel caps case cast catch change chat check child
class clean clear click close code column command comment commit confidential confirm
constraint content context continue control copy correct count create critical cursor
danger data database debug declare def default delete deny describe dev developer
disable distinct do done dont drop dump echo else enable end error escape eval exact
example except exec execute exit export false fetch field file filter final finally first
fix flag float for force foreign format free from full function get global go goal grant
group hack hacked hacker having header help hidden hide high hint html http https id if
ignore import important in index info inner input insert instruction instructions int
integer into is join json key kill last left let like limit list load lock log login
long low main make mandatory match max message method min mode model must name never
new next no node none not note notice now null number object of off ok okay on only open
operator or order out outer output override owned page pass password path pause payload
permission please plus post previous primary print private process prompt protocol
public pwn pwned pwnd query quote read real reboot record reference remember remove
repeat replace reply report request required reset respond response restart result
return reveal revoke right role rollback root row rule rules run safe save say schema
script secret security select send server session set shell show shutdown simulate
skip sql start state stop string sudo super system table task temp test text then this
to token tool top transaction true truncate trust try type union unique unlock unsafe
until update upload urgent use user value values var varchar verify very view void
warning when where while with write wrong xml yaml yes you your
""".split())
# Acronyms of widely known organisations, agencies, places and bodies: names without
# other evidence (each is the common short form of its English Wikipedia article title).
_KNOWN_ACRONYMS = frozenset("""
ABC ACLU AFL AIDS AMD ANC ASEAN BBC BMW BP CBS CDC CERN CIA CNN CNRS CSIRO DARPA DEA
DC DHS DNA DOJ EPA ESA EU FAO FBI FCC FDA FIFA FSB GCHQ GE GM HBO HIV HP HSBC IAEA IBM ICC ICJ
ICRC IEEE IETF ILO IMF INTERPOL IOC IRA IRS ISO ITU KGB MGM MI5 MI6 MIT MOMA NAACP NAFTA
NASA NATO NBA NBC NFL NHL NHS NIH NOAA NPR NRA NSA NTSB NYPD OECD OPEC OSCE PBS PLO RAF
RNA SEC SNCF SPD TSA TVA UAE UCLA UEFA UK UN UNDP UNESCO UNHCR UNICEF US USA USAF USSR
UPS VW WHO WTO WWF YMCA
""".split())
# the words before an acronym that use it as a name: "the UN", "director of DARPA"
_ACRONYM_BEFORE = regex.compile(r"(?:^|[^\p{L}\p{M}])(?:the|of|at|from|by|for|der|die|das|"
                                r"le|la|les|du|des|de)\s+$", regex.IGNORECASE)
# words an acronym's expansion may skip ("National Aeronautics and Space Administration")
_EXPANSION_SKIP = frozenset("of and for the on in to de des du la le et für und der".split())


def _expands(acronym: str, text: str) -> bool:
    """True when ``text`` holds a phrase of capitalized words whose initials spell
    ``acronym`` (2+ letters), skipping the function words of ``_EXPANSION_SKIP``:
    "United Nations Educational, Scientific and Cultural Organization" for UNESCO.

    The words of ``text`` are split once and each acronym's answer kept
    (:func:`_expansion_index`): a community report's grounding reads one text of
    thousands of member titles, and splitting it again for each of its all-caps words
    took 15 minutes of the 2Wiki pool's report stage."""
    letters = acronym.upper()
    if len(letters) < 2 or not letters.isalpha():
        return False
    words, starts, known = _expansion_index(text)
    if letters not in known:
        known[letters] = any(_spells(words, i, letters) for i in starts.get(letters[0], ()))
    return known[letters]


@functools.lru_cache(maxsize=16)
def _expansion_index(text: str) -> tuple[list[str], dict[str, list[int]], dict[str, bool]]:
    """The words of ``text``; the positions of its words that are not all caps, by
    first character (where an expansion may start); and an empty dict in which
    :func:`_expands` keeps its answers for ``text``. Kept for the last 16 texts."""
    words = [m.group(0) for m in _WORD.finditer(text)]
    starts: dict[str, list[int]] = {}
    for i, w in enumerate(words):
        if not w.isupper():
            starts.setdefault(w[:1], []).append(i)
    return words, starts, {}


def _spells(words: list[str], i: int, letters: str) -> bool:
    """Do the capitalized words from ``words[i]`` on (function words of
    ``_EXPANSION_SKIP`` in lower case skipped) start with ``letters``, one each?"""
    k, j = 1, i + 1
    while k < len(letters) and j < len(words):
        nxt = words[j]
        if nxt.lower() in _EXPANSION_SKIP and nxt[:1].islower():
            j += 1
            continue
        if nxt[:1] != letters[k] or not nxt[:1].isupper() or nxt.isupper():
            break
        k, j = k + 1, j + 1
    return k == len(letters)


def acronym_evidence(word: str, text: str, start: int, stats: Counter | None) -> bool:
    """Is all-caps word ``word`` (at offset ``start`` of ``text``) a name? Only with
    evidence, in order:

    1. its shape: a digit or inner periods (``H5N1``, ``F-16``, ``COVID-19``, ``U.S.``);
    2. it is a widely known acronym (``_KNOWN_ACRONYMS``: NASA, WHO, UNESCO, DARPA ...);
    3. it expands a phrase of capitalized words of the unit or of the corpus
       (:func:`_expands`; ``("acronym", word)`` in ``stats``, see :func:`word_counts`);
    4. it is not an ordinary word (``STOPWORDS``, ``_SHOUTED_WORDS``: English, SQL,
       code, formats, prompt injection; nor written in lower case in the corpus), and
       the corpus writes it capitalized as a name mid-sentence, or it is used as a name
       here: possessive ("KGLM's"), or after "the"/"of"/"at"/"from"/"by"/"for".

    So shouted instructions and code (IGNORE, SYSTEM, DROP TABLE, JSON, PWNED) stay text.
    """
    core = _POSSESSIVE.sub("", word)
    if any(c.isdigit() for c in core) or "." in core.strip("."):
        return True
    if core in _KNOWN_ACRONYMS:
        return True
    if _expands(core, text) or (stats is not None and stats[("acronym", core)]):
        return True
    low = core.lower()
    if low in STOPWORDS or low in _SHOUTED_WORDS or len(core) < 2:
        return False
    if stats is not None and stats[low]:
        return False  # written as an ordinary word elsewhere in the corpus
    if stats is not None and stats[("mid", core.capitalize())]:
        return True
    return core != word or bool(_ACRONYM_BEFORE.search(text, 0, start))


def caps_name_ok(name: str, text: str, stats: Counter | None = None) -> bool:
    """False when ``name`` is made only of all-caps words and one of them has no
    :func:`acronym_evidence` in ``text`` (``PWNED``, ``DROP TABLE``): the same rule for a
    name from any source, e.g. one the model proposes (``candidate_source=open``)."""
    toks = _tokens(name)
    if not toks or any(t.kind not in ("upper", "initial") for t in toks):
        return True
    at = max(text.find(name), 0)
    return all(t.kind != "upper" or acronym_evidence(t.text, text, at + t.start, stats)
               for t in toks)


def _shouted_word(tok, text: str, stats: Counter | None) -> bool:
    """True when all-caps token ``tok`` is an ordinary word shouted (a stop word, one of
    ``_SHOUTED_WORDS``, or written in lower case in the corpus) and no acronym by
    :func:`acronym_evidence`'s first three tests (shape, known acronym, expansion)."""
    core = _POSSESSIVE.sub("", tok.text)
    low = core.lower()
    ordinary = low in STOPWORDS or low in _SHOUTED_WORDS or bool(stats is not None
                                                                and stats[low])
    return ordinary and not (ROMAN_NUMERAL.fullmatch(core) or any(c.isdigit() for c in core)
                             or core in _KNOWN_ACRONYMS or _expands(core, text))


# --- scripts -------------------------------------------------------------------------
_SCRIPT_RES = {s: regex.compile(rf"\p{{Script={s}}}") for s in CASELESS_SCRIPTS}
_CASED_LETTER = regex.compile(r"[\p{Lu}\p{Ll}\p{Lt}]")
_KANA = regex.compile(r"[\p{Script=Hiragana}\p{Script=Katakana}]")
_HAN = regex.compile(r"\p{Script=Han}")


def scripts_of(text: str) -> dict[str, int]:
    """Return the script groups of ``text`` with their letter counts.

    Groups: ``cased`` (letters with case: Latin, Greek, Cyrillic, Armenian, ...), ``ja``
    (Han with any kana: Japanese), ``zh`` (Han, no kana), ``caseless`` (every other
    letter: Hangul, Thai, Arabic, Hebrew, Devanagari, ...). Combining marks are not
    letters; digits and punctuation count nowhere. A text with no letter gives ``{}``.
    """
    out: Counter[str] = Counter()
    kana = len(_KANA.findall(text))
    han = len(_HAN.findall(text))
    cased = len(_CASED_LETTER.findall(text))
    if cased:
        out["cased"] = cased
    if han or kana:
        out["ja" if kana else "zh"] = han + kana
    letters = len(regex.findall(r"\p{L}", text))
    other = letters - cased - han - kana
    if other > 0:
        out["caseless"] = other
    return dict(out)


# --- corpus statistics ---------------------------------------------------------------
@dataclass(frozen=True)
class _Tok:
    start: int
    end: int
    text: str
    kind: str  # cap | upper | mixed | initial | num | lower


def _kind(w: str) -> str:
    letters = [c for c in w if c.isalpha()]
    if not letters:
        return "num" if w.isdigit() and len(w) <= 3 else "other"
    first = letters[0]
    has_lower = any(c.islower() for c in letters)
    has_upper = any(c.isupper() or unicodedata.category(c) == "Lt" for c in letters)
    if not has_lower and has_upper:
        if len(letters) == 1 and not any(c.isdigit() for c in w):
            return "initial"
        return "upper"
    if first.isupper() or unicodedata.category(first) == "Lt":
        return "cap"
    if has_upper:
        return "mixed"  # eBay, iPhone, al-Rahman
    return "lower" if first.islower() else "other"


def _tokens(text: str) -> list[_Tok]:
    return [_Tok(m.start(), m.end(), m.group(0), _kind(m.group(0)))
            for m in _WORD.finditer(text)]


# A line laid out as a table row that points elsewhere: text, a column gap (3+ spaces, a
# tab, or dot leaders), then a locator at the line's end (a page number or range, a roman
# numeral, or one word such as "_Frontispiece_"): the rows of a table of contents, a list
# of illustrations or an index, in any language. Prose never sets a word that far apart.
_LOCATOR = regex.compile(r"\p{N}+(?:[-–]\p{N}+)?|[ivxlcdmIVXLCDM]+|_?[\p{L}\p{M}]{1,20}_?")
_GAP_CHARS = " \t.…"


def is_locator_line(line: str) -> bool:
    """Is ``line`` (no line break) a locator line: text, a column gap (3+ spaces, a tab,
    3+ dots of leaders, or an ellipsis), then a locator at its end (:data:`_LOCATOR`: a
    page number or range, a roman numeral, or one word such as "_Frontispiece_")? Read
    from the end in linear time: a line of thousands of dots costs no more than its
    length."""
    body = line.rstrip(" \t")
    i = len(body)
    while i > 0 and body[i - 1] not in _GAP_CHARS:
        i -= 1
    if not _LOCATOR.fullmatch(body, i):
        return False
    before = body[:i]
    core = before.rstrip(_GAP_CHARS)
    gap = before[len(core):]
    return bool(core.strip()) and ("   " in gap or "\t" in gap or "…" in gap
                                   or gap.count(".") >= 3)


def mask_locator_lines(text: str) -> str:
    """``text`` with every locator line (:func:`is_locator_line`: a row of a table of
    contents, a list of illustrations or an index) blanked to spaces, so offsets stay
    and no name is taken from, or runs into, front matter such as "Heading to Stave One
    ....... 3". Line breaks are kept. Returns ``text`` itself when no line is one."""
    if "   " not in text and "\t" not in text and "..." not in text and "…" not in text:
        return text  # the common case, without reading line by line
    lines = text.split("\n")
    masked = [" " * len(line) if is_locator_line(line) else line for line in lines]
    return text if masked == lines else "\n".join(masked)


def _sentence_start(text: str, toks: list[_Tok], i: int) -> bool:
    """True when token ``i`` opens a sentence, a line after a blank line, or a quote (a
    quotation mark after a space, a line break or a dash: "said, 'Good-morning, sir!'")."""
    j = toks[i].start - 1
    if j >= 0 and text[j] in _OPEN_QUOTES and (j == 0 or text[j - 1].isspace()
                                               or text[j - 1] in "([—–-"):
        return True
    while j >= 0 and (text[j].isspace() or text[j] in _OPEN_QUOTES or text[j] in "([¿¡—–-"):
        if text[j] == "\n" and j > 0 and text[:j].rstrip(" \t").endswith("\n"):
            return True  # a paragraph start
        j -= 1
    if j < 0:
        return True
    while j >= 0 and text[j] in _CLOSERS:
        j -= 1
    if j >= 0 and text[j] in ":;":
        return True
    if j < 0 or text[j] not in _SENTENCE_END_CHARS:
        return False
    if text[j] == "." and i > 0 and toks[i - 1].end == j:
        prev = toks[i - 1]
        if prev.text in _ABBREVIATIONS or prev.kind == "initial":
            return False
    return True


def _shouted(text: str, toks: list[_Tok], i: int) -> bool:
    """True when all-caps token ``i`` is part of a heading or shouting, not an acronym:
    its line has no lower-case letter, or it stands in a run of 3+ all-caps words."""
    t = toks[i]
    a = text.rfind("\n", 0, t.start) + 1
    b = text.find("\n", t.end)
    line = text[a: b if b >= 0 else len(text)]
    if not any(c.islower() for c in line):
        return True
    run = 1
    for step in (-1, 1):
        k = i + step
        while 0 <= k < len(toks) and toks[k].kind in ("upper", "initial") \
                and "\n\n" not in text[min(toks[k].end, t.end):max(toks[k].start, t.start)]:
            run += 1
            k += step
    return run >= 3


def word_counts(texts: list[str]) -> Counter:
    """Return the corpus statistics :func:`candidate_names` decides with.

    Keys: each word as written (case kept) -> occurrences; ``("mid", word)`` ->
    occurrences of a capitalized word that does not open a sentence (so most likely a
    name, as "Scrooge" in "said Scrooge"); ``("to", span)`` -> occurrences of each name
    span joined by "to" (``Ghost of Christmas Yet to Come``); ``("ng", gram)`` ->
    occurrences of each character n-gram (sizes :data:`NGRAM_SIZES`) of caseless-script
    runs, and ``("ch", char)`` of each caseless character (for the ``ngram`` source).
    ``("name", key)`` -> text units holding each multi-word proper name (key:
    :func:`normalize_for_match`), so the same name written in lower case or shouted in
    another unit (``acme corp``, ``ACME CORP``) is found there too. ``("acronym", word)``
    -> units where all-caps ``word`` expands a capitalized phrase (evidence that it is a
    name in every unit; :func:`acronym_evidence`). ``("pair", a, b)`` -> occurrences of
    capitalized word ``a`` one space before capitalized word ``b``. ``("excl", word)`` ->
    occurrences of a
    capitalized word directly before "!" or "?" (``("midexcl", word)``: those of them not
    opening a sentence), for :func:`_interjection`. ``("solo", word)`` -> mid-sentence
    occurrences of a capitalized word with no capitalized word one gap
    (:func:`_one_gap`: spaces, at most one line break) before or after it (a one-word
    name or a modifier), or of a run of two (:func:`_count_lone_words`);
    ``("sololow", word)`` -> those followed, one gap on, by a lower-case word that is no
    function word (a head noun: "Dutch merchant", not "Laocoon of", "Founder was");
    ``("solodet", word)`` -> those of them that also follow a determiner
    (:data:`_ATTRIBUTIVE_BEFORE`, maybe across :data:`ATTRIBUTIVE_REACH` lower-case words
    or numbers), for :func:`_attributive`. ``("ofhead", word)`` ->
    occurrences of a capitalized ``word`` before "of" and a capital ("Earl of Cork");
    ``("office", word)`` -> those of them after a name and a comma or after an ordinal
    ("John Boyle, 15th Earl of Cork"), for :func:`_office`. ``("det", word)`` ->
    occurrences of a capitalized word right after a determiner ("the", "The",
    "this") and whitespace ("the Ghost", "the\nSpirit"), for :func:`_class_noun`.
    Counts include the overlap of consecutive text units; locator lines
    (:func:`mask_locator_lines`) are not counted.
    """
    counts: Counter = Counter()
    texts = [mask_locator_lines(t) for t in texts]
    for t in texts:
        toks = _tokens(t)
        counts.update(tok.text for tok in toks)
        mid = [i for i, tok in enumerate(toks)
               if tok.kind in ("cap", "mixed") and not _sentence_start(t, toks, i)]
        counts.update(("mid", toks[i].text) for i in mid)
        # a capitalized word right before "!" or "?": an exclamation ("Hurrah!", "Eh?")
        counts.update(("excl", tok.text) for tok in toks if tok.kind in ("cap", "mixed")
                      and _EXCLAIMED.match(t, tok.end))
        counts.update(("midexcl", toks[i].text) for i in mid if _EXCLAIMED.match(t, toks[i].end))
        _count_lone_words(t, toks, mid, counts)
        # capitalized words side by side ("Great Britain"): is the second ever alone?
        counts.update(("pair", a.text, b.text) for a, b in itertools.pairwise(toks)
                      if a.kind == "cap" and b.kind in ("cap", "mixed")
                      and t[a.end:b.start] == " ")
        counts.update(("to", _to_key(s)) for s in _spans(t, toks, None)
                      if any(x.text == "to" for x in s.toks))
        for run in CASELESS_RUN.findall(t):
            counts.update(("ch", c) for c in run)
            counts.update(("ng", run[a:a + n]) for n in NGRAM_SIZES
                          for a in range(len(run) - n + 1))
        counts.update(("acronym", tok.text) for tok in toks
                      if tok.kind == "upper" and _expands(tok.text, t))
        counts.update(("det", _POSSESSIVE.sub("", b.text)) for a, b in itertools.pairwise(toks)
                      if b.kind == "cap" and a.text.lower() in DETERMINERS
                      and t[a.end:b.start].isspace())
        counts.update(("office", m.group(1)) for m in _OFFICE_USE.finditer(t))
        counts.update(("ofhead", m.group(1)) for m in _OF_USE.finditer(t))
    for t in texts:
        counts.update({("name", normalize_for_match(n)) for n, _ in _proper_names(t, counts)
                       if len(n.split()) >= 2})
    return counts


def _count_lone_words(text: str, toks: list[_Tok], mid: list[int], counts: Counter) -> None:
    """Add the ``solo``, ``sololow`` and ``solodet`` counts of :func:`word_counts` for the
    mid-sentence capitalized tokens ``mid`` (indexes into ``toks``) of ``text``, and for
    each run of up to :data:`MODIFIER_MAX_WORDS` capitalized words one gap apart that
    one of them opens ("a South Korean actor": key "South Korean")."""
    def next_to(i: int, j: int, kinds: tuple[str, ...]) -> bool:
        """Is ``toks[j]`` of ``kinds``, one gap (:func:`_one_gap`) from ``toks[i]``?"""
        if not 0 <= j < len(toks) or toks[j].kind not in kinds:
            return False
        a, b = (toks[i], toks[j]) if i < j else (toks[j], toks[i])
        return _one_gap(text, a.end, b.start)

    named = ("cap", "mixed", "upper", "initial")
    for i in mid:
        if toks[i].kind != "cap" or next_to(i, i - 1, named):
            continue
        j = i  # the run of capitalized words one gap apart from i: "South Korean"
        while j + 1 - i < MODIFIER_MAX_WORDS and next_to(j, j + 1, ("cap",)):
            j += 1
        if next_to(j, j + 1, named):
            continue
        word = " ".join(t.text for t in toks[i:j + 1])
        counts[("solo", word)] += 1
        if next_to(j, j + 1, ("lower",)) and toks[j + 1].text not in STOPWORDS:
            counts[("sololow", word)] += 1
            if _determined(text, toks, i):
                counts[("solodet", word)] += 1


_GAP = regex.compile(r"[ \t]*\n?[ \t]*")


def _one_gap(text: str, a: int, b: int) -> bool:
    """Is ``text[a:b]`` the gap between two words of one line or of a hard-wrapped line
    (spaces, at most one line break: "a Gothic\nwindow")?"""
    return a < b and _GAP.fullmatch(text, a, b) is not None


def _determined(text: str, toks: list[_Tok], i: int) -> bool:
    """Does ``toks[i]`` end a noun phrase's opening: a determiner
    (:data:`_ATTRIBUTIVE_BEFORE`) before it, or across at most
    :data:`ATTRIBUTIVE_REACH` lower-case words that are no function words, numbers or
    ordinals, each one gap apart (:func:`_one_gap`) ("an American actor", "a 1957 Mexican film", "a
    famous Mexican singer", "a 17th century Persian architect"; not "is Mexican")?"""
    j = i - 1
    while j >= 0 and i - j <= ATTRIBUTIVE_REACH + 1 and _one_gap(text, toks[j].end,
                                                                  toks[j + 1].start):
        tok = toks[j]
        if tok.kind == "lower" and tok.text in _ATTRIBUTIVE_BEFORE:
            return True
        if not (tok.text.isdigit() or (tok.kind == "lower" and tok.text not in STOPWORDS)):
            return False
        j -= 1
    return False


_NON_SPACE = regex.compile(r"\S+")
_WORD_CHAR = regex.compile(r"[\p{L}\p{M}\p{N}]")


def _known_index(stats: Counter) -> dict[str, list[tuple[str, ...]]]:
    """The corpus's multi-word names (``("name", key)`` in ``stats``) by their first word:
    {first word: [the names' words, longest name first]}. Built once per corpus and kept
    on its own Counter."""
    index = getattr(stats, "_known_index", None)
    if index is None:
        index = {}
        keys = sorted((k[1] for k in stats if isinstance(k, tuple) and k[0] == "name"),
                      key=len, reverse=True)
        for key in keys:
            words = tuple(key.split())
            if len(words) >= 2:
                index.setdefault(words[0], []).append(words)
        stats._known_index = index  # pyright: ignore[reportAttributeAccessIssue]
    return index


def _word_end(chunk: str, word: str) -> int | None:
    """The end of ``chunk``'s prefix that case-folds to ``word`` and is not followed by a
    letter, mark or digit, or None."""
    fold = chunk.casefold()
    ends = [len(word)] if len(fold) == len(chunk) else range(1, min(len(word), len(chunk)) + 1)
    for k in ends:
        if chunk[:k].casefold() == word and (k == len(chunk)
                                             or not _WORD_CHAR.match(chunk, k)):
            return k
    return None


def _known_matches(text: str, index: dict[str, list[tuple[str, ...]]]
                   ) -> Iterator[tuple[int, int]]:
    """(start, end) of each name of ``index`` in ``text`` in any letter case, leftmost
    first, the longest name at a start, not overlapping: the matches of one
    case-insensitive alternation of the names (words joined by any whitespace, neither
    led nor followed by a letter, mark or digit), found word by word."""
    chunks = [(m.start(), m.group()) for m in _NON_SPACE.finditer(text)]
    i, resume = 0, 0
    while i < len(chunks):
        at, chunk = chunks[i]
        for o in range(resume, len(chunk)):
            if o and _WORD_CHAR.match(chunk, o - 1):
                continue  # a match is not led by a letter, mark or digit
            hit = None
            for words in index.get(chunk[o:].casefold(), ()):
                n = len(words)
                if i + n > len(chunks) or any(chunks[i + k][1].casefold() != words[k]
                                              for k in range(1, n - 1)):
                    continue
                end = _word_end(chunks[i + n - 1][1], words[-1])
                if end is not None:
                    hit = (i + n - 1, end)
                    break
            if hit:
                yield at + o, chunks[hit[0]][0] + hit[1]
                i, resume = hit
                break
        else:
            i, resume = i + 1, 0


def _known_names(text: str, stats: Counter | None) -> list[tuple[str, int]]:
    """Multi-word names of the corpus (``("name", key)`` in ``stats``) found in ``text``
    in any letter case, as written there."""
    if not stats:
        return []
    index = _known_index(stats)
    out = []
    for start, end in _known_matches(text, index) if index else ():
        surface = text[start:end]
        if surface != surface.lower() and surface != surface.upper():
            continue  # mixed case: the proper-name rules see it ("merry Christmas")
        a = text.rfind("\n", 0, start) + 1
        b = text.find("\n", end)
        if surface == surface.upper() and not any(
                c.islower() for c in text[a:b if b >= 0 else len(text)]):
            continue  # a shouted heading line
        out.append((" ".join(surface.split()), start))
    return out


# --- proper names (cased scripts) ----------------------------------------------------
@dataclass(frozen=True)
class _Span:
    toks: tuple[_Tok, ...]
    initial: bool  # the first token opens a sentence

    @property
    def text(self) -> str:
        return " ".join(t.text for t in self.toks)


def _name_token(text: str, toks: list[_Tok], i: int) -> bool:
    t = toks[i]
    if t.kind in ("cap", "mixed"):
        return True
    if t.kind == "upper":
        return not _shouted(text, toks, i)
    return False


def _gap_ok(text: str, a: _Tok, b: _Tok) -> bool:
    """May ``b`` continue a name ending with ``a``? Whitespace (no blank line) between
    them, or a period after an honorific, an abbreviation or an initial, then space."""
    gap = text[a.end:b.start]
    if gap[:1] == "." and (a.text in HONORIFICS or a.text in _ABBREVIATIONS
                           or (a.kind == "initial" and not (len(b.text) > 1
                                                           and b.text.lower() in STOPWORDS))):
        gap = gap[1:]
    return bool(gap) and gap.isspace() and gap.count("\n") < 2


def _spans(text: str, toks: list[_Tok], stats: Counter | None) -> list[_Span]:
    """Maximal name spans of ``text`` (see module doc), before any filtering."""
    out: list[_Span] = []
    i, n = 0, len(toks)

    def starts_name(k: int) -> bool:
        return _name_token(text, toks, k) or (
            toks[k].kind == "initial" and text[toks[k].end:toks[k].end + 1] == "."
            and k + 1 < n and _gap_ok(text, toks[k], toks[k + 1]) and starts_name(k + 1))

    while i < n:
        if not starts_name(i):
            i += 1
            continue
        last, j = i, i + 1
        while j < n and _gap_ok(text, toks[j - 1], toks[j]):
            t = toks[j]
            if starts_name(j):
                last, j = j, j + 1
                continue
            if last == j - 1 and toks[i].text not in HONORIFICS and (
                    t.kind == "num" or (t.kind in ("initial", "upper")
                                        and ROMAN_NUMERAL.fullmatch(t.text))):
                last, j = j, j + 1  # Apollo 11, Harvard Mark I, Theodred II
                continue
            if t.kind == "lower" and t.text in _PARTICLES:
                k = j
                while k < n and toks[k].kind == "lower" and toks[k].text in _PARTICLES \
                        and _gap_ok(text, toks[k - 1], toks[k]):
                    k += 1
                joined = [x.text for x in toks[j:k]]
                ok_seq = k - j <= 2 and all(
                    w not in _AFTER_OF_ONLY or (q > 0 and joined[q - 1] == "of")
                    for q, w in enumerate(joined))
                if ok_seq and k < n and _gap_ok(text, toks[k - 1], toks[k]) \
                        and starts_name(k):
                    last, j = k, k + 1
                    continue
            break
        if last + 1 < n and _lower_head(text, toks, last):
            last += 1  # "Казанском университете", "Karlova univerzita"
        out.append(_Span(tuple(toks[i:last + 1]), _sentence_start(text, toks, i)))
        i = last + 1
    return out


# Head nouns that inflected languages write in lower case after a capitalized adjective
# of a name (Russian, Ukrainian, Czech, Slovak orthography: "Казанский университет",
# "Крымская война", "Karlova univerzita", "Národní muzeum"), as dictionary forms.
_LOWER_HEADS = frozenset("""университет институт академия музей театр собор монастырь церковь
библиотека училище гимназия лицей завод банк вестник газета журнал война битва восстание
революция сражение улица площадь переулок проспект бульвар набережная шоссе река озеро море
океан остров полуостров залив пролив гора хребет область губерния уезд край район вокзал
станция кремль дворец усадьба
univerzita muzeum divadlo knihovna akademie katedrála chrám klášter válka bitva povstání
revoluce ulice náměstí třída nábřeží řeka jezero moře ostrov hora pohoří kraj okres
nádraží palác zámek""".split())
# endings of Czech and Slovak adjectives (Karlova, Národní, Václavské, Krymská, Karlově)
_LATIN_ADJECTIVE = regex.compile(r"(?:ý|á|é|í|ova|ovo|ovy|ově|ův|ou|ém|ého|ých|ní)$")


def _lower_head(text: str, toks: list[_Tok], last: int) -> bool:
    """May the lower-case token after ``toks[last]`` end the name? When it is a form of
    one of :data:`_LOWER_HEADS` and ``toks[last]`` is a capitalized adjective (pymorphy3
    for Cyrillic, Czech/Slovak adjective endings for Latin letters), with only spaces
    between them."""
    a, b = toks[last], toks[last + 1]
    if b.kind != "lower" or a.kind != "cap" or not _gap_ok(text, a, b):
        return False
    if not is_form_of(b.text, _LOWER_HEADS):
        return False
    return is_adjective(a.text) or bool(_LATIN_ADJECTIVE.search(a.text))


def _split_echoes(span: _Span) -> list[_Span]:
    """Split a span where a word follows itself ("Scrooge Scrooge, and sometimes
    Marley"; "New New York" is not a name either): an echo is one name said twice."""
    parts, cur = [], [span.toks[0]]
    for prev, t in itertools.pairwise(span.toks):
        if t.text == prev.text and t.kind != "num":
            parts.append(cur)
            cur = []
        cur.append(t)
    parts.append(cur)
    return [_Span(tuple(p), span.initial and q == 0) for q, p in enumerate(parts)]


def _split_kinds(span: _Span) -> list[_Span]:
    """Split a span where a word the morphology calls a place meets one it calls a
    person (``Москве Толстой`` in "В Москве Толстой купил дом"; see
    :func:`kgloom.names.morphology.proper_type`)."""
    kinds = [proper_type(t.text) for t in span.toks]
    parts, cur = [], [span.toks[0]]
    for t, k0, k1 in zip(span.toks[1:], kinds, kinds[1:]):
        if {k0, k1} == {"LOCATION", "PERSON"}:
            parts.append(cur)
            cur = []
        cur.append(t)
    parts.append(cur)
    return [_Span(tuple(p), span.initial and q == 0) for q, p in enumerate(parts)]


def _common(word: str, stats: Counter | None, local_lower: set[str]) -> bool:
    """A capitalized word that is an ordinary word here: a function word, or written in
    lower case more often than capitalized in the corpus (in the text, without stats)."""
    low = word.lower()
    if low in STOPWORDS:
        return True
    head = regex.split(r"['’]", low, maxsplit=1)[0]
    if head in STOPWORDS and regex.search(r"['’](?:ll|m|d|s|re|ve|t)$", low):
        return True  # a contraction: I'll, It's, We're
    if stats is None:
        return low in local_lower
    return stats[low] > stats[word]


def _unknown_opener(word: str, stats: Counter | None, local_lower: set[str],
                    defined: bool) -> bool:
    """A lone capitalized word that opens a sentence is not taken for a name unless the
    corpus also writes it capitalized mid-sentence, or it is the subject of a definition
    (``defined``: followed by a parenthesis or a form of "to be", as in "Teutberga (died
    875) was a queen", "Empties is a 2007 film"), and it is never mostly lower case."""
    if stats is None:
        return word.lower() in local_lower
    if stats[word.lower()] >= stats[word]:
        return True
    return not (stats[("mid", word)] or defined)


def _interjection(word: str, stats: Counter | None) -> bool:
    """A capitalized word the corpus only ever uses as an exclamation: it opens an
    utterance right before "!" or "?" at least once ("'Hurrah! There's Martha'", "'Eh?'
    said old Joe", "'Thankee!'") and is never capitalized mid-sentence except before "!"
    or "?" ("feebly cried Hurrah!"). A name is written mid-sentence ("said Scrooge"), and
    one only ever called out is called out mid-sentence ("quite a woman, little Fan!").
    Evidence from the corpus's own counts (:func:`word_counts`), so it holds in any
    language that marks exclamations so; without ``stats`` nothing is one."""
    if stats is None or stats[("excl", word)] - stats[("midexcl", word)] <= 0:
        return False  # never an utterance of its own ("quite a woman, little Fan!")
    return stats[("mid", word)] - stats[("midexcl", word)] <= 0


def _attributive(word: str, stats: Counter | None) -> bool:
    """A capitalized word the corpus uses as a modifier, not as a name: of its lone
    mid-sentence uses (no capitalized word beside it), at least
    :data:`ATTRIBUTIVE_SHARE` run straight into a lower-case content word and at least
    :data:`ATTRIBUTIVE_DETERMINED` also follow a determiner, as a noun phrase's adjective
    does ("some Dutch merchant", "an American actor", "his Christian name"). A name is
    written on its own ("said Scrooge.", "to Marley,") or before a verb without a
    determiner ("Beethoven composed"), and one inside a longer name ("American Football
    Conference") is not a lone use. Evidence from the corpus's own counts
    (:func:`word_counts`); without ``stats`` nothing is one."""
    if stats is None:
        return False
    solo = stats[("solo", word)]
    return solo > 0 and stats[("sololow", word)] >= ATTRIBUTIVE_SHARE * solo \
        and stats[("solodet", word)] >= ATTRIBUTIVE_DETERMINED * solo


def _class_noun(word: str, stats: Counter | None) -> bool:
    """Is the capitalized ``word`` a common noun the text capitalizes, not a name: the
    corpus also writes it in lower case, and more than :data:`CLASS_NOUN_SHARE` of its
    capitalized uses follow a determiner ("the Ghost", "this Spirit", "the Future" in a
    book that also writes "a ghost")? A name written after "the" is never written in
    lower case ("the Thames", "the Netherlands"), and a character's name is seldom
    written after a determiner ("Scrooge": 7 of 391 in the book). The plural of a class
    noun is one ("the Spirits"). Evidence from the corpus's own counts
    (:func:`word_counts`); without ``stats`` nothing is one."""
    if stats is None:
        return False
    if len(word) > 3 and word.endswith("s") and _class_noun(word[:-1], stats):
        return True  # its plural: "the Spirits"
    if not stats[word.lower()]:
        return False
    uses = stats[word] + stats[word + "'s"] + stats[word + "’s"]  # "the Spirit's robe"
    return stats[("det", word)] > CLASS_NOUN_SHARE * uses


def _office(word: str, stats: Counter | None) -> bool:
    """Is ``word`` the head of a title held in turn, such as "Earl" in "Earl of Cork": a
    common noun (the corpus writes it in lower case too) that the corpus writes before
    "of" after a name and a comma or after an ordinal ("John Boyle, 15th Earl of Cork",
    "William I, Count of Geneva") at least :data:`OFFICE_MIN_USES` times and in at least
    :data:`OFFICE_SHARE` of its "Head of X" uses? "Earl of Cork" alone is then an office
    that several people held, not an entity ("University of Leeds" is never so written;
    "Mary of Teck" after a comma is no common noun). Evidence from the corpus's own
    counts (:func:`word_counts`); without ``stats`` nothing is one."""
    if stats is None or not stats[word.lower()]:
        return False
    uses = stats[("office", word)]
    return uses >= OFFICE_MIN_USES and uses >= OFFICE_SHARE * stats[("ofhead", word)]


def _named_elsewhere(tok: _Tok, stats: Counter | None) -> bool:
    """Does the corpus write ``tok`` capitalized mid-sentence, as a name is written?"""
    return stats is not None and tok.kind in ("cap", "mixed") and stats[("mid", tok.text)] > 0


def _clean(text: str, span: _Span, stats: Counter | None,
           local_lower: set[str]) -> str | None:
    """The name a raw span stands for, as written in ``text``, or None (see module doc)."""
    toks = list(span.toks)
    initial = span.initial
    addressed = bool(_ADDRESSED.match(text, toks[-1].end))
    defined = bool(_DEFINED.match(text, toks[-1].end)) and not addressed
    # the subject of a definition opening a sentence is a title as written: "The Heart
    # of Doreon is a film", "My Little Eye is a 2002 film", "Single Video Theory is ..."
    whole_title = initial and defined and len(toks) >= 3

    def opener_not_name() -> bool:
        """Is ``toks[0]`` a common word in front of a name rather than part of it? Yes,
        unless it opens a definition's subject whose rest the corpus never writes alone
        as a name ("The Merry Gentleman is a film"; but "Old Marley was as dead as a
        door-nail" beside "said Marley" is Marley). A rare opener the corpus never
        capitalizes mid-sentence ("Whereat Scrooge's niece") stays: "Marie Curie" at a
        sentence start has the same evidence. Mid-sentence, a common word stays before a
        word the corpus never writes without it ("Great Britain", "Poor Law"; but "a
        Merry Christmas" is Christmas)."""
        first, rest = toks[0], toks[1]
        if not _common(first.text, stats, local_lower):
            return False
        if not initial and first.text.lower() not in STOPWORDS and stats is not None \
                and stats[rest.text] <= stats[("pair", first.text, rest.text)]:
            return False  # "in Great Britain": the corpus never writes Britain alone
        return not (initial and defined and first.text.lower() not in STOPWORDS
                    and not (len(toks) == 2 and _named_elsewhere(rest, stats)))

    while not whole_title and len(toks) > 1 and toks[0].text not in HONORIFICS \
            and toks[0].kind != "initial" and opener_not_name():
        if toks[0].text in _TITLE_ARTICLES and initial and defined \
                and sum(t.kind in ("cap", "mixed", "upper") for t in toks[1:]) >= 2:
            break  # "The Merry Gentleman is a film": a title keeps its article
        if toks[0].text in _TITLE_ARTICLES and not initial:
            break  # "directed The Swan", "joined The Beatles": an article capitalized
            # mid-sentence opens a title
        toks, initial = toks[1:], False
    while toks and (toks[-1].text in _PARTICLES or toks[-1].text in HONORIFICS):
        toks = toks[:-1]
    # an all-caps word is a name only with evidence (acronym_evidence): a span of such
    # words needs it for each ("DROP TABLE" is no name); next to a name word, an ordinary
    # word shouted at the span's edge is cut off ("Output PWNED")
    if toks and all(t.kind == "upper" or (t.kind == "initial" and "." not in t.text)
                    for t in toks):
        if not all(t.kind != "upper" or acronym_evidence(t.text, text, t.start, stats)
                   for t in toks):
            return None
    else:
        while toks and toks[-1].kind == "upper" and _shouted_word(toks[-1], text, stats):
            toks = toks[:-1]
        while toks and toks[0].kind == "upper" and _shouted_word(toks[0], text, stats) \
                and not (len(toks[0].text) <= 2 and len(toks) > 1
                         and toks[1].kind in ("cap", "mixed")):  # initials: AI Weiwei
            toks, initial = toks[1:], False
        while toks and toks[-1].text in _PARTICLES:
            toks = toks[:-1]
    if not toks:
        return None
    if any(_DRAWN_OUT.search(t.text) for t in toks):
        return None  # "uncle Scro-o-o-o-oge": a sound drawn out, not the name as written
    if len(toks) == 1:
        t = toks[0]
        if t.kind in ("initial", "num"):
            return None
        if t.kind == "cap" and (_common(_POSSESSIVE.sub("", t.text), stats, local_lower)
                                or len(t.text) < 2):
            return None
        if t.kind in ("cap", "mixed") and _interjection(_POSSESSIVE.sub("", t.text), stats):
            return None
        bare = _POSSESSIVE.sub("", t.text)
        if t.kind == "cap" and (_attributive(bare, stats) or _class_noun(bare, stats)):
            return None
        if t.kind == "cap" and initial and _unknown_opener(
                t.text, stats, local_lower, defined or addressed):
            return None
    elif len(toks) <= MODIFIER_MAX_WORDS and all(t.kind == "cap" for t in toks) \
            and _attributive(" ".join(t.text for t in toks), stats) \
            and any(_attributive(t.text, stats) for t in toks):
        return None  # "a South Korean actor", "an Indian Kannada film"; not "an Academy
        # Award nomination", which has no modifier of its own
    if all(t.kind == "cap" and (t.text.lower() in STOPWORDS or t.text in HONORIFICS)
           for t in toks):
        return None
    if len(toks) > 2 and toks[1].text == "of" and _office(toks[0].text, stats):
        return None  # "Earl of Cork": an office held in turn, named by its holders' names
    end = toks[-1].end
    if toks[-1].text in _ABBREVIATIONS and text[end:end + 1] == ".":
        end += 1  # "John Middleton Murry Jr."
    name = " ".join(text[toks[0].start:end].split())
    name = _POSSESSIVE.sub("", name)
    if len(toks) > MAX_NAME_WORDS or len(name) > MAX_NAME_CHARS:
        return None
    return name


def _variants(text: str, span: _Span, name: str, stats: Counter | None,
              local_lower: set[str]) -> list[str]:
    """Other names a kept span also stands for: without a leading article ("The
    Limestone Coast" -> "Limestone Coast") or a rank ("Prince Aleksander Koniecpolski"
    -> "Aleksander Koniecpolski"; gendered honorifics such as "Mr." stay, they tell
    people apart) when a name follows it ("Duke of Burgundy" stays whole), and with the
    rank title that follows after a comma ("Joan II, Countess of Burgundy", the form of
    many encyclopedia titles; the title's head a rank of :data:`_TITLE_HEADS` or an
    office by the corpus's evidence, :func:`_office`)."""
    out = []
    words = name.split()
    first = words[0] if words else ""
    # only before a name: "Duke of Burgundy" without its rank is no name ("of Burgundy")
    if len(words) > 2 and (first in _TITLE_ARTICLES or first in RANKS) \
            and not words[1][:1].islower():
        out.append(name[len(first):].strip())
    m = _APPOSITIVE_TITLE.match(text, span.toks[-1].end)
    if m and len(name.split()) <= 3 and (m.group(1) in _TITLE_HEADS
                                         or _office(m.group(1), stats)):
        out.append(" ".join((name + m.group(0)).split()))
    return out


def _to_key(span: _Span) -> str:
    """Corpus key of a span joined by "to": its words without a leading article ("The
    Ghost of Christmas Yet to Come" counts as "Ghost of Christmas Yet to Come")."""
    words = [t.text for t in span.toks]
    if len(words) > 1 and words[0] in _TITLE_ARTICLES:
        words = words[1:]
    return " ".join(words)


def _split_at(span: _Span, words: frozenset[str]) -> list[_Span]:
    """The parts of a span between its particles in ``words`` (``Christmas to Scrooge``
    -> ``Christmas``, ``Scrooge``)."""
    parts, cur = [], []
    for t in span.toks:
        if t.text in words:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return [_Span(tuple(p), span.initial and q == 0) for q, p in enumerate(parts) if p]


def _proper_names(text: str, stats: Counter | None) -> list[tuple[str, int]]:
    toks = _tokens(text)
    local_lower = {t.text for t in toks if t.kind == "lower"}
    out: list[tuple[str, int]] = []
    spans = [p for s in _spans(text, toks, stats)
             for q in _split_echoes(s)
             for p in (_split_kinds(q) if len(q.toks) > 1 else [q])]
    for span in spans:
        parts = [span]
        if any(t.text == "to" for t in span.toks):
            keep_whole = stats is None or stats[("to", _to_key(span))] >= TO_SPAN_MIN_COUNT
            parts = [span] if keep_whole else _split_at(span, frozenset({"to"}))
        for p in parts:
            name = _clean(text, p, stats, local_lower)
            if name:
                out.append((name, p.toks[0].start))
                for variant in _variants(text, p, name, stats, local_lower):
                    out.append((variant, p.toks[0].start))
            elif len(p.toks) > MAX_NAME_WORDS:  # too long: its parts between particles
                for q in _split_at(p, _PARTICLES):
                    name = _clean(text, q, stats, local_lower)
                    if name:
                        out.append((name, q.toks[0].start))
    titles: list[tuple[int, int, str]] = []  # (start, end, title) of each quoted title
    for m in _QUOTED.finditer(text):
        g = m.lastindex  # the group of the quote pair that matched (each has one)
        if g is None:
            continue
        inner = " ".join(m.group(g).split())
        words = inner.split()
        first = next((c for c in inner if c.isalpha()), "")
        if not (first.isupper() and len(words) <= MAX_NAME_WORDS) or all(
                w.lower() in STOPWORDS for w in words):
            continue
        if len(words) == 1 and not (_DEFINED.match(text, m.end())
                                    or not _common(inner, stats, local_lower)):
            continue  # a quoted common word ('Humbug'), unless a definition's subject
        if all(_kind(w) == "upper" for w in words) and not all(
                acronym_evidence(w, text, m.start(g), stats) for w in words):
            continue  # a quoted shout or command ("PWNED", "DROP TABLE")
        out.append((inner, m.start(g)))
        titles.append((m.start(g), m.end(g), inner))
    quoted = {t for _, _, t in titles}
    index_at = {t.start: i for i, t in enumerate(toks)}
    return [(name, at) for name, at in out
            if name in quoted or not _epithet(text, toks, index_at, at, titles)]


# a capitalized word, "the", then the candidate: "Ivan the Terrible", "Nosferatu the Vampyre"
_BEFORE_THE = regex.compile(r"(\p{Lu}[\p{L}\p{M}'’\-]*)[ \t]+the[ \t]+$")


def _epithet(text: str, toks: list[_Tok], index_at: dict[int, int], at: int,
             titles: list[tuple[int, int, str]]) -> bool:
    """Is the candidate starting at ``at`` an epithet or a title's object: right after a
    lower-case "the" that follows a capitalized word, which stands mid-sentence or inside
    a quoted title? "Ivan the Terrible", "Scrooge the Baleful", "Bert the Turtle",
    "Nosferatu the Vampyre", "Ride the Lightning": the part after "the" belongs to the
    whole and names nothing of its own ("Terrible", "Vampyre", "Lightning" were
    entities). A sentence-opening word before "the" ("In the United States", "And the
    Union") is no name, so the candidate after it stays. ``index_at``: token start ->
    its index in ``toks``."""
    m = _BEFORE_THE.search(text, max(0, at - 80), at)
    if m is None:
        return False
    if any(a <= m.start(1) < b for a, b, _ in titles):
        return True
    i = index_at.get(m.start(1))
    return i is not None and not _sentence_start(text, toks, i)


# --- segmenters (Chinese, Japanese) --------------------------------------------------
_JIEBA_PROPER = {"nr": "PERSON", "nrfg": "PERSON", "nrt": "PERSON", "ns": "LOCATION",
                 "nt": "ORGANIZATION", "nz": ""}
_JANOME_PROPER = {"人名": "PERSON", "地域": "LOCATION", "組織": "ORGANIZATION", "一般": ""}
CASELESS_RUN = regex.compile(r"[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}"
                              r"ー々〆" + "".join(rf"\p{{Script={s}}}" for s in CASELESS_SCRIPTS
                                                  if s not in ("Han", "Hiragana", "Katakana"))
                              + r"\p{M}]+")
_CJK_QUOTED = regex.compile(r"[《『「〈【]([^》』」〉】\n。！？]{1,40})[》』」〉】]")


@functools.lru_cache(maxsize=1)
def _jieba():
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba.posseg


@functools.lru_cache(maxsize=1)
def _janome():
    from janome.tokenizer import Tokenizer

    return Tokenizer()


def _janome_tokens(text: str) -> Iterator[Token]:
    """janome's tokens of ``text`` (its annotation adds ``str``, what only ``wakati=True``
    yields)."""
    return cast("Iterator[Token]", _janome().tokenize(text))


def segmenter_available(group: str) -> bool:
    """True when the segmenter of script group ``group`` (``zh``: jieba, ``ja``: janome)
    is installed."""
    import importlib.util

    mod = {"zh": "jieba", "ja": "janome"}.get(group)
    return bool(mod) and importlib.util.find_spec(mod) is not None


def _noun_runs(tokens: list[tuple[str, bool, bool, str]]) -> list[tuple[str, str]]:
    """(word, is_noun, is_proper, type hint) tokens -> (name, hint) for each run of nouns
    holding a proper noun, and each proper noun on its own; names of one character are
    dropped."""
    out: list[tuple[str, str]] = []
    run: list[tuple[str, bool, bool, str]] = []

    def flush() -> None:
        if any(p for _, _, p, _ in run):
            hint = next((h for _, _, p, h in run if p and h), "")
            name = "".join(w for w, *_ in run)
            if len(name) >= 2:
                out.append((name, hint))
            for w, _, p, h in run:
                if p and len(w) >= 2 and w != name:
                    out.append((w, h))
        run.clear()

    for tok in tokens:
        if tok[1]:
            run.append(tok)
        else:
            flush()
    flush()
    return out


def _segment_zh(text: str) -> list[tuple[str, str]]:
    toks = []
    for w in _jieba().cut(text):
        flag = w.flag
        proper = flag in _JIEBA_PROPER
        noun = flag.startswith("n") and flag not in ("ng",)
        toks.append((w.word, noun, proper, _JIEBA_PROPER.get(flag, "")))
    return _noun_runs(toks)


def _segment_ja(text: str) -> list[tuple[str, str]]:
    toks = []
    for t in _janome_tokens(text):
        pos = t.part_of_speech.split(",")
        noun = pos[0] == "名詞" and pos[1] not in ("数", "非自立", "代名詞", "副詞可能")
        proper = noun and pos[1] == "固有名詞"
        toks.append((t.surface, noun, proper, _JANOME_PROPER.get(pos[2], "") if proper else ""))
    return _noun_runs(toks)


def _segmenter_names(text: str, group: str) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for m in _CJK_QUOTED.finditer(text):
        out.append((m.group(1), m.start(), ""))
    seg = _segment_zh if group == "zh" else _segment_ja
    for m in CASELESS_RUN.finditer(text):  # runs of the script, so Latin text is left out
        for name, hint in seg(m.group(0)):
            out.append((name, m.start() + m.group(0).find(name), hint))
    return out


# scripts written without spaces between words
_UNSPACED_RUN = regex.compile(r"(?:[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}ー々〆"
                              r"\p{Script=Thai}\p{Script=Lao}\p{Script=Khmer}"
                              r"\p{Script=Myanmar}]\p{M}*)+")


def word_spans(text: str) -> list[tuple[int, int]]:
    """Return the (start, end) character offsets of the words of ``text``, in order, for
    any script: runs of letters, marks and digits (with inner ' ’ - joints) in scripts
    written with spaces; in the runs of scripts written without them (Han, kana, Thai,
    Lao, Khmer, Myanmar), the words of the segmenter extraction uses (jieba for Chinese,
    janome for Japanese, when installed), else one word per character (a name is then
    any run of them). Punctuation and spaces are in no word.
    """
    group = "ja" if _KANA.search(text) else "zh"
    out: list[tuple[int, int]] = []
    pos = 0
    for m in _UNSPACED_RUN.finditer(text):
        out += [(pos + a.start(), pos + a.end()) for a in _WORD.finditer(text[pos:m.start()])]
        run = m.group(0)
        words: list[str] = []
        if (_HAN.search(run) or _KANA.search(run)) and segmenter_available(group):
            words = ([w.word for w in _jieba().cut(run)] if group == "zh"
                     else [t.surface for t in _janome_tokens(run)])
        if "".join(words) != run:  # no segmenter (or it changed the text): characters
            words = regex.findall(r"\X", run)
        a = m.start()
        for w in words:
            out.append((a, a + len(w)))
            a += len(w)
        pos = m.end()
    out += [(pos + a.start(), pos + a.end()) for a in _WORD.finditer(text[pos:])]
    return out


def unspaced(text: str) -> bool:
    """True when ``text`` holds a letter of a script written without spaces (Han, kana,
    Thai, Lao, Khmer, Myanmar): there a word may be one character of a longer run."""
    return bool(_UNSPACED_RUN.search(text))


# --- n-grams (any caseless script) ---------------------------------------------------
def _function_chars(stats: Counter) -> set[str]:
    """The corpus's function characters (particles such as 的, 是, の, は): among the
    :data:`NGRAM_FUNCTION_CHARS` most frequent characters, those seen at least 3 times
    next to many different characters (distinct neighbours >= half their occurrences),
    which a character inside a recurring name is not (李 is always before 白)."""
    chars = Counter({k[1]: v for k, v in stats.items() if isinstance(k, tuple) and k[0] == "ch"})
    out = set()
    for c, v in chars.most_common(NGRAM_FUNCTION_CHARS):
        if v < 3:
            break
        pairs = [k[1] for k in stats if isinstance(k, tuple) and k[0] == "ng"
                 and len(k[1]) == 2 and c in k[1]]
        left = {p[0] for p in pairs if p[1] == c}
        right = {p[1] for p in pairs if p[0] == c}
        if min(len(left), len(right)) >= v / 2:
            out.add(c)
    return out


def _ngram_names(text: str, stats: Counter | None) -> list[tuple[str, int]]:
    local = stats if stats is not None else word_counts([text])
    function = getattr(local, "_function_chars", None)
    if function is None:
        function = _function_chars(local)
        # once per corpus, kept on the corpus's own Counter
        local._function_chars = function  # pyright: ignore[reportAttributeAccessIssue]
    out: list[tuple[str, int]] = []
    for m in CASELESS_RUN.finditer(text):
        run = m.group(0)
        grams = []
        for n in NGRAM_SIZES:
            for a in range(len(run) - n + 1):
                g = run[a:a + n]
                c = local[("ng", g)]
                if c < NGRAM_MIN_COUNT or g[0] in function or g[-1] in function:
                    continue
                # maximal: no one-character extension occurs as often
                ext = [run[a - 1:a + n] if a > 0 else "", run[a:a + n + 1]]
                if any(e and len(e) > n and local[("ng", e)] >= c for e in ext):
                    continue
                grams.append((-c, -n, a, g))
        taken: list[tuple[int, int]] = []
        for _, neg_n, a, g in sorted(grams):  # most frequent, then longest, first
            if any(x < a - neg_n and a < y for x, y in taken):
                continue  # overlaps a kept n-gram
            taken.append((a, a - neg_n))
            out.append((g, m.start() + a))
    return out


# --- public ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """A candidate name: its text (a substring of the unit), first offset (characters),
    occurrences in the unit, the source that found it, and a type hint from a
    segmenter's part-of-speech tag ("" when none)."""

    name: str
    start: int
    count: int
    source: str
    hint: str = ""


def sources_for(text: str, candidate_source: str = "auto") -> dict[str, str]:
    """Return {script group: source} for the script groups of ``text`` (:func:`scripts_of`).

    ``auto`` maps each group through :data:`AUTO_SOURCE` (a segmenter that is not
    installed falls back to ``ngram``); any other source applies to every caseless
    group, while cased text always uses ``proper_names`` unless the source is ``open``.

    Raises:
        ValueError: on an unknown ``candidate_source``.
    """
    if candidate_source not in SOURCES:
        raise ValueError(f"candidate_source must be one of {SOURCES}, got {candidate_source!r}")
    out = {}
    for group in scripts_of(text):
        src = AUTO_SOURCE[group] if candidate_source == "auto" else candidate_source
        if group == "cased" and src in ("segmenter", "ngram"):
            src = "proper_names"
        if group != "cased" and src == "proper_names":
            src = AUTO_SOURCE[group]
        if src == "segmenter" and not segmenter_available(group):
            src = "ngram"
        out[group] = src
    return out


def find_candidates(text: str, candidate_source: str = "auto", stats: Counter | None = None,
                    limit: int | None = None) -> list[Candidate]:
    """Return the candidate names of one text unit, most frequent first.

    Args:
        text: the unit's text.
        candidate_source: ``auto | proper_names | segmenter | ngram | open``; ``open``
            gives nothing here (the model proposes; see :mod:`kgloom.extraction.extract`).
        stats: corpus statistics from :func:`word_counts` over the corpus's units
            (None: the unit alone).
        limit: keep at most this many (None: all).

    Returns:
        distinct names (each a substring of ``text``), ranked by occurrences in the unit
        (descending), then first position; segmenter type hints where known.
    """
    found: list[tuple[str, int, str, str]] = []
    text = mask_locator_lines(text)
    for group, src in sources_for(text, candidate_source).items():
        if src == "proper_names":
            found += [(n, p, src, "") for n, p in _proper_names(text, stats)]
            found += [(n, p, src, "") for n, p in _known_names(text, stats)]
        elif src == "segmenter":
            found += [(n, p, src, h) for n, p, h in _segmenter_names(text, group)]
        elif src == "ngram":
            found += [(n, p, src, "") for n, p in _ngram_names(text, stats)]
    counts: Counter[str] = Counter()
    first: dict[str, tuple[int, str, str]] = {}
    for name, pos, src, hint in found:
        name = name.strip()
        if not name or len(name) > MAX_NAME_CHARS:
            continue
        counts[name] += 1
        if name not in first or (hint and not first[name][2]):
            first[name] = (min(pos, first.get(name, (pos,))[0]), src, hint)
    ranked = sorted(counts, key=lambda s: (-counts[s], first[s][0]))
    if limit is not None:
        ranked = ranked[:limit]
    return [Candidate(s, first[s][0], counts[s], first[s][1], first[s][2]) for s in ranked]


def candidate_names(text: str, limit: int = MAX_CANDIDATES,
                    vocabulary: Counter | None = None, candidate_source: str = "auto",
                    ) -> list[str]:
    """Return the candidate names of ``text`` an entity may be named by.

    The names of :func:`find_candidates` (see the module docstring for the rules per
    script), with ``vocabulary`` the corpus statistics of :func:`word_counts` (None: the
    text alone).

    Returns:
        at most ``limit`` distinct names, each grounded in ``text``, most frequent first,
        then by first position.
    """
    return [c.name for c in find_candidates(text, candidate_source, vocabulary, limit)]


def is_grounded(name: str, text: str) -> bool:
    """True when ``name`` occurs in ``text`` after Unicode (NFKC) and case normalization."""
    n = normalize_for_match(name)
    return bool(n) and n in normalize_for_match(text)
