"""Type cues: the entity type a candidate name's own words or its neighbours in the text
make plain (no LLM, no Dagster). Extraction decides a mention's type by them where one
fires; see :func:`type_cue`.
"""

from __future__ import annotations

import regex

from kgloom.names.candidates import HONORIFICS, RANKS, ROMAN_NUMERAL
from kgloom.names.morphology import is_form_of, name_type

# Words that make a name's kind plain from the name itself (its head word) or from the
# words around it in the text. A 135M model types names little better than by position
# (measured in bench/bench_quality.py), so these cues, where one fires, decide a
# mention's type; the model's type stands elsewhere, and an entity's type is the vote of
# its mentions (kgloom.graph.resolution).
_ORG_WORDS = frozenset("""university universität université università universidad
uniwersytet univerzita университет college academy akademie académie akademia академия
institute institut instytut институт school schule école szkoła школа company co corp
corporation inc ltd llc plc gmbh ag sa bank bahn railway railways airlines airline
museum musée museo muzeum музей library bibliothek bibliothèque biblioteka библиотека
society gesellschaft société towarzystwo общество party partei parti partia партия
church kirche église kościół церковь ministry ministerium ministère ministerstwo
министерство agency agentur agence council rat conseil rada совет association verein
foundation stiftung fondation fundacja фонд club band orchestra orchester team army armee
armée armia армия navy marine force forces senate senat sénat сенат parliament parlament
parlement парламент government regierung gouvernement rząd правительство court gericht
hospital krankenhaus hôpital szpital больница laboratories laboratory labor verlag
publishers press times journal gazette newspaper zeitung records studios pictures
вестник газета журнал театр teatr divadlo
institution office amt bureau department committee commission union league federation
nationalmuseum institut""".split())
_LOC_WORDS = frozenset("""street st road rd lane avenue square place platz straße strasse
gasse weg rue boulevard ulica plac улица площадь city town village county district
province state region stadt dorf kreis ville village comté région miasto wieś powiat
województwo город деревня область район river fluss fleuve rivière rzeka река lake see
lac jezioro озеро sea meer mer morze море ocean mountain mount mountains berg gebirge mont
montagne góra гора island isle insel île wyspa остров bridge brücke pont most мост hill
hills valley tal vallée dolina park castle schloss burg château zamek замок abbey
cathedral dom cathédrale katedra собор palace palast palais pałac дворец house tower
harbour harbor port bay coast forest wald forêt las лес desert peninsula kingdom reich
royaume królestwo королевство empire republic republik république republika республика
voivodeship gmina станция усадьба stacja nádraží stanice ulice náměstí
řeka jezero moře ostrov hora kraj okres переулок проспект бульвар набережная
губерния уезд край залив""".split())
_EVENT_WORDS = frozenset("""war krieg guerre wojna война battle schlacht bataille bitwa
битва revolution revolution révolution rewolucja революция festival fest olympics games
spiele election wahl élection wybory выборы crisis krise crise kryzys кризис conference
konferenz congress kongress siege belagerung uprising aufstand powstanie восстание
massacre treaty vertrag traité traktat договор championship cup pokal coupe puchar
кубок válka bitva povstání revoluce сражение""".split())
# Feasts and holidays (English, German, French, Polish, Russian): alone, or before a word
# for a time of day or year ("Christmas Eve", "Christmas-time", "Easter Sunday"), the name
# of an event; "Christmas Carol", "Christmas Island" are not (their head decides).
_HOLIDAYS = frozenset("""christmas easter whitsun pentecost michaelmas candlemas epiphany
advent lent halloween hallowe'en thanksgiving passover hanukkah ramadan diwali
weihnachten ostern pfingsten noël noel pâques toussaint wielkanoc рождество пасха""".split())
_TIME_HEADS = frozenset("""day eve night time tide morning week season day's days eves
nights tag abend nacht jour veille nuit dzień wigilia noc день вечер ночь""".split())
_ORDINALS = frozenset("""first second third fourth fifth sixth seventh eighth ninth tenth
eleventh twelfth""".split())
# characters that are not human but speak and act (the gold convention: PERSON)
_BEING_WORDS = frozenset("""ghost spirit phantom angel god goddess demon devil fairy giant
witch wizard geist esprit fantôme duch дух""".split())
_PERSON_TITLES = frozenset(w.lower() for w in HONORIFICS | RANKS) | frozenset(
    """herr frau monsieur madame mademoiselle pan pani господин госпожа святой св margrave
    landgrave elector viscount marquess marquis doge khan caliph pharaoh""".split())
# regnal numbers of rulers (I and V left out: "Harvard Mark I", "Saturn V")
_REGNAL = frozenset("II III IV VI VII VIII IX X XI XII XIII XIV XV XVI".split())
_PERSON_BEFORE = regex.compile(
    r"(?:\b(?:said|says|cried|replied|asked|answered|exclaimed|whispered|returned|"
    r"observed|added|rejoined|muttered|shouted|sagte|fragte|rief|dit|demanda|répondit|"
    r"powiedział|powiedziała|сказал|сказала|спросил|ответил)\s+(?:old\s+|young\s+|poor\s+|"
    r"little\s+)?)$", regex.IGNORECASE)
_PERSON_AFTER = regex.compile(
    r"^(?:\s+(?:said|says|cried|replied|asked|answered|exclaimed|whispered|returned|"
    r"observed|added|rejoined|muttered|shouted|thought|laughed|smiled|sighed|nodded|"
    r"looked|turned|stood|sat|felt|knew|saw|heard|wept|walked|ran|married|spoke|shook|"
    r"rubbed|wondered|remembered|hesitated|trembled|wrote|studied|taught|lived|worked|"
    r"ruled|reigned|composed|painted|studierte|lehrte|schrieb|heiratete|lebte|arbeitete|"
    r"étudia|écrivit|épousa|vécut|travailla|studiował|studiowała|pisał|pisała|mieszkał|"
    r"mieszkała|pracował|pracowała|учился|училась|писал|писала|жил|жила|работал|"
    r"работала|женился|"
    r"sagte|fragte|rief|dit|demanda|répondit|powiedział|powiedziała|сказал|сказала|"
    r"спросил|ответил|was born|is born|died|wurde geboren|est né|est née|urodził|urodziła|"
    r"родился|родилась|умер|умерла)\b"
    r"|['’]s\s+(?:wife|husband|son|daughter|father|mother|brother|sister|nephew|niece|"
    r"uncle|aunt|friend|clerk|partner|children|family|widow|grandfather|grandmother)\b"
    r"|,?\s+(?:who|whom|whose)\b|\s*\(\s*(?:born|died|c\.|\d{3,4}\s*[–-]|née|geb\.|né|"
    r"ur\.|род\.)"
    r")", regex.IGNORECASE)
# a vocative: "'Merry Christmas, Bob!'" (after a comma, before closing punctuation)
_VOCATIVE = (regex.compile(r",\s+$"), regex.compile(r"^[,!?]\s*['’\"”]"))
# Czech "v"/"ve", Polish/Czech/Russian "na" (in, at, on): lower case only, never after an
# apostrophe ("I've Got") nor as a regnal numeral ("Philip V of France")
_LOC_BEFORE_LOWER = regex.compile(r"(?<![\p{L}\p{M}'’])(?:v|ve|na|на)\s+$")
_PREV_WORD = regex.compile(r"(?<![\p{L}\p{M}])(\p{Ll}[\p{L}\p{M}]*)\s+$")
_LOC_BEFORE = regex.compile(
    r"(?:\b(?:in|at|near|into|nach|bei|à|près de|w|we|pod|koło|в|во|под|около)\s+)$",
    regex.IGNORECASE)


_WORD_CHAR = regex.compile(r"[\p{L}\p{M}\p{N}]")


def bounded_occurrences(name: str, text: str) -> list[tuple[int, int]]:
    r"""(start, end) of each non-overlapping occurrence of ``name`` in ``text`` that no
    letter, mark or digit touches on either side: what the pattern
    ``(?<![\p{L}\p{M}\p{N}])NAME(?![\p{L}\p{M}\p{N}])`` finds, without compiling one
    pattern per name (``regex`` compiles ``\p{..}`` classes slowly; a unit has dozens
    of names)."""
    out, i = [], text.find(name)
    while i >= 0 and name:
        end = i + len(name)
        if not (i and _WORD_CHAR.match(text, i - 1)) and not _WORD_CHAR.match(text, end):
            out.append((i, end))
            i = text.find(name, end)
        else:
            i = text.find(name, i + 1)
    return out


def _holiday(parts: list[str]) -> bool:
    """Is a name of these lower-case words (hyphens split) a feast or holiday? One of
    :data:`_HOLIDAYS` alone or before a word of :data:`_TIME_HEADS` ("Christmas Eve",
    "Christmas-time"), an ordinal before one ("Twelfth-Night", "Seventh Day"), or "New
    Year"."""
    if len(parts) == 1:
        return parts[0] in _HOLIDAYS
    if len(parts) == 2:
        first, head = parts
        return (head in _TIME_HEADS and (first in _HOLIDAYS or first in _ORDINALS)) or (
            first == "new" and head == "year")
    return False


def type_cue(name: str, text: str, hint: str = "") -> str:
    """Return the entity type that cues make plain for ``name`` in ``text``, or "".

    In order: a part-of-speech tagger's ``hint`` (jieba, janome); a leading honorific or
    rank (``Mr.``, ``Mrs.``, ``Herr``, ``Prince``) -> PERSON; the name's head word (its
    last word, or first for "X of Y") in the organization, location or event word
    lists (``University``, ``Street``, ``War`` and their German, French, Polish, Czech
    and Russian forms, also inflected: :func:`kgloom.names.morphology.is_form_of`)
    -> that type, a ghost or spirit -> PERSON; a feast or holiday ("Christmas Eve",
    "Twelfth-Night", "New Year": :func:`_holiday`) -> EVENT; for Russian, the
    proper-name tags of the name's words (:func:`kgloom.names.morphology.name_type`:
    ``Антоном Чеховым`` -> PERSON, ``Пречистенке`` -> LOCATION); the words around any
    occurrence in ``text``: a speech, perception or motion verb, "was born"/"died"/"(born
    ...)", "'s wife", ", who", a vocative ("..., Bob!'") -> PERSON, then "in"/"at"/"near" (and their
    equivalents, Czech ``v``, Slavic ``na``) or a place noun in an oblique case
    (``на станции Астапово``: "at the station Astapovo") before it -> LOCATION; an
    all-caps acronym of 2-6 letters -> ORGANIZATION. Cues come from common English usage
    and the same words in the suite's languages; they never say OTHER.
    """
    if hint:
        return hint
    words = [w.strip(".,") for w in name.split() if w.strip(".,")]
    if not words:
        return ""
    cue = _name_cue(name, words) or name_type(words) or _context_cue(name, text)
    if cue:
        return cue
    if len(words) == 1 and regex.fullmatch(r"\p{Lu}{2,6}", words[0]):
        return "ORGANIZATION"
    return ""


def _name_cue(name: str, words: list[str]) -> str:
    """The type the name's own words cue (``words``: its words without edge periods and
    commas, not empty): a leading or appositive honorific or rank, a regnal numeral ->
    PERSON; its head word in the being, event, organization or location word lists; a
    feast or holiday (:func:`_holiday`) -> EVENT; else ""."""
    low = [w.lower() for w in words]
    if low[0] in _PERSON_TITLES and len(words) > 1:
        return "PERSON"
    core = list(low)
    while len(core) > 1 and (ROMAN_NUMERAL.fullmatch(words[len(core) - 1]) or core[-1].isdigit()):
        core.pop()  # "World War II", "Apollo 11": the head is before the numeral
    if "," in name and any(w in _PERSON_TITLES for w in low[1:]):
        return "PERSON"  # "Joan II, Countess of Burgundy"
    if len(core) < len(low) and len(words) == 2 and words[1] in _REGNAL:
        return "PERSON"  # "Theodred II", "Lothair II"
    parts = [p for w in core for p in regex.split(r"[-‐]", w)]
    head = [parts[-1], core[0]]  # "Bank of England", "Universität Jena", "Lake Geneva"
    for h in head:
        if is_form_of(h, _BEING_WORDS):
            return "PERSON"
        if is_form_of(h, _EVENT_WORDS):
            return "EVENT"
        if is_form_of(h, _ORG_WORDS):
            return "ORGANIZATION"
        if is_form_of(h, _LOC_WORDS):
            return "LOCATION"
    if _holiday(parts):
        return "EVENT"
    return ""


def _context_cue(name: str, text: str) -> str:
    """The type the words around the occurrences of ``name`` in ``text``
    (:func:`bounded_occurrences`) cue: PERSON when any occurrence has a person cue
    before or after it (or stands as a vocative), else LOCATION when one follows a
    place preposition or a place noun in an oblique case, else ""."""
    person = location = 0
    for start, end in bounded_occurrences(name, text):
        before, after = text[max(0, start - 30):start], text[end:end + 40]
        if _PERSON_BEFORE.search(before) or _PERSON_AFTER.search(after) or (
                _VOCATIVE[0].search(before) and _VOCATIVE[1].search(after)):
            person += 1
        elif ((_LOC_BEFORE.search(before) or _LOC_BEFORE_LOWER.search(before))
              and not regex.match(r"['’]s\b", after)):
            location += 1
        elif (prev := _PREV_WORD.search(before)) and prev.group(1).lower() not in _LOC_WORDS \
                and is_form_of(prev.group(1), _LOC_WORDS):
            location += 1  # a place noun in an oblique case: "на станции Астапово"
    if person:
        return "PERSON"
    if location:
        return "LOCATION"
    return ""
