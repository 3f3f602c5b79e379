"""Input files in UTF-8 with or without a byte-order mark, UTF-16/32, and legacy code
pages: decoded with the encoding and confidence recorded, or a failures row naming the
guess (kgloom.ingest.decoding, kgloom.ingest.documents)."""

from __future__ import annotations

import os
import random

import polars as pl
import pytest

from kgloom.core import schemas
from kgloom.ingest.decoding import MIN_CONFIDENCE, decode_bytes
from kgloom.ingest.documents import read_documents

FRENCH = ("Il était une fois, dans un petit village près de Besançon, un garçon nommé Léon "
          "qui rêvait de voyager. Chaque matin, il regardait les trains passer en mangeant "
          "une tartine de pâté. « Un jour, je verrai la mer », disait-il à sa sœur Zoé. Sa "
          "mère lui répondait toujours : « Mange d'abord ton déjeuner, après on verra. » "
          "L'été suivant, Léon économisa chaque centime gagné à la boulangerie.")
SPANISH = ("En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho tiempo "
           "que vivía un hidalgo de los de lanza en astillero, adarga antigua, rocín flaco y "
           "galgo corredor. Una olla de algo más vaca que carnero, salpicón las más noches, "
           "duelos y quebrantos los sábados, lantejas los viernes, algún palomino de "
           "añadidura los domingos. ¿Quién no conoce la historia? ¡Nadie en España!")
CHINESE = ("第一章 大雪纷飞的夜晚，老人独自坐在窗前，望着远方的群山。他想起了年轻时的朋友们，"
           "他们曾经一起走过很多地方。第二天早上，村里的孩子们来到他的家门口，请他讲故事。")
JAPANESE = ("吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗い"
            "じめじめした所でニャーニャー泣いていた事だけは記憶している。")
RUSSIAN = ("Князь Андрей Болконский сидел у окна и думал о будущем. Наташа Ростова пела в "
           "соседней комнате, и её голос был слышен во всём доме.")
ENGLISH = "Marley was dead: to begin with. Scrooge signed the register of his burial."

# (file bytes, expected text, expected encoding) for every kind of encoding kgloom reads
DECODABLE = {
    "utf8": (ENGLISH.encode("utf-8"), ENGLISH, "utf-8"),
    "utf8_bom": (FRENCH.encode("utf-8-sig"), FRENCH, "utf-8"),
    "utf16_bom_le": (FRENCH.encode("utf-16"), FRENCH, "utf-16"),
    "utf16_bom_be": (b"\xfe\xff" + CHINESE.encode("utf-16-be"), CHINESE, "utf-16"),
    "utf32_bom": (RUSSIAN.encode("utf-32"), RUSSIAN, "utf-32"),
    "utf16_le_no_bom": (ENGLISH.encode("utf-16-le"), ENGLISH, None),
    "gbk": (CHINESE.encode("gbk"), CHINESE, "gb18030"),
    "shift_jis": (JAPANESE.encode("shift_jis"), JAPANESE, "cp932"),
    "cp1252": (FRENCH.encode("cp1252"), FRENCH, "cp1252"),
    "latin_1": (SPANISH.encode("latin-1"), SPANISH, "cp1252"),
    "cp1251": (RUSSIAN.encode("cp1251"), RUSSIAN, "cp1251"),
    "koi8_r": (RUSSIAN.encode("koi8-r"), RUSSIAN, "koi8-r"),
}


@pytest.mark.parametrize("case", sorted(DECODABLE))
def test_every_kind_of_encoding_is_decoded_with_its_confidence(case):
    data, text, encoding = DECODABLE[case]
    got = decode_bytes(data)
    assert got.text == text
    assert got.confident and MIN_CONFIDENCE <= got.confidence <= 1.0
    if encoding:
        assert got.encoding == encoding
    if case.startswith("utf8"):
        assert got.confidence == 1.0


def test_binary_and_ambiguous_bytes_are_not_trusted():
    assert decode_bytes(random.Random(0).randbytes(3000)).text is None
    # a BOM by chance, then bytes that read as nothing in particular
    broken = decode_bytes(b"\xff\xfe\xfa not utf-8 \xc3\x28")
    assert not broken.confident and broken.encoding
    # one accented letter: every code page reads it as another letter
    short = decode_bytes("café".encode("cp1252"))
    assert not short.confident


def test_documents_record_the_encoding_and_failures_name_the_guess(tmp_path):
    (tmp_path / "zh.txt").write_bytes(CHINESE.encode("gbk"))
    (tmp_path / "fr.md").write_bytes(FRENCH.encode("utf-16"))
    (tmp_path / "ru.jsonl").write_bytes(
        ('{"title": "Война", "text": "' + RUSSIAN + '"}\n').encode("cp1251"))
    (tmp_path / "cafe.txt").write_bytes("café".encode("cp1252"))
    (tmp_path / "noise.txt").write_bytes(os.urandom(2000))
    docs, failures = read_documents(tmp_path)
    assert docs.columns == list(schemas.DOCUMENTS_SCHEMA)
    got = {r["source"]: r for r in docs.iter_rows(named=True)}
    assert set(got) == {"zh.txt", "fr.md", "ru.jsonl"}
    assert (got["zh.txt"]["text"], got["zh.txt"]["encoding"]) == (CHINESE, "gb18030")
    assert (got["fr.md"]["text"], got["fr.md"]["encoding"]) == (FRENCH, "utf-16")
    assert got["ru.jsonl"]["title"] == "Война" and got["ru.jsonl"]["encoding"] == "cp1251"
    assert all(r["encoding_confidence"] >= MIN_CONFIDENCE for r in got.values())
    reasons = dict(failures.select("item_id", "reason").iter_rows())
    assert set(reasons) == {"cafe.txt", "noise.txt"}
    assert "best guess" in reasons["cafe.txt"] and "confidence" in reasons["cafe.txt"]
    assert "no text encoding fits" in reasons["noise.txt"] or "best guess" in reasons["noise.txt"]
    assert failures.filter(pl.col("stage") != "documents").height == 0


def test_a_partition_written_before_the_encoding_columns_still_combines(tmp_path):
    from kgloom.core.layout import partition_dir
    from kgloom.corpus.partitions import combine_partitions

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text(ENGLISH, encoding="utf-8")
    docs, _ = read_documents(tmp_path / "in")
    old = docs.drop("encoding", "encoding_confidence")  # as an older kgloom wrote it
    old.write_parquet(partition_dir(tmp_path / "out", "a.txt") / "documents.parquet")
    corpus = combine_partitions(tmp_path / "out", ["a.txt"])
    assert corpus.documents["text"].to_list() == [ENGLISH]
    assert corpus.documents["encoding"].to_list() == [None]
