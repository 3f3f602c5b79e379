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
    assert {"cli/main.py", "llm/__init__.py", "cli/runner.py", "assets/graph_assets.py",
            "reports/community_reports.py"} <= hashed


def test_fake_llm_by_configuration_does_not_import_test_servers(tmp_path):
    code = ("import sys, kgloom.definitions\n"
            "from kgloom.llm import open_llm\n"
            f"llm = open_llm({str(tmp_path / 'cache.sqlite')!r}, fake=True)\n"
            "assert type(llm.backend).__module__ == 'kgloom.llm.fake', type(llm.backend)\n"
            "print(sorted(m for m in sys.modules if m == 'kgloom.llm.testing'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                        "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


# --- the layers (docs/architecture.md "Layers"): imports point one way -----------------------
# The shared modules, in tiers (each imports only the tiers before it) <- the stages' domain
# logic <- the Dagster packages (resources <- pipelines <- assets <- definitions) <- the
# applications over an index <- the command line. The query side reads published files and
# shared modules only. A folder may import its own files and anything in a lower layer;
# stages and the query side import shared modules only, never each other.
SHARED_TIERS: list[set[str]] = [
    {"kgloom", "core"},  # the package's __init__; core/: no kgloom import outside core/
    {"names"},  # candidate names, name keys, grounding checks
    {"llm"},  # the LLM layer (and the test servers of model servers)
    {"embedding"},  # the embedder, the vector store's read side, the tokenizer
    {"settings"},  # every settings section
    {"report_writer"},  # one community report, shared by the reports stage and global search
]
KERNELS = set().union(*SHARED_TIERS)
STAGES = {"ingest", "extraction", "corpus", "graph", "reports", "publish"}
LAYERS: list[set[str]] = [
    *SHARED_TIERS, STAGES | {"query"}, {"resources"}, {"pipelines"}, {"assets"},
    {"definitions"}, {"serve", "apps"}, {"cli"}]
KERNELS_ONLY = STAGES | {"query"}
# inside core/, tiers of modules (core/__init__.py)
CORE_TIERS: list[set[str]] = [
    {"ids", "schemas", "cache_db", "plots", "processes"}, {"storage"}, {"layout"},
    {"lock", "stats", "inputs", "builds"}]


def _folder(module: str) -> str:
    """``kgloom.graph.communities`` -> ``graph``; ``kgloom`` -> ``kgloom``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _runtime_nodes(tree):
    """Every node of ``tree`` outside ``if TYPE_CHECKING:`` blocks (annotations only)."""
    import ast

    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def _imports() -> dict[str, set[str]]:
    """Every kgloom module -> the kgloom modules it imports at run time (at any depth in
    the file: lazy imports inside functions count too; ``if TYPE_CHECKING:`` ones, which
    only annotate, do not)."""
    import ast

    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                    node.module.split(".")[0] == "kgloom":
                for alias in node.names:  # from kgloom import schemas: the module schemas
                    sub = f"{node.module}.{alias.name}"
                    is_module = (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists() or \
                        (PACKAGE.parent / sub.replace(".", "/") / "__init__.py").exists()
                    found.add(sub if is_module else node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == "kgloom"}
        graph[module] = found
    return graph


def _layer(folder: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if folder in names)


def test_every_folder_has_a_layer():
    folders = {_folder(m) for m in _imports()}
    missing = folders - set().union(*LAYERS)
    assert not missing, f"give these a layer in LAYERS: {sorted(missing)}"


def test_no_import_points_upward_or_between_stages():
    upward = []
    for module, targets in _imports().items():
        src = _folder(module)
        for target in targets:
            dst = _folder(target)
            if dst == src or dst == "kgloom":
                continue
            if (src in KERNELS_ONLY and dst not in KERNELS) or _layer(dst) > _layer(src) or \
                    (src in KERNELS and dst not in KERNELS):
                upward.append(f"{module} -> {target}")
    assert upward == [], "imports against the layers:\n" + "\n".join(sorted(upward))


def test_core_modules_import_only_earlier_core_tiers():
    def tier(module: str) -> int:
        name = module.split(".")[2]
        return next(i for i, names in enumerate(CORE_TIERS) if name in names)

    core = [m for m in _imports() if m.startswith("kgloom.core.")]
    assert {m.split(".")[2] for m in core} == set().union(*CORE_TIERS), \
        "give every core module a tier in CORE_TIERS"
    upward = [f"{m} -> {t}" for m in core for t in _imports()[m]
              if t.startswith("kgloom.core.") and tier(t) >= tier(m) and t != m]
    assert upward == [], "core imports against its tiers:\n" + "\n".join(sorted(upward))


def test_no_import_cycle_between_files():
    import graphlib

    graph = _imports()
    modules = set(graph)
    # a package's __init__ re-exporting its own modules is not a cycle of files
    edges = {m: {t for t in graph[m] if t in modules and not m.startswith(t + ".")
                 and not (t.startswith(m + ".") and m != "kgloom")}
             for m in graph}
    try:
        list(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle between files: {exc.args[1]}") from None
