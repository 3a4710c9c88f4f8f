"""What more than one plugin kind uses, by concern (each folder's ``__init__`` says what it
holds; the order between them is an import-linter contract in pyproject.toml):

- ``hub``: downloads, their lock file, mirrors, pretrained Hugging Face models;
- ``neural_metrics``: COMET and MetricX models;
- ``similarity``: sentence encoders, nearest neighbours, test-set topics;
- ``lm``: KenLM models, Moore-Lewis;
- ``ct2``: fairseq models converted to CTranslate2, its force decoding;
- ``decoding``: loaded fairseq ensembles, beam search, force decoding;
- ``fairseq``: setup before fairseq's import, checkpoints, the shared Transformer's extensions;
- ``text``: language codes, word segmenters, tags, truecasing, SentencePiece, dedup keys;
- ``runtime``: isolated workers, private local Ray clusters.

The layers, top to bottom: ``hub | neural_metrics | similarity | lm``, ``ct2``, ``decoding``,
``fairseq``, ``text | runtime``. A folder imports only folders of lower layers, not the other
folders of its own layer; every plugin kind may import this package, and it imports no kind.
What only one kind uses lives in that kind's folder as a private ``_*.py`` module (the steps'
training entry, score tables, n-best files, exports, ...)."""
