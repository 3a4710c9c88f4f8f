"""``python -m mtcore.cli``: the CLI without relying on the console script."""

from mtcore.cli.app import main

if __name__ == "__main__":
    main()
