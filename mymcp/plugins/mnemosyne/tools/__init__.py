"""MCP tool definitions of the Mnemosyne capabilities, one module per group of tools.

`mymcp.plugins.mnemosyne._schemas` assembles them in registry order.
"""
