"""``python -m compatshim doctor``."""

import sys

from compatshim.doctor import main

sys.exit(main())
