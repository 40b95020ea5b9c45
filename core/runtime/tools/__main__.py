"""`python -m core.runtime.tools`: the agent's `laneway` MCP server (see `server`)."""

from core.runtime.tools.server import main

main()
