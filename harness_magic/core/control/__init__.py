"""The control plane: what bounds and steers a run from outside the loop (budgets, planner, reminders, verification, replay, subagents)."""
