"""The fused-retrieve study: kgloom's fused retrieve against the two-step baseline on a
graph of ogbn-arxiv's size and shape (see README.md in this folder)."""
