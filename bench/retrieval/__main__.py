"""``python -m bench.retrieval``: the study's command line (see cli.py)."""

from bench.retrieval.cli import app

app()
