"""python3 -m tools.report [TESTLOGS] [--out FILE]: see cli.py."""

import sys

from tools.report import cli

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv))
