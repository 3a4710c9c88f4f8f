"""fairseq models as CTranslate2 models: their conversion (``convert``, ``spec``) and force
decoding at CTranslate2's speed (``force``)."""
