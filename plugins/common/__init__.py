"""The shared layer of the built-in plugins: glue to fairseq (checkpoints, the training entry,
decoding, force decoding, vocabulary mapping), CTranslate2 (conversion, decoding, scoring),
SentencePiece, KenLM, sentence encoders, the word segmenters, n-best files, BLEU statistics and
truecasing. Every plugin kind (filters, steps, scorers, ...) may import it; it imports no plugin
kind, and no kind imports another kind's modules (``tests/test_lint.py`` checks both)."""
