"""``python -m mtcore.cli_entry``: the CLI without relying on the console script."""

from mtcore.cli import main

if __name__ == "__main__":
    main()
