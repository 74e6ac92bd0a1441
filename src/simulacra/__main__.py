"""``python -m simulacra``: the same command line as ``simulacra``."""

import sys

from simulacra.cli import main

if __name__ == "__main__":
    sys.exit(main())
