"""``python -m compatshim run|doctor|bench|report``."""

import sys

from compatshim._cli import main

sys.exit(main())
