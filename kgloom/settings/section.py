"""The base of every settings section: a frozen pydantic model that refuses unknown keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A settings section: frozen (change a copy with ``model_copy(update={...})``),
    unknown keys refused (pydantic ``ValidationError``, a ``ValueError``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
