"""Loaded fairseq translation models: beam search and sampling (``translator``) and force
decoding (``force``)."""
