"""``python -m kgloom.llm.llama_server ARGS``: llama-cpp-python's OpenAI-compatible server
(``python -m llama_cpp.server ARGS``, the same arguments) with the model loaded as
kgloom loads it in-process: without llama.cpp's extra CPU buffer types where the AMX
kernels crashed (:func:`kgloom.llm.llamacpp.plain_cpu_buffers`). Used by
:class:`kgloom.llm.testing.LlamaCppServer`. No Dagster here.
"""

from __future__ import annotations

import runpy

from kgloom.llm.llamacpp import plain_cpu_buffers


def main() -> None:
    """Run ``llama_cpp.server`` as ``__main__`` inside :func:`plain_cpu_buffers`, which
    stays open while it serves (it loads its model at start)."""
    with plain_cpu_buffers():
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
