"""``python -m bkeeper`` runs the command line."""

from bkeeper.cli.main import main

if __name__ == "__main__":
    main()
