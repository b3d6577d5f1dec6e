"""The ground floor, shared by every layer: typed errors, logging, atomic file writes, signed JSON, and the
hints people get (did-you-mean suggestions, near-miss memory sizes)."""
