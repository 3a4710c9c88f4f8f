"""Work inside a step: resume-safe sharded maps over an executor, child processes, warm starts
(the zygote), and moving bytes between files."""
