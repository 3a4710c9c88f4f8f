"""Sentence similarity for selection and filtering: sentence encoders, nearest-neighbour search,
test-set topic matching."""
