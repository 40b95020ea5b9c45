"""Agent sessions for real: subprocess agents, their turns, retries and failure routes."""
