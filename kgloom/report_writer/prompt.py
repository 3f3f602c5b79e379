"""The community report's prompts and reply schemas: :data:`REPORT_TEMPLATE` (free
form), :data:`CHOICES_TEMPLATE` (choices among the community's options), the brief
schema of small communities, and the versions and bounds a report key and the checks
depend on.
"""

from __future__ import annotations

import copy
import json

from kgloom.core import layout
from kgloom.core.ids import content_id
from kgloom.llm import PromptTemplate

STAGE = layout.COMMUNITY_REPORTS

_REPORT_USER = "Community data:\n{context}"
# No worked example: the JSON-schema grammar alone shapes the reply. A small model
# copied the former example's people and places (Sherlock Holmes, Baker Street) into 12
# of the book's 60 reports, and a placeholder example's "<a fact about <name 1>>" into 9
# of 22 replies; with no example, 4 of the same 22 named anything outside their context
# (bench/results/eval_reports_book_real.json).

REPORT_TEMPLATE = PromptTemplate(
    name="community_report",
    system=("You write a short report about a community of related entities in a knowledge "
            "graph, using only the data given. Answer with JSON only: a title naming its key "
            "entities, a summary of how they are related, an importance rating from 0 to 10 "
            "with a one-sentence explanation, and up to three findings, each a short "
            "statement with an explanation grounded in the data. Name only the entities "
            "of the data."),
    user=_REPORT_USER,
    schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 60},
            "summary": {"type": "string", "minLength": 1, "maxLength": 300},
            # an enum, since llama-cpp-python's grammar ignores minimum/maximum
            "rating": {"type": "integer", "enum": list(range(11))},
            "rating_explanation": {"type": "string", "minLength": 1, "maxLength": 120},
            "findings": {"type": "array", "minItems": 1, "maxItems": 3,
                         "items": {"type": "object",
                                   "properties": {
                                       "summary": {"type": "string", "minLength": 1,
                                                   "maxLength": 80},
                                       "explanation": {"type": "string", "minLength": 1,
                                                       "maxLength": 320}},
                                   "required": ["summary", "explanation"]}},
        },
        "required": ["title", "summary", "rating", "rating_explanation", "findings"],
    },
    max_tokens=600,
)
# What the model writes with llm_report_form "choices" (the default): choices among
# options taken from the community's data, which the rule report's sentences then carry
# (report_options, rule_report's picks). The options are listed under the data and are
# the reply's enums, so the reply can only pick among them.
CHOICES_TEMPLATE = PromptTemplate(
    name="community_report_choices",
    system=("You help write a short report about a community of related entities in a "
            "knowledge graph. Below its data are options taken from that data. Answer with "
            "JSON only: the title that best names the community, the sentence that best "
            "says how its members are related, up to three relationships most worth "
            "reporting, and the community's importance from 0 to 10."),
    user="Community data:\n{context}\n\nOptions:\n{options}",
    schema={},  # per community: ReportOptions.schema
    max_tokens=400,
)
MAX_TITLE_OPTIONS = 5
MAX_SENTENCE_OPTIONS = 5
MAX_FINDING_OPTIONS = 8
_RATINGS = [str(k) for k in range(11)]
# generated_by of a published report: by the model, by rules, or by rules awaiting the
# LLM report global search writes on first use (llm_reports: lazy; kgloom.core.schemas)
REPORT_METHODS = ("llm", "rules", "lazy")
RULES_VERSION = "rules-4"  # bump when rule_report's output changes (part of report_key)
GROUNDING_VERSION = "grounding-1"  # bump when check_report's rules change (part of report_key)
REJECTED = "report rejected, rule report published: "  # failures reason of a rejected reply
# a reply copying one field's text into another (a finding's summary as its explanation)
# says nothing new: seen in the book's real-model reports, 3-4 fields alike
SAME_FIELD_MIN_WORDS = 4


def _brief_schema(schema: dict) -> dict:
    """``schema`` cut to a brief report: one finding, shorter summary and explanations."""
    props = copy.deepcopy(schema["properties"])
    props["summary"]["maxLength"] = 200
    props["rating_explanation"]["maxLength"] = 80
    props["findings"]["maxItems"] = 1
    props["findings"]["items"]["properties"]["explanation"]["maxLength"] = 120
    return {**schema, "properties": props}


# The reply schema of a community of at most ``report_brief_max_members`` members: the
# same fields (so the same table, the same markdown) with one finding and shorter
# strings. The prompt is REPORT_TEMPLATE's, word for word, so the KV cache of its fixed
# prefix serves both sizes; only the grammar differs.
BRIEF_REPORT_SCHEMA = _brief_schema(REPORT_TEMPLATE.schema)
_BRIEF_KEY = ("brief", content_id("schema", json.dumps(BRIEF_REPORT_SCHEMA, sort_keys=True)))
