"""Test-only server for `scripts/conformance`: `python -m tests.conformance_fixture.serve`.

The official conformance suite calls its fixture tools by exact names (`test_simple_text`,
...), while MyMCP publishes every external tool as `<plugin-id>__<tool-local-id>`. Rather
than add a switch to the production binding rules, this entry point runs the production
`mymcp serve` path with one different binding policy: the fixture plugin's tools (id
`conformance`) keep their local ids, the way the bundled Mnemosyne tools are pinned to
theirs. Configuration loading, plugin preflight/import/parity checks, composition and its
collision checks, authentication, `create_app` and uvicorn are all the real thing.

It lives under `tests/`, is not part of the installed package and is started only by
`scripts/conformance`.
"""

from __future__ import annotations

import sys

from mymcp.cli import serve
from mymcp.plugin import QualifiedCapabilityId
from mymcp.runtime.bootstrap import production_binding

__all__ = ["FIXTURE_PLUGIN_ID", "conformance_binding"]

FIXTURE_PLUGIN_ID = "conformance"


def conformance_binding(capability: QualifiedCapabilityId) -> str:
    """Production bindings, except that the fixture plugin's tools keep their local ids."""
    if capability.plugin_id == FIXTURE_PLUGIN_ID:
        return capability.local_id
    return production_binding(capability)


if __name__ == "__main__":
    sys.exit(serve(conformance_binding))
