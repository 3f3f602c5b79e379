"""The checks of a community report's reply (grounded reports): it names nothing its
context lacks, copies no prompt example or placeholder, repeats no field and does not
loop (:func:`check_report`).
"""

from __future__ import annotations

import regex

from kgloom.llm import PromptTemplate
from kgloom.names.grounding import find_repetition, shared_phrase, ungrounded_names, words
from kgloom.report_writer.prompt import REPORT_TEMPLATE, SAME_FIELD_MIN_WORDS

# an angle-bracket placeholder ("<name 1>", "<a fact about X>") written into a reply
_PLACEHOLDER = regex.compile(r"<[^<>\n]{1,80}>")


def example_text(template: PromptTemplate = REPORT_TEMPLATE) -> str:
    """The worked example(s) of ``template``: each example turn's user and assistant
    text, one after the other (what :func:`check_report` tells a copy by); "" for a
    template without examples (``REPORT_TEMPLATE`` has none)."""
    return "\n".join(part for turn in template.examples for part in turn)


def report_text(obj: dict) -> str:
    """A report reply's free text, one field a paragraph: title, summary, rating explanation,
    then each finding's summary and explanation."""
    parts = [obj.get("title", ""), obj.get("summary", ""), obj.get("rating_explanation", "")]
    for f in obj.get("findings") or []:
        parts += [f.get("summary", ""), f.get("explanation", "")]
    return "\n\n".join(p for p in parts if p)  # a blank line: no name spans two fields


def check_report(obj: dict, context: str, members: tuple[str, ...] | list[str] = (),
                 example: str | None = None, composed: bool = False) -> list[str]:
    """Why an LLM report reply must not be published; [] when it may.

    A report may name only what its context holds (the rule of GraphRAG's report prompt,
    "do not include information where the supporting evidence for it is not
    provided", enforced here rather than asked for). Checked, in order:

    - it repeats the prompt's worked example (when ``example`` is not empty): a
      ``<placeholder>`` of it, a run of :data:`kgloom.names.grounding.EXAMPLE_MIN_WORDS`
      words shared with it but not with ``context`` (:func:`~kgloom.names.grounding.
      shared_phrase`), or a name of it that the context lacks;
    - it writes placeholders: text in angle brackets that the context lacks
      ("<a fact about Scrooge>", a template slot, not a report);
    - it names what its context lacks: a proper name of its text
      (:func:`kgloom.names.grounding.ungrounded_names`) that neither ``context`` nor
      ``members`` holds;
    - it repeats itself: a loop within a field (:func:`kgloom.names.grounding.find_repetition`),
      the same text of ``SAME_FIELD_MIN_WORDS`` words or more in two fields (a finding's
      summary copied as its explanation), or two findings with the same summary.

    Args:
        obj: the parsed reply (title, summary, rating_explanation, findings).
        context: the community data the model was given (the prompt's user turn).
        members: the community's member titles (names it may use even when a cut
            context left them out).
        example: the prompt's example text (default: :func:`example_text` of
            ``REPORT_TEMPLATE``, "" since it has none); pass an older prompt's to check
            the reports written under it.
        composed: the sentences are kgloom's around a model's enum choices
            (``llm_report_form: choices``): "[Sources: ...]" is no name, and no loop is
            looked for (a choice cannot loop); two findings alike are still refused.

    Returns:
        one reason per failed check, each naming what was found.
    """
    example = example_text() if example is None else example
    text = report_text(obj)
    if composed:
        text = _CITATION.sub("", text)
    problems: list[str] = []
    slots = [p for p in dict.fromkeys(_PLACEHOLDER.findall(text)) if p not in context]
    copied = [p for p in slots if p in example]
    phrase = shared_phrase(text, example, context) if example else None
    unknown = [n for n in ungrounded_names(text, context, tuple(members))
               if not any(n in p for p in slots)]
    example_words = set(words(example))
    from_example = [n for n in unknown if example_words and set(words(n)) <= example_words]
    if copied or phrase or from_example:
        what = [f"placeholder {p}" for p in copied[:3]] + (
            [f"its words \"{phrase}\""] if phrase else []) + from_example[:5]
        problems.append("repeats the prompt's example: " + ", ".join(what))
    if any(p not in copied for p in slots):
        problems.append("writes placeholders: " + ", ".join(
            p for p in slots if p not in copied)[:200])
    others = [n for n in unknown if n not in from_example]
    if others:
        problems.append("names what its context lacks: " + ", ".join(others[:8]))
    problems += _repeats(_report_fields(obj), obj.get("findings") or [], loops=not composed)
    return problems


# the citation a rule-written finding ends with: "[Sources: a-christmas-carol #44, #45]",
# or its head where the finding was clipped to its bound
_CITATION = regex.compile(r"\[Sources: [^\]\n]*(?:\]|$)", regex.MULTILINE)


def _report_fields(obj: dict) -> list[tuple[str, str]]:
    """(label, text) of every string field of a report reply, in order: title, summary,
    rating_explanation, then each finding's summary and explanation ("finding 1
    summary"); a missing field is ""."""
    fields = [("title", obj.get("title", "")), ("summary", obj.get("summary", "")),
              ("rating_explanation", obj.get("rating_explanation", ""))]
    for i, f in enumerate(obj.get("findings") or [], 1):
        fields += [(f"finding {i} summary", f.get("summary", "")),
                   (f"finding {i} explanation", f.get("explanation", ""))]
    return fields


def _repeats(fields: list[tuple[str, str]], findings: list[dict],
             loops: bool = True) -> list[str]:
    """The "repeats itself" reason of :func:`check_report` ([] or one reason): a loop
    within a field (looked for when ``loops``), the same text (of
    ``SAME_FIELD_MIN_WORDS`` words or more) in two fields, or two findings with the same
    summary."""
    for _, text in fields if loops else []:
        rep = find_repetition(text or "")
        if rep is not None:
            return [f"repeats itself: \"{rep.phrase}\" {rep.count} times"]
    first: dict[tuple[str, ...], str] = {}
    for name, text in fields:
        key = tuple(words(text or ""))
        if len(key) >= SAME_FIELD_MIN_WORDS:
            if key in first:
                return [f"repeats itself: the same text in {first[key]} and {name}"]
            first[key] = name
    seen: set[str] = set()
    for f in findings:
        key = " ".join(words(f.get("summary", "")))
        if key in seen:
            return [f"repeats itself: the finding \"{f['summary']}\" twice"]
        seen.add(key)
    return []
