"""Running a plan: the runner and its schedule loop, one step's job, the step cache, what a run
shows while it runs, the report it leaves, and side-by-side runs (``mtcore compare``)."""
