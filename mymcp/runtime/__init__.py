"""The composed host: immutable HostRuntime, bindings, list_tools, external plugin loading
and the input-schema checks. What builds one from the configuration is `mymcp.host`."""

from mymcp.runtime._composition import (
    bind_tool,
    bundled_prefix_problem,
    compose_runtime,
    default_binding,
    is_reserved_name,
    refuse_public_names,
    unpublished_members,
)
from mymcp.runtime._external import (
    activate_external_plugin,
    check_plugin_configuration,
    import_external_plugin,
    load_external_plugins,
    mismatch_diagnostics,
    preflight_manifest,
)
from mymcp.runtime._list_tools import list_tools_payload
from mymcp.runtime._registry import HOST_ORIGIN, BoundTool, ToolRegistry
from mymcp.runtime._runtime import HostRuntime, new_generation_id
from mymcp.runtime._schema import (
    PORTABILITY_ROOT_KEYWORDS,
    ArgumentsValidator,
    ArgumentViolation,
    OutputValidator,
    SchemaFinding,
    compile_input_schema,
    lint_input_schema,
)

__all__ = [
    "HOST_ORIGIN",
    "PORTABILITY_ROOT_KEYWORDS",
    "ArgumentViolation",
    "ArgumentsValidator",
    "BoundTool",
    "HostRuntime",
    "SchemaFinding",
    "ToolRegistry",
    "OutputValidator",
    "activate_external_plugin",
    "bind_tool",
    "bundled_prefix_problem",
    "check_plugin_configuration",
    "import_external_plugin",
    "compile_input_schema",
    "compose_runtime",
    "default_binding",
    "is_reserved_name",
    "refuse_public_names",
    "list_tools_payload",
    "lint_input_schema",
    "load_external_plugins",
    "mismatch_diagnostics",
    "new_generation_id",
    "preflight_manifest",
    "unpublished_members",
]
