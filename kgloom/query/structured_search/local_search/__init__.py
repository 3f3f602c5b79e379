"""Local search: answers from the local context of the question's entities."""
