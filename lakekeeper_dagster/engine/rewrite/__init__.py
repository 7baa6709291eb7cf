"""Rewriting a unit: reading with the table's schema, choosing the codec, fingerprinting rows and content."""
