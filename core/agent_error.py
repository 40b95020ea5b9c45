"""Moved to `core.agents.failure` (issue 37); this name stays for one release and is that
module itself."""

import sys

from core.agents import failure as _moved

sys.modules[__name__] = _moved
