"""``python -m capstones.byte_transformer COMMAND [key=value ...]`` (see cli.py)."""

import sys

from capstones.byte_transformer import cli

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
