"""harness_magic: a bash-free data agent for Jupyter (placeholder until the API lands)."""
