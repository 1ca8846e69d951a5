"""Plugins bundled with MyMCP."""
