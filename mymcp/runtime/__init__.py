"""The composed host: immutable HostRuntime, bindings, list_tools and bootstrap."""

from mymcp.runtime._composition import compose_runtime, default_binding, is_reserved_name
from mymcp.runtime._list_tools import list_tools_payload
from mymcp.runtime._registry import HOST_ORIGIN, BoundTool, ToolRegistry
from mymcp.runtime._runtime import HostRuntime, new_generation_id

__all__ = [
    "HOST_ORIGIN",
    "BoundTool",
    "HostRuntime",
    "ToolRegistry",
    "compose_runtime",
    "default_binding",
    "is_reserved_name",
    "list_tools_payload",
    "new_generation_id",
]
