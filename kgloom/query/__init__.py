"""Downstream query tools that read kgloom's emitted files (no server, no Dagster)."""
