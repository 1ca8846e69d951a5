"""Mnemosyne: the bundled, user-governed memory plugin.

`load_mnemosyne_settings` resolves the operator's gates and candidate bound once at
startup; `create_mnemosyne` turns them into the plugin (its adapter, the services behind
the tools and the index build a server starts with); `mnemosyne_manifest` parses the
packaged manifest the host checks the adapter against. Its tools keep their names
(`memory_recall`, ...): the host binds them to their local ids.
"""

from mymcp.plugins.mnemosyne._adapter import (
    Mnemosyne,
    create_mnemosyne,
    mnemosyne_manifest,
    selected_capabilities,
)
from mymcp.plugins.mnemosyne._settings import (
    MnemosyneSettings,
    load_mnemosyne_settings,
    memory_root,
)

__all__ = [
    "Mnemosyne",
    "MnemosyneSettings",
    "create_mnemosyne",
    "load_mnemosyne_settings",
    "memory_root",
    "mnemosyne_manifest",
    "selected_capabilities",
]
