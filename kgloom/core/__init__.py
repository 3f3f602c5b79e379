"""The base modules every layer may use; they import nothing of kgloom outside ``core``.

In tiers, each importing only the tiers before it (``tests/unit/test_layout.py``):
``ids``, ``schemas``, ``cache_db``, ``plots``, ``processes`` (no kgloom import) <-
``storage`` (atomic reads and writes of tables) <- ``layout`` (the output folder:
stages, tables, every output file name, :class:`TableStore`) <- ``lock``, ``stats``,
``inputs``, ``builds``.
"""
