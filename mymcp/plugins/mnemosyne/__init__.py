"""Mnemosyne: the bundled, user-governed memory plugin.

`load_mnemosyne_settings` resolves the operator's gates and candidate bound once at
startup; `create_mnemosyne_adapter` turns them into the plugin adapter the host composes;
`mnemosyne_manifest` parses the packaged manifest the host checks that adapter against.
"""

from mymcp.plugins.mnemosyne._adapter import (
    MNEMOSYNE_PINNED_BINDINGS,
    MNEMOSYNE_PLUGIN_ID,
    create_mnemosyne_adapter,
    mnemosyne_manifest,
    pinned_public_name,
    selected_capabilities,
)
from mymcp.plugins.mnemosyne._settings import (
    MnemosyneSettings,
    load_mnemosyne_settings,
    memory_root,
)

__all__ = [
    "MNEMOSYNE_PINNED_BINDINGS",
    "MNEMOSYNE_PLUGIN_ID",
    "MnemosyneSettings",
    "create_mnemosyne_adapter",
    "load_mnemosyne_settings",
    "memory_root",
    "mnemosyne_manifest",
    "pinned_public_name",
    "selected_capabilities",
]
