"""`python -m streamcheck ...`: the same command line as the `streamcheck` script."""

import sys

from streamcheck.cli import main

if __name__ == "__main__":
    sys.exit(main())
