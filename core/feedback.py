"""Moved to `core.agents.feedback` (issue 37); this name stays for one release and is that
module itself."""

import sys

from core.agents import feedback as _moved

sys.modules[__name__] = _moved
