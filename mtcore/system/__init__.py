"""A finished system: scores with signatures, translating new text, and export."""
