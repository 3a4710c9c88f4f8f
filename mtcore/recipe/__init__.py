"""Recipes: loading and validation (:mod:`.load`), the graph's references (:mod:`.graph`),
profiles and ``--set`` overrides, stable hashes, the plan and where its steps live
(:mod:`.paths`), and ablations."""
