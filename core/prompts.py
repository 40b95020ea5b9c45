"""The prompt an agent gets for a step: one builder, used by every path that starts an agent."""

from __future__ import annotations


def build_prompt(workflow_prompt: str, step_prompt: str, description: str) -> str:
    """Workflow prompt, then step prompt, with {{task_prompt}} replaced by the description."""
    parts = [p for p in (workflow_prompt.strip(), step_prompt.strip()) if p]
    prompt = "\n\n".join(parts) if parts else "{{task_prompt}}"
    return prompt.replace("{{task_prompt}}", description)
