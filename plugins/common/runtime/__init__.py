"""Processes started for plugins: isolated workers for heavy calls, private local Ray clusters."""
