"""Corpora on disk: line-aligned streaming I/O, reading files through the input policy (also
sharded), formats beyond one segment per line, and members of archives."""
