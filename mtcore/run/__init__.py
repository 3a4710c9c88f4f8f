"""Running a plan: the runner and its schedule loop, one step's job, the step cache, what a run
returns, ``plan.json``, and the schedule simulated for ``mtcore plan --slots``."""
