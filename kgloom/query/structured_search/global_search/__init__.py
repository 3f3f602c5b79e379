"""Global search: map-reduce over the community reports of a selection."""
