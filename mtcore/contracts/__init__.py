"""The contracts: the plugin base and kinds, the step, what a scheduler must do, the resources a
step holds, what enters a step's hash, the registry that finds plugins by short name, hooks,
errors and counters."""
