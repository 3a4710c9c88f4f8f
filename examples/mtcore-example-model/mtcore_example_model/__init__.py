"""An example third-party model family for mtcore: one file (``gain.py``) and one entry point."""
