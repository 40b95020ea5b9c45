"""The hooks a laneway plugin may implement: a re-export of `core.plugin.specs`, where they
are declared, kept at this name for the plugin author's reference and the hook docs."""

from core.plugin.specs import *  # noqa: F403
from core.plugin.specs import __doc__ as __doc__  # noqa: PLC0414
