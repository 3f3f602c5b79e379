"""What every bench result is stamped with, and how it is saved (one place for both).

``stamp(where)`` -> ``{"commit", "date", "load_average"}``: the short commit of the git
checkout holding ``where`` ("unknown" outside one; with ``dirty=True``, ``+dirty`` added
when tracked files differ from it), the UTC date (ISO 8601, seconds) and
``os.getloadavg()`` rounded to 2 places. ``save_json(path, obj)`` writes ``obj`` as indented
UTF-8 JSON, creating the folder, and prints where.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any


def stamp(where: str | Path, dirty: bool = False) -> dict[str, Any]:
    """Commit of the checkout holding ``where`` (``+dirty`` when ``dirty`` and tracked
    files were changed), date (UTC) and load average."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True,
                              text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        if dirty and git("status", "--porcelain", "--untracked-files=no"):
            commit += "+dirty"
    except (subprocess.CalledProcessError, FileNotFoundError):
        commit = "unknown"
    return {"commit": commit,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def save_json(path: Path, obj: Any) -> None:
    """Write ``obj`` to ``path`` as indented UTF-8 JSON (folder created) and say so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"saved {path}")
