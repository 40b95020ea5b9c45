"""`python -m core.agents.tools`: the agent's `laneway` MCP server (see `server`)."""

from core import secrecy

if __name__ == "__main__":  # importing the module (a scan of every module) serves nothing
    # Its environment carries the run's tool capability: closed to other processes of the
    # user (another run's agent) before anything else runs.
    secrecy.hide()
    from core.agents.tools.server import main

    main()
