"""A third-party mtcore package adding a step and a data selector through entry points alone."""
