"""Reports stage: a community report per community, by rules or the LLM, deepest level
first (``report_assets``: ``community_reports``)."""
