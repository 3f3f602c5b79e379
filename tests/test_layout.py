"""The package layout: one name per module, the code fingerprint over every stage folder,
and the fake LLM chosen by configuration without importing the test servers."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from kgloom.corpus import partitions

PACKAGE = Path(partitions.__file__).resolve().parents[1]  # this checkout's kgloom/
ROOT = PACKAGE.parent


def _module_names() -> list[str]:
    """Module basenames under kgloom/ (packages count by their folder name)."""
    names = [p.stem for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    names += [p.parent.name for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE]
    return names


def test_no_two_modules_share_a_name():
    twice = sorted(n for n, k in Counter(_module_names()).items() if k > 1)
    assert twice == [], f"module names used twice under kgloom/: {twice}"


def test_code_fingerprint_covers_every_stage_folder(monkeypatch):
    seen: list[str] = []

    def record(kind: str, *parts: str) -> str:
        seen.extend(parts)
        return "x"

    monkeypatch.setattr(partitions, "content_id", record)
    partitions.code_fingerprint()
    hashed = {part.split(":", 1)[0] for part in seen}
    expected = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}
    assert hashed == expected
    assert {"cli.py", "llm/__init__.py", "pipelines/runner.py",
            "reports/community_reports.py"} <= hashed


def test_fake_llm_by_configuration_does_not_import_test_servers(tmp_path):
    code = ("import sys, kgloom.definitions\n"
            "from kgloom.llm import open_llm\n"
            f"llm = open_llm({str(tmp_path / 'cache.sqlite')!r}, fake=True)\n"
            "assert type(llm.backend).__module__ == 'kgloom.llm.fake', type(llm.backend)\n"
            "print(sorted(m for m in sys.modules if m == 'kgloom.testing'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                        "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
