"""Text in columnar form (a shard of a corpus as UTF-8 bytes and code points), the compiled
kernels over it, and the characters a corpus line is checked for."""
