"""`python -m core.agents.tools`: the agent's `laneway` MCP server (see `server`)."""

from core.agents.tools.server import main

if __name__ == "__main__":  # importing the module (a scan of every module) serves nothing
    main()
