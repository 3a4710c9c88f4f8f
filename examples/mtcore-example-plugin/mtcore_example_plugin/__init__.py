"""An example third-party mtcore plugin package."""
