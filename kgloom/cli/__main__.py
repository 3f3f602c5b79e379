"""``python -m kgloom.cli ...``: the same command line as ``kgloom ...``."""

from kgloom.cli.main import app

app()
