"""MCP servers as connectors: a local server started confined, or a remote one over streamable HTTP (issue 34.1)."""
