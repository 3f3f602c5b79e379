"""The ``paths`` section: where the index reads and writes."""

from __future__ import annotations

from pydantic import Field

from kgloom.settings.section import Section


class PathsSettings(Section):
    """Where the index reads and writes (env ``KGLOOM_INPUT_DIR`` / ``KGLOOM_OUTPUT_DIR``)."""

    input_dir: str = Field(default="data/input", description="folder of documents")
    output_dir: str = Field(default="data/output", description="where the index is written")
