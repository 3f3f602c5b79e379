"""Names: a kernel any stage and the query side may use (it imports no stage).

- :mod:`kgloom.names.normalize`: the keys names are compared by (entity resolution,
  grounding).
- :mod:`kgloom.names.candidates`: the candidate entity names of a text, for any script.
- :mod:`kgloom.names.morphology`: word forms of inflected languages (Russian, Polish,
  Czech) that both use.
"""
