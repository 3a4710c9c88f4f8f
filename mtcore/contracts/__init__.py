"""The contracts: the plugin kinds and the step, what a scheduler must do, the registry that finds
plugins by short name, hooks, errors, counters and what a run returns."""
