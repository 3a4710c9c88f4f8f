"""Text in columnar form (a shard of a corpus as UTF-8 bytes and code points) and the compiled
kernels over it."""
