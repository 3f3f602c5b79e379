"""Basic search (the ``direct`` mode): plain vector RAG."""
