"""Decode an input file's bytes to text: UTF-8, byte-order marks, or a detected legacy
encoding, with a confidence; no Dagster here.

Order:

1. Valid UTF-8 (a UTF-8 byte-order mark is dropped) is taken as it is: confidence 1.0.
   Bytes holding NUL are not taken this way, since UTF-16/32 text without a byte-order
   mark is often valid UTF-8 too.
2. Anything else goes to ``charset-normalizer``, which reads UTF-16/32 byte-order marks
   and ranks the code pages whose decoding looks least like mojibake (its "chaos", the
   mess ratio, 0 = clean).
3. Several code pages often decode the same bytes equally cleanly (cp1250, cp1252 and
   cp1257 for most Latin-script text). The confidence is ``(1 - chaos)`` of the chosen
   decoding times the share of characters on which every near-best candidate (chaos
   within :data:`NEAR_CHAOS` of the best) decodes to the same character, measured on
   the first :data:`SAMPLE_BYTES` bytes. Long text with a few accented letters scores
   high; a short line whose only non-ASCII bytes mean different letters in each code
   page scores low. When cp1252 decodes the sample exactly like the chosen code page,
   it is named instead (the same text, and the commonest Western code page).

Below :data:`MIN_CONFIDENCE` the caller should not trust the text (a failures row
naming the guess). Source: charset-normalizer docs, "Usage" (``from_bytes``,
``CharsetMatch.chaos`` / ``coherence`` / ``bom``).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

import numpy as np

MIN_CONFIDENCE = 0.9
NEAR_CHAOS = 0.01  # chaos gap within which two candidate code pages count as tied
SAMPLE_BYTES = 1 << 20  # agreement between candidates is measured on this prefix
PREFERRED = "cp1252"


@dataclass(frozen=True)
class Decoded:
    """The result of :func:`decode_bytes`. ``text`` is None when nothing decodes."""

    text: str | None
    encoding: str | None  # Python codec name, e.g. "utf-8", "utf-16", "gb18030", "cp1252"
    confidence: float  # 0..1, see the module doc

    @property
    def confident(self) -> bool:
        """True when the text can be used (confidence >= :data:`MIN_CONFIDENCE`)."""
        return self.text is not None and self.confidence >= MIN_CONFIDENCE


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _sample(data: bytes, encoding: str) -> str:
    return data[:SAMPLE_BYTES].decode(encoding, errors="ignore")


def decode_bytes(data: bytes) -> Decoded:
    """Decode a file's bytes (see the module doc for the rules and the confidence).

    Args:
        data: the whole file.

    Returns:
        a :class:`Decoded`; ``text`` is the full decoded text (no byte-order mark), or
        None with ``encoding`` None when no code page decodes the bytes (binary data),
        or None with the best guess in ``encoding`` when the guess does not decode the
        whole file. Check :attr:`Decoded.confident` before using ``text``.
    """
    if b"\x00" not in data:
        try:
            return Decoded(data.decode("utf-8-sig"), "utf-8", 1.0)
        except UnicodeDecodeError:
            pass
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        return Decoded(None, None, 0.0)
    best = matches[0]
    near = [m for m in matches if m.chaos <= best.chaos + NEAR_CHAOS]
    chosen = _codec(best.encoding)
    sample = _codepoints(_sample(data, chosen))
    same = np.ones(len(sample), dtype=bool)
    for m in near[1:]:
        other = _codepoints(_sample(data, _codec(m.encoding)))
        if len(other) == len(sample):
            if _codec(m.encoding) == PREFERRED and np.array_equal(other, sample):
                chosen = PREFERRED
            same &= other == sample
        else:  # a multi-byte vs a single-byte reading: only ASCII surely agrees
            same &= sample < 128
    confidence = round((1.0 - best.chaos) * (float(same.mean()) if len(sample) else 0.0), 4)
    try:
        text = data.decode("utf-8-sig" if chosen == "utf-8" else chosen)
    except UnicodeDecodeError:  # detection sampled the file; the rest does not decode
        return Decoded(None, chosen, 0.0)
    return Decoded(text, chosen, confidence)


def _codec(name: str) -> str:
    """Python's canonical codec name (``utf_16`` -> ``utf-16``, ``cp932`` stays)."""
    return codecs.lookup(name).name
