"""Text helpers: language codes, word segmentation, tags, truecasing, SentencePiece models,
deduplication keys."""
