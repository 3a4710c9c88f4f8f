"""What presents a run: ``report.md`` and the hook that writes it, the run page
(``report.html``), side-by-side runs (``mtcore compare``), the progress display and experiment
tracking."""
