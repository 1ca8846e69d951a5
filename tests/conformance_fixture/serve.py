"""Test-only server entry point for `scripts/conformance`: `python -m tests.conformance_fixture.serve`.

The official conformance suite calls its fixture tools by exact names (`test_simple_text`,
...), while MyMCP publishes every external tool as `<plugin-id>__<tool-local-id>`. Rather
than add a switch to the production binding rules, this entry point repeats the
production startup of `mymcp serve` step for step and differs in one place only: the
tools of the fixture plugin (id `conformance`) are bound to their local ids, the way the
bundled Mnemosyne tools are pinned to theirs. Everything else is the real thing: the host
configuration loader and its checks, the external-plugin preflight, import and parity
checks, the bundled Mnemosyne plugin, composition and its collision checks, the
configured authenticator, `create_app` and uvicorn.

It lives under `tests/`, is not part of the installed package and is started only by
`scripts/conformance`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from mymcp import __version__
from mymcp.app import create_app
from mymcp.auth import build_authenticator
from mymcp.config import load_host_configuration, validate_semantics
from mymcp.errors import MyMCPError
from mymcp.plugin import PluginAdapter, QualifiedCapabilityId, validate_plugin_contract
from mymcp.plugins.mnemosyne import (
    create_mnemosyne_adapter,
    load_mnemosyne_settings,
    mnemosyne_manifest,
)
from mymcp.runtime import HostRuntime, compose_runtime, default_binding
from mymcp.runtime._external import load_external_plugins

__all__ = ["FIXTURE_PLUGIN_ID", "conformance_bindings", "main"]

FIXTURE_PLUGIN_ID = "conformance"


def conformance_bindings(
    adapters: Sequence[PluginAdapter],
) -> list[tuple[QualifiedCapabilityId, str]]:
    """Production bindings, except that the fixture plugin's tools keep their local ids."""
    return [
        (
            tool.capability,
            tool.capability.local_id
            if tool.capability.plugin_id in (FIXTURE_PLUGIN_ID, "mnemosyne")
            else default_binding(tool.capability),
        )
        for adapter in adapters
        for tool in adapter.contribution.tools
    ]


def build_conformance_runtime(externals: Sequence[PluginAdapter]) -> HostRuntime:
    """Mnemosyne first, then the external plugins, composed with `conformance_bindings`."""
    bundled = create_mnemosyne_adapter(load_mnemosyne_settings())
    validate_plugin_contract(bundled, mnemosyne_manifest())
    adapters = [bundled, *externals]
    return compose_runtime(
        [adapter.contribution for adapter in adapters],
        conformance_bindings(adapters),
        server_version=__version__,
    )


def main() -> int:
    import uvicorn

    logging.basicConfig(level=logging.INFO)
    try:
        configuration = load_host_configuration()
        validate_semantics(configuration)
        externals = load_external_plugins(configuration.plugins)
        if FIXTURE_PLUGIN_ID not in {adapter.definition.plugin_id for adapter in externals}:
            print("conformance: the fixture plugin is not enabled", file=sys.stderr)
            return 1
        runtime = build_conformance_runtime(externals)
        authenticator = build_authenticator(configuration.authentication, configuration.server)
    except MyMCPError as exc:
        print(f"conformance: error: {exc.message} (code={exc.code})", file=sys.stderr)
        return 1
    app = create_app(
        runtime,
        authenticator=authenticator,
        configuration=configuration,
        protected_resource_metadata=authenticator.protected_resource_metadata,
    )
    server = configuration.server
    uvicorn.run(app, host=server.address, port=server.port, log_level="info", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
