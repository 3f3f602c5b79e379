"""Microsoft GraphRAG's own ``graphrag query`` on a kgloom index, all five methods (local,
global, global with dynamic community selection, DRIFT, basic), through the route of
docs/graphrag.md: ``kgloom graphrag-settings`` writes the settings, ``kgloom
serve-embeddings`` serves the index's embedder (and passes chat through to the model
server, rewriting DRIFT's ``json_schema`` for llama-cpp-python), llama-cpp-python's server
serves the bundled model. Saves ``bench/results/graphrag_route.json`` stamped with commit,
date and load, with what each method printed.

Run (real model; graphrag in its own virtualenv, see docs/graphrag.md)::

    PYTHONPATH=. .venv/bin/python bench/graphrag_route.py --output-dir data/output \\
        --graphrag-python /tmp/kgloom-vs-graphrag/venv/bin/python

The helpers here (:func:`graphrag_python`, :func:`run_query`, :func:`serve_route`) are
also what tests/integration/test_graphrag_route.py drives with the stand-in chat server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.stamp import load_average, save_result, when  # noqa: E402

# graphrag's own virtualenv, as bench/vs_graphrag/run.sh makes it
DEFAULT_GRAPHRAG_VENV = Path("/tmp/kgloom-vs-graphrag/venv")
# (name, --method, extra arguments)
METHODS = (("local", "local", []), ("global", "global", []),
           ("global_dynamic", "global", ["--dynamic-community-selection"]),
           ("drift", "drift", []), ("basic", "basic", []))
QUESTION = "Who is Scrooge and how does he change?"
# GraphRAG's global search answer when no map reply held a usable point
# (graphrag.prompts.query.global_search_reduce_system_prompt.NO_DATA_ANSWER)
GRAPHRAG_NO_DATA = "I am sorry but I am unable to answer this question given the provided data."


def graphrag_python(explicit: str | None = None) -> str | None:
    """A Python that imports graphrag: ``explicit``, else ``$KGLOOM_GRAPHRAG_PYTHON``, else
    the virtualenv bench/vs_graphrag/run.sh makes; None when none does."""
    for cand in (explicit, os.environ.get("KGLOOM_GRAPHRAG_PYTHON"),
                 str(DEFAULT_GRAPHRAG_VENV / "bin" / "python")):
        if cand and Path(cand).exists() and subprocess.run(
                [cand, "-c", "import graphrag.config.load_config"],
                capture_output=True, timeout=120).returncode == 0:
            return cand
    return None


def graphrag_env() -> dict[str, str]:
    """The environment for graphrag's process: no proxy for the local servers, and no
    hub or telemetry lookups (the machine may be offline)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               HF_HUB_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    return env


def run_query(python: str, root: str | Path, method: str, question: str,
              extra: list[str] | None = None, timeout_s: float = 1800.0) -> dict:
    """Run ``graphrag query`` once; return ``rc`` (int; "timeout"), ``seconds``,
    ``answer`` (its stdout, stripped), ``stderr_tail`` (last 1500 characters)."""
    cmd = [python, "-m", "graphrag", "query", "--root", str(root), "--method", method,
           *(extra or []), question]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env=graphrag_env())
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc = "timeout"
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else \
            (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else \
            (exc.stderr or "")
    return {"rc": rc, "seconds": round(time.perf_counter() - t0, 1), "answer": out.strip(),
            "stderr_tail": err[-1500:]}


@contextmanager
def serve_route(output_dir: str | Path, chat_url: str, root: str | Path, **budget_args):
    """Serve the index's embedder (chat passed through to ``chat_url``) on a free port,
    write ``root/settings.yaml`` pointing both models at it; yields (settings path, the
    server's app: ``app.state.chat_calls`` logs each chat call). ``budget_args`` go to
    :func:`kgloom.apps.graphrag_settings.fit_budgets`."""
    from kgloom.apps.embeddings_server import create_app
    from kgloom.apps.graphrag_settings import EMBEDDING_MODEL, fit_budgets, write_settings
    from kgloom.llm.testing import ASGIService
    from kgloom.query.retriever import Retriever

    embedder = Retriever(output_dir).embedder
    with ASGIService(create_app(embedder, EMBEDDING_MODEL, chat_upstream=chat_url)) as srv:
        path = write_settings(output_dir, root, chat_url=srv.url + "/v1",
                              embeddings_url=srv.url + "/v1",
                              budgets=fit_budgets(**budget_args))
        yield path, srv.app


def _stamp() -> dict:
    """This bench's own top-level fields: commit (``+dirty`` when tracked files were
    changed), date and the 1-minute load before the run."""
    s = when(ROOT, dirty=True)
    return {"commit": s["commit"], "date": s["date"], "load_before": s["load_average"][0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-dir", default=str(ROOT / "data" / "output"))
    ap.add_argument("--graphrag-python", default=None)
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--methods", default=",".join(m[0] for m in METHODS),
                    help="comma-separated, run in this order")
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--reply-tokens", type=int, default=1000, help="max_tokens per call")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per method")
    ap.add_argument("--save", default=str(ROOT / "bench" / "results" / "graphrag_route.json"))
    args = ap.parse_args()
    python = graphrag_python(args.graphrag_python)
    if python is None:
        sys.exit("graphrag is not importable: make its virtualenv (docs/graphrag.md)")
    from kgloom.apps.graphrag_settings import CHAT_MODEL
    from kgloom.llm import default_gguf_path
    from kgloom.llm.testing import LlamaCppServer

    result = {**_stamp(), "output_dir": str(Path(args.output_dir).resolve()),
              "question": args.question, "n_ctx": args.n_ctx, "threads": args.threads,
              "reply_tokens": args.reply_tokens,
              "methods": {}}
    save = Path(args.save)
    work = Path(tempfile.mkdtemp(prefix="kgloom-graphrag-route-"))
    log = work / "llama-server.log"
    unknown = set(args.methods.split(",")) - {m[0] for m in METHODS}
    if unknown:
        sys.exit(f"unknown methods {sorted(unknown)}: choose from {[m[0] for m in METHODS]}")
    try:
        with LlamaCppServer(str(default_gguf_path()), CHAT_MODEL, n_threads=args.threads,
                            n_ctx=args.n_ctx, log_path=str(log)) as llama, \
                serve_route(args.output_dir, llama.url, work / "graphrag",
                            context_window=args.n_ctx, reply_tokens=args.reply_tokens
                            ) as (settings, app):
            result["settings"] = settings.read_text(encoding="utf-8")
            spec = {m[0]: m for m in METHODS}
            for name, method, extra in (spec[n] for n in args.methods.split(",")):
                print(f"graphrag query --method {method} {' '.join(extra)} ...", flush=True)
                r = run_query(python, settings.parent, method, args.question, extra,
                              args.timeout)
                r["load_after"] = load_average()[0]
                r["chat_calls"], app.state.chat_calls[:] = list(app.state.chat_calls), []
                result["methods"][name] = r
                print(json.dumps(r, indent=2)[:3000], flush=True)
                save_result(save, result, args, dirty=True)  # keep what ran
        calls = [c for r in result["methods"].values() for c in r["chat_calls"]]
        result["chat_calls"] = len(calls)
        result["context_overflows"] = sum("context" in (c.get("error") or "") for c in calls)
        result["max_prompt_tokens"] = max((c["prompt_tokens"] or 0 for c in calls), default=0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_result(save, result, args, dirty=True)


if __name__ == "__main__":
    main()
