#!/usr/bin/env bash
# Indexing side by side, Microsoft GraphRAG 3.3.0 and kgloom, in one command:
#   bash bench/vs_graphrag/run.sh [compare.py options, e.g. --threads 1 --timeout 2700]
# Makes GraphRAG's own virtualenv when it is missing (never kgloom's), then runs
# bench/vs_graphrag/compare.py with kgloom's virtualenv; saves bench/results/vs_graphrag.json.
# Environment: KGLOOM_PYTHON (default .venv/bin/python of this checkout, else
# /work/main/.venv/bin/python), GRAPHRAG_VENV (default /tmp/kgloom-vs-graphrag/venv),
# NICENESS (default 10: both sides run under it, the model server included).
set -euo pipefail
cd "$(dirname "$0")/../.."
GRAPHRAG_VENV=${GRAPHRAG_VENV:-/tmp/kgloom-vs-graphrag/venv}
if [ -z "${KGLOOM_PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then KGLOOM_PYTHON=.venv/bin/python
  else KGLOOM_PYTHON=/work/main/.venv/bin/python; fi
fi
if ! "$GRAPHRAG_VENV/bin/python" -c "import graphrag, bpe_openai" 2>/dev/null; then
  echo "making GraphRAG's virtualenv in $GRAPHRAG_VENV (graphrag==3.3.0, bpe-openai) ..."
  python3 -m venv "$GRAPHRAG_VENV"
  "$GRAPHRAG_VENV/bin/pip" install --quiet graphrag==3.3.0 bpe-openai
fi
exec nice -n "${NICENESS:-10}" env PYTHONPATH="$PWD" HF_HUB_OFFLINE=1 \
  "$KGLOOM_PYTHON" bench/vs_graphrag/compare.py --graphrag-venv "$GRAPHRAG_VENV" "$@"
