"""``python -m capstones.pallas_kernel COMMAND [key=value ...]`` (see cli.py)."""

import sys

from capstones.pallas_kernel import cli

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
