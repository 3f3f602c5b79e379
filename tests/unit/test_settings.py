"""The one settings model and its loader (kgloom/settings.py): sections, the file, the
KGLOOM_* variables, overrides, their precedence, and errors that name the key."""

from __future__ import annotations

import pytest

from kgloom.settings import (
    ENV_VARS,
    QUERY_OPTIONS,
    SECTIONS,
    Settings,
    SettingsError,
    load_settings,
    parse_set,
)
from kgloom.settings.indexing import IndexSettings


def test_defaults_are_the_libraries_defaults():
    """The retrieval and search sections are the query side's own classes (one class per
    idea), with its defaults; the per-query defaults are written once, in the settings."""
    from kgloom.query.retrieval import two_step
    from kgloom.query.retriever import RetrievalSettings, Retriever
    from kgloom.query.searcher import Searcher, SearchSettings

    s = load_settings(env={})
    assert s == Settings() and s.index == IndexSettings()
    assert type(s.retrieval) is RetrievalSettings and s.retrieval == RetrievalSettings()
    assert type(s.search) is SearchSettings and s.search == SearchSettings()
    defaults = {"top_k": 5, "depth": 1, "lam": 1.0, "oversample": 5, "damping": 0.5}
    options = s.retrieval.options()
    assert {k: options[k] for k in defaults} == defaults
    assert options["graph_backend"] == "duckdb" and set(options) == set(QUERY_OPTIONS)
    # the mode functions' defaults are the settings' (no second list)
    fn = two_step.retrieve.__defaults__
    assert fn is not None and (fn[0], fn[2]) == (defaults["top_k"], defaults["depth"])
    assert "from_settings" in vars(Retriever) and "from_settings" in vars(Searcher)
    assert list(SECTIONS) == ["paths", "index", "llm", "embedder", "retrieval", "search"]


def test_file_then_env_then_overrides(tmp_path):
    f = tmp_path / "kgloom.yaml"
    f.write_text("paths:\n  output_dir: from-file\n  input_dir: in-file\n"
                 "index:\n  chunk_size: 321\n  max_cluster_size: 7\n"
                 "llm:\n  n_gpu_layers: 5\n"
                 "retrieval:\n  hop_decay: 0.1\n  top_k: 9\n  hybrid_weights: [2.0, 1.0]\n"
                 "search:\n  budget: 999\n  keep_parent: true\n")
    s = load_settings(f, env={})
    assert (s.paths.output_dir, s.index.chunk_size, s.llm.n_gpu_layers) == ("from-file", 321, 5)
    assert (s.retrieval.hop_decay, s.retrieval.top_k, s.retrieval.hybrid_weights) == (
        0.1, 9, (2.0, 1.0))
    assert (s.search.budget, s.search.keep_parent) == (999, True)
    env = {"KGLOOM_OUTPUT_DIR": "from-env", "KGLOOM_N_GPU_LAYERS": "-1",
           "KGLOOM_RETRIEVAL__HOP_DECAY": "0.2", "KGLOOM_INDEX__CHUNK_SIZE": "400",
           "KGLOOM_LLM_URL": "http://a:1, http://b:2", "KGLOOM_EXECUTOR": "in_process"}
    s = load_settings(f, env=env)
    assert (s.paths.output_dir, s.paths.input_dir) == ("from-env", "in-file")
    assert (s.llm.n_gpu_layers, s.retrieval.hop_decay, s.index.chunk_size) == (-1, 0.2, 400)
    assert s.llm.urls == ["http://a:1", "http://b:2"]
    assert s.index.max_cluster_size == 7  # untouched keys keep the file's value
    over = {**parse_set(["retrieval.hop_decay=0.3", "chunk_size=500",
                         "index.entity_types=person, place"]),
            "paths.output_dir": "from-flag", "llm.fake": None}
    s = load_settings(f, over, env=env)
    assert (s.retrieval.hop_decay, s.index.chunk_size, s.paths.output_dir) == (
        0.3, 500, "from-flag")
    assert s.index.entity_types == ("PERSON", "PLACE") and s.llm.fake is False


def test_the_file_is_found_by_option_variable_or_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}).index.chunk_size == 600  # no file: the defaults
    (tmp_path / "kgloom.yaml").write_text("index:\n  chunk_size: 111\n")
    assert load_settings(env={}).index.chunk_size == 111  # ./kgloom.yaml
    other = tmp_path / "other.yaml"
    other.write_text("chunk_size: 222\n")  # the older form: bare index settings
    assert load_settings(env={"KGLOOM_SETTINGS": str(other)}).index.chunk_size == 222
    third = tmp_path / "third.yaml"
    third.write_text("settings:\n  chunk_size: 333\n")
    assert load_settings(env={"KGLOOM_CONFIG": str(third),
                              "KGLOOM_SETTINGS": str(other)}).index.chunk_size == 333
    assert load_settings(other, env={"KGLOOM_CONFIG": str(third)}).index.chunk_size == 222
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.yaml", env={})


@pytest.mark.parametrize("where, named", [
    ({"file": "retrieval:\n  hop_decy: 0.3\n"}, ["retrieval.hop_decy", "hop_decay"]),
    ({"file": "retreival:\n  hop_decay: 0.3\n"}, ["retreival", "retrieval"]),
    ({"file": "index:\n  chunk_size: lots\n"}, ["index.chunk_size", "lots"]),
    ({"file": "index:\n  chunk_size: 100\n  chunk_overlap: 100\n"}, ["chunk_overlap"]),
    ({"file": "search: 3\n"}, ["search", "mapping"]),
    ({"env": {"KGLOOM_SEARCH__BUDGTE": "3"}}, ["search.budgte", "KGLOOM_SEARCH__BUDGTE"]),
    ({"env": {"KGLOOM_N_THREADS": "four"}}, ["KGLOOM_N_THREADS must be an integer", "four"]),
    ({"env": {"KGLOOM_LLM_TIMEOUT_S": "soon"}}, ["KGLOOM_LLM_TIMEOUT_S must be a number"]),
    ({"set": ["llm.n_gpu_layer=3"]}, ["llm.n_gpu_layer", "n_gpu_layers"]),
    ({"set": ["chunksize=3"]}, ["index.chunksize", "chunk_size"]),
    ({"set": ["retrieval.top_k=many"]}, ["retrieval.top_k", "many"]),
    ({"set": ["index.community_backend=networkx"]}, ["community_backend", "leidenalg"]),
])
def test_a_bad_key_or_value_is_refused_naming_it(tmp_path, where, named):
    f = None
    if "file" in where:
        f = tmp_path / "kgloom.yaml"
        f.write_text(where["file"])
    with pytest.raises(SettingsError) as exc:
        load_settings(f, parse_set(where.get("set", [])), env=where.get("env", {}))
    assert all(n in str(exc.value) for n in named), str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_every_named_variable_sets_a_known_setting():
    for var, dotted in ENV_VARS.items():
        section, key = dotted.split(".")
        assert key in SECTIONS[section].model_fields, var
    s = load_settings(env={"KGLOOM_FAKE_LLM": "1", "KGLOOM_EMBEDDER_PATH": "/m",
                           "KGLOOM_LLM_CACHE": "/c.sqlite", "KGLOOM_MODEL_PATH": ""})
    assert (s.llm.fake, s.embedder.model_path, s.llm.cache_path, s.llm.model_path) == (
        True, "/m", "/c.sqlite", "")  # an empty variable counts as unset
    with pytest.raises(SettingsError, match="key=value"):
        parse_set(["chunk_size"])


def test_the_settings_module_imports_neither_dagster_nor_numpy():
    """`kgloom query` loads the settings before it checks its options (nothing heavy)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, kgloom.settings; kgloom.settings.load_settings(env={}); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'dagster', 'numpy', 'polars', 'torch'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


def test_the_defaults_the_index_checks_skip_are_valid():
    """IndexSettings checks record_edges, candidate_source and resolution_methods against
    the stages only when they differ from their defaults; the defaults must be valid."""
    from kgloom.names.candidates import SOURCES
    from kgloom.names.normalize import RESOLUTION_METHODS as ALL_METHODS
    from kgloom.settings.indexing import DEFAULT_RESOLUTION_METHODS

    assert set(DEFAULT_RESOLUTION_METHODS) <= ALL_METHODS
    assert IndexSettings().candidate_source in SOURCES and IndexSettings().record_edges == ()
    with pytest.raises(ValueError, match="resolution_methods"):
        IndexSettings(resolution_methods=("normalized", "guess"))
    with pytest.raises(ValueError, match="candidate_source"):
        IndexSettings(candidate_source="guess")


def test_the_documented_file_holds_every_key_with_its_default(tmp_path):
    """docs/configuration.md's full file loads to exactly the defaults, and names every
    key of every section."""
    from pathlib import Path

    import yaml

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    block = doc.split("## The file", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load(block)
    for section, model in SECTIONS.items():
        assert set(data[section]) == set(model.model_fields), section
    f = tmp_path / "kgloom.yaml"
    f.write_text(block)
    assert load_settings(f, env={}) == Settings()
    for var in ENV_VARS:
        assert f"`{var}" in doc, var


def test_every_environment_variable_read_is_a_setting_or_a_documented_process_variable():
    """Each variable the code names when it reads the environment (``os.environ.get``,
    ``os.getenv``, ``os.environ[...]``, ``setdefault``, Dagster's ``EnvVar``) is a settings
    variable (:data:`ENV_VARS`) or a process variable (:data:`PROCESS_ENV_VARS`), and
    docs/configuration.md's table names every process variable."""
    import re
    from pathlib import Path

    from kgloom.settings import PROCESS_ENV_VARS

    root = Path(__file__).resolve().parents[2]
    read = re.compile(r"(?:environ\.get|getenv|environ\.setdefault|environ\[|EnvVar)"
                      r"""\(?\s*["']([A-Z_][A-Z0-9_]*)["']""")
    found = {m.group(1) for p in (root / "kgloom").rglob("*.py")
             for m in read.finditer(p.read_text())}
    assert {"KGLOOM_EMBEDDER_BACKEND", "DAGSTER_HOME", "KGLOOM_FAKE_LLM_DELAY_S"} <= found
    unknown = found - set(ENV_VARS) - set(PROCESS_ENV_VARS)
    assert not unknown, f"read but neither a setting nor a process variable: {unknown}"
    doc = (root / "docs" / "configuration.md").read_text()
    table = doc.split("## Process variables", 1)[1].split("\n## ", 1)[0]
    missing = [v for v in PROCESS_ENV_VARS if f"`{v}`" not in table]
    assert not missing, f"process variables missing from docs/configuration.md: {missing}"


def test_the_mode_registry_is_the_mode_list():
    """query/retrieval's MODES maps every name of query/modes' RETRIEVAL_MODES, in order,
    to its module's ``retrieve``; the per-mode options are the settings' field names."""
    from kgloom.query import retrieval
    from kgloom.query.modes import RETRIEVAL_MODES, RETRIEVAL_OPTIONS, mode_options
    from kgloom.settings import RetrievalSettings

    assert tuple(retrieval.MODES) == RETRIEVAL_MODES
    for name, fn in retrieval.MODES.items():
        assert fn.__module__ == f"kgloom.query.retrieval.{name}" and fn.__name__ == "retrieve"
    assert set(RETRIEVAL_OPTIONS) <= set(RetrievalSettings.model_fields)
    assert mode_options("fused") == ("depth", "lam", "oversample")
    assert mode_options("bridge") == () and mode_options("ppr") == ("damping",)
    with pytest.raises(ValueError, match="mode must be one of"):
        retrieval.mode_function("local")
