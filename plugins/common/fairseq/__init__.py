"""fairseq glue that loading and training share: the setup before fairseq's import, checkpoint
files, the extension point of the shared Transformer."""
