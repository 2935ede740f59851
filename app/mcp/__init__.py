"""The MCP server: coding agents ask about their student and steer it (status, cycles, approvals, marks, questions)
through the School facade. `server` holds the tools and the transports (stdio, loopback HTTP with a bearer token);
`access` holds the token (light: no SDK import); `models` the tools' typed results."""

DEFAULT_PORT = 8766  # HTTP transport (the built-in model server has 8765)
PATH = "/mcp"
