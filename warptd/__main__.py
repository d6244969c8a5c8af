import sys

from warptd.cli import main

if __name__ == "__main__":  # a spawned stress worker imports the main module; it must not rerun the CLI
    sys.exit(main())
