"""Work inside a step: resume-safe sharded maps over an executor, child processes, warm starts
(the zygote), moving bytes between files, and compressed files read as streams."""
