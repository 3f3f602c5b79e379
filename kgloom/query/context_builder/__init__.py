"""What search contexts are built from: verbalized, cited lines packed into a token
budget (:mod:`.context`), the tables search reads (:mod:`.tables`), the local context
(:mod:`.local_context`) and the global one (:mod:`.community_context`, with the lazy
reports global search writes on first use, :mod:`.lazy_reports`)."""
