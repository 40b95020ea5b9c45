"""The tool server (AGENTS.md "The tool server: how an agent acts on the board").

Two halves, in two processes:

- the worker's `ToolBroker` (`core.agents.tools.broker`), which holds the board: it listens
  on a unix socket in a private directory, authenticated with a key of its own, and answers
  tool calls for the runs it granted, each call checked against its grant (task, step, seat);
- the agent's MCP server `laneway` (`core.agents.tools.server`, `python -m
  core.agents.tools`), started by the agent from ACP's `mcpServers`: it holds only the
  socket's path, the key and its run's token, and forwards each call to the broker. It
  imports nothing that opens a database, and its environment names none.

Nothing is imported here: the agent's server must not load the broker's half (the store,
the services) by importing this package.
"""
