"""The search methods, one folder each as GraphRAG lays them out: ``local_search``,
``global_search``, ``basic_search`` (kgloom's ``direct`` mode), each a small class over
:class:`kgloom.query.structured_search.search_base.BaseSearch`, building its context with
:mod:`kgloom.query.context_builder`. :class:`kgloom.query.searcher.Searcher` routes a
question to one of them."""
