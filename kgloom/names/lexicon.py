"""The word lists and patterns the candidate sources share (tabular): the word pattern,
honorifics, name particles, stop words of the test suite's languages, ranks, quotation
marks, what follows a definition's subject, determiners, and the thresholds of the corpus
evidence (:mod:`kgloom.names.corpus_stats`) that reads them.
"""

from __future__ import annotations

import regex

from kgloom.names.normalize import MAX_NAME_CHARS

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
