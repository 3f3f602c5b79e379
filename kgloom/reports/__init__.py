"""Reports stage (domain only, no Dagster): a community report per community, by rules or
the LLM, deepest level first. Its asset: :mod:`kgloom.assets.report_assets`."""
