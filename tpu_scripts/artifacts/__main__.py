"""python -m tpu_scripts.artifacts NAME ...: the artifact commands before the CLI wires them."""

import sys

from tpu_scripts import artifacts

sys.exit(artifacts.main())
