"""Names: a kernel any stage and the query side may use (it imports no stage).

- :mod:`kgloom.names.normalize`: the keys names are compared by (entity resolution,
  grounding).
- :mod:`kgloom.names.candidates`: the candidate entity names of a text, for any script.
  Its sources live beside it (:mod:`~kgloom.names.proper_names`,
  :mod:`~kgloom.names.known_names`, :mod:`~kgloom.names.segmenters`,
  :mod:`~kgloom.names.ngrams`), over :mod:`~kgloom.names.corpus_stats`,
  :mod:`~kgloom.names.tokens`, :mod:`~kgloom.names.acronyms`, :mod:`~kgloom.names.scripts`
  and :mod:`~kgloom.names.lexicon`.
- :mod:`kgloom.names.morphology`: word forms of inflected languages (Russian, Polish,
  Czech) that both use.
"""
