"""`python -m streamcheck ...`: the same command line as the `streamcheck` script."""

from streamcheck.cli import entry

if __name__ == "__main__":
    entry()
