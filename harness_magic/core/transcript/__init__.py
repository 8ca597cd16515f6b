"""The run's record: typed messages, the events the loop emits, the JSONL turn log and the secret scrubber every recorded text passes."""
