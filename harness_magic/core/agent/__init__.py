"""The agent plane: the ReAct loop that drives a run (provider call, tool dispatch, transcript), context compaction and the fixed prompts."""
