"""MyMCP: a local-first MCP host that serves tools composed from plugins."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["SERVER_NAME", "__version__"]

SERVER_NAME = "mymcp"

try:
    __version__ = version("mymcp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.1.0"
