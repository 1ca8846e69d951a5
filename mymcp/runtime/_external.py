"""Operator-declared external plugins: preflight every manifest, then import and check each.

External plugins are trusted, in-process code: importing a module runs it with the
server's privileges. That is why every enabled manifest is read and validated before any
module is imported, so a broken declaration fails startup without running plugin code.

Failures raise `ExternalPluginLoadError` with a stable code and fixed message (all a log
line carries). For the operator's terminal the error also names the manifest file and
key, or the plugin and its module, and the cause: the manifest rule that failed, the
import's exception type and message, each parity mismatch.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

from mymcp._safefile import SafeFileError, as_error, read_safe_file
from mymcp.config import PluginDeclaration, locate_in_configuration
from mymcp.errors import (
    Diagnostic,
    ExternalPluginLoadError,
    Location,
    ManifestError,
    StopRequested,
)
from mymcp.plugin import (
    HOST_API_VERSION,
    MAX_MANIFEST_BYTES,
    PluginAdapter,
    PluginDefinition,
    parse_manifest,
    plugin_contract_mismatches,
)

__all__ = [
    "ENTRYPOINT_NAME",
    "MAX_EXTERNAL_CAPABILITIES",
    "MAX_EXTERNAL_PLUGINS",
    "activate_external_plugin",
    "check_plugin_configuration",
    "import_external_plugin",
    "load_external_plugins",
    "mismatch_diagnostics",
    "plugin_label",
    "preflight_manifest",
]

ENTRYPOINT_NAME: Final = "mymcp_plugin_v1"
MAX_EXTERNAL_PLUGINS: Final = 32
MAX_EXTERNAL_CAPABILITIES: Final = 256


def plugin_label(plugin_id: str | None, module: str) -> str:
    """How the terminal names a plugin: `plugin <id> (module <module>)`."""
    return f"module {module}" if plugin_id is None else f"plugin {plugin_id} (module {module})"


def preflight_manifest(path: Path, plugin_id: str | None = None) -> PluginDefinition:
    """Read and validate one manifest as the server does before importing anything: the
    safe-file rules, manifest v1, host API 1, and (when given) the declared plugin id.

    `mymcp plugin check` runs exactly this, so both name a fault with the same code.
    """
    try:
        data = read_safe_file(path, max_bytes=MAX_MANIFEST_BYTES)
    except SafeFileError as exc:
        raise as_error(exc, ExternalPluginLoadError, "external_manifest_") from None
    try:
        definition = parse_manifest(data, path)
    except ManifestError as exc:
        raise ExternalPluginLoadError(
            "external_manifest_invalid",
            location=exc.location,
            detail=f"{exc.code}: {exc.detail or exc.message}",
        ) from None
    where = Location(source=str(path))
    if plugin_id is not None and definition.plugin_id != plugin_id:
        raise ExternalPluginLoadError(
            "external_manifest_identity_mismatch",
            location=Location(str(path), key="id"),
            detail=f"the manifest says {definition.plugin_id!r}, "
            f"the [[plugins]] entry {plugin_id!r}",
        ) from None
    if not definition.requires.admits(HOST_API_VERSION):
        bounds = definition.requires
        raise ExternalPluginLoadError(
            "external_manifest_host_api_incompatible",
            location=Location(where.source, key="requires.host_api"),
            detail=f"the plugin supports host API {bounds.minimum} to {bounds.maximum}; "
            f"this MyMCP implements {HOST_API_VERSION}",
        ) from None
    return definition


def _plain(value: Any) -> Any:
    """A plain, private copy of the operator's configuration values."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return copy.copy(value)


class _CtrlC:
    """Notes whether a real SIGINT arrived while plugin code ran: a plugin may raise
    KeyboardInterrupt itself, which is its own failure, not a person stopping the
    process. Where the handler cannot be replaced (not the main thread, or a handler of
    someone else's), every KeyboardInterrupt is taken as the person's."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None

    def __enter__(self) -> _CtrlC:
        in_main = threading.current_thread() is threading.main_thread()
        if in_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._note)
        else:
            self.pressed = True
        return self

    def _note(self, signum: int, frame: object) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class _ExitCalled(BaseException):
    """Raised in place of `os._exit` called by plugin code while it loads."""

    def __init__(self, status: object) -> None:
        super().__init__(f"called os._exit({status!r}) while it loaded")


class _ExitRefused:
    """While plugin code loads, `os._exit` raises `_ExitCalled` instead of ending the
    process: it would end `mymcp check` or the start with no line naming the plugin (and
    the log lines still queued lost), and a check would pass on its status alone. Only
    the loading thread of this process is refused; a child the plugin forked, and any
    thread of its own, keep the real call."""

    def __init__(self) -> None:
        self._real = os._exit
        self._pid = os.getpid()
        self._thread = threading.get_ident()

    def _refuse(self, status: int) -> NoReturn:
        if os.getpid() != self._pid or threading.get_ident() != self._thread:
            self._real(status)
        raise _ExitCalled(status)

    def __enter__(self) -> None:
        os._exit = self._refuse

    def __exit__(self, *exc: object) -> None:
        os._exit = self._real


def _stops_the_process(exc: BaseException, ctrl_c: _CtrlC) -> bool:
    """Whether `exc`, raised while plugin code ran, is the process being stopped (the
    SIGTERM handler's `StopRequested`, or Ctrl-C) rather than the plugin failing."""
    if isinstance(exc, StopRequested):
        return True
    return isinstance(exc, KeyboardInterrupt) and ctrl_c.pressed


def _call_entrypoint(
    entrypoint: Callable[..., object], configuration: Mapping[str, Any], where: Location
) -> object:
    """`mymcp_plugin_v1()`, or `mymcp_plugin_v1(configuration)` when it takes a parameter."""
    try:
        parameters = inspect.signature(entrypoint).parameters
    except (TypeError, ValueError):
        parameters = None
    takes_configuration = bool(parameters)
    if configuration and not takes_configuration:
        raise ExternalPluginLoadError(
            "external_plugin_entrypoint_invalid",
            location=where,
            detail=f"the [[plugins]] entry gives configuration, but {ENTRYPOINT_NAME}() takes no "
            "parameter to receive it",
        ) from None
    ctrl_c = _CtrlC()
    try:
        with ctrl_c, _ExitRefused():
            if takes_configuration:
                return entrypoint(_plain(configuration))
            return entrypoint()
    except BaseException as exc:  # as at import: see `import_external_plugin`
        if _stops_the_process(exc, ctrl_c):
            raise
        raise ExternalPluginLoadError(
            "external_plugin_entrypoint_invalid",
            location=where,
            detail=f"{ENTRYPOINT_NAME}() "
            + (str(exc) if isinstance(exc, _ExitCalled) else f"raised {type(exc).__name__}: {exc}"),
        ) from None


def activate_external_plugin(
    module_name: str,
    definition: PluginDefinition,
    configuration: Mapping[str, Any] | None = None,
) -> PluginAdapter:
    """Import one module, call its entrypoint (with `configuration` if it takes one) and
    check parity with its manifest; the first mismatch fails. Also used by `mymcp plugin
    check --import`, so the check imports exactly as the server does."""
    adapter = import_external_plugin(module_name, definition, configuration)
    mismatches = plugin_contract_mismatches(adapter, definition, HOST_API_VERSION)
    if mismatches:
        first = mismatches[0]
        raise ExternalPluginLoadError(
            "external_plugin_composition_invalid",
            location=Location(source=plugin_label(definition.plugin_id, module_name)),
            detail=f"{first.code}: {first.detail}",
        ) from None
    return adapter


def import_external_plugin(
    module_name: str,
    definition: PluginDefinition,
    configuration: Mapping[str, Any] | None = None,
) -> PluginAdapter:
    """Import `module_name` and call its entrypoint; parity is not checked here."""
    where = Location(source=plugin_label(definition.plugin_id, module_name))
    ctrl_c = _CtrlC()
    try:
        with ctrl_c, _ExitRefused():
            module = importlib.import_module(module_name)
    except BaseException as exc:
        # Ctrl-C or SIGTERM while a slow plugin imports stops the process, and the plugin
        # did nothing wrong. Whatever else it raises while it loads (sys.exit,
        # GeneratorExit, a KeyboardInterrupt of its own, a class of its own) is that
        # plugin's failure to load, told in one line.
        if _stops_the_process(exc, ctrl_c):
            raise
        detail = str(exc) if isinstance(exc, _ExitCalled) else f"{type(exc).__name__}: {exc}"
        raise ExternalPluginLoadError(
            "external_plugin_import_failed", location=where, detail=detail
        ) from None
    entrypoint = getattr(module, ENTRYPOINT_NAME, None)
    if entrypoint is None:
        raise ExternalPluginLoadError(
            "external_plugin_entrypoint_invalid",
            location=where,
            detail=f"the module has no {ENTRYPOINT_NAME}",
        ) from None
    if not callable(entrypoint):
        raise ExternalPluginLoadError(
            "external_plugin_entrypoint_invalid",
            location=where,
            detail=f"{ENTRYPOINT_NAME} is not callable",
        ) from None
    adapter = _call_entrypoint(entrypoint, configuration or {}, where)
    if not isinstance(adapter, PluginAdapter):
        detail = f"{ENTRYPOINT_NAME}() returned {type(adapter).__name__}"
        if inspect.iscoroutine(adapter):
            adapter.close()  # an async entrypoint: never awaited, so close it quietly
            detail += "; the entrypoint must be a plain function, not async def"
        raise ExternalPluginLoadError(
            "external_plugin_contract_invalid", location=where, detail=detail
        ) from None
    return adapter


def mismatch_diagnostics(
    module_name: str, adapter: PluginAdapter, definition: PluginDefinition
) -> tuple[Diagnostic, ...]:
    """Every parity mismatch of an imported plugin, located at the plugin."""
    where = Location(source=plugin_label(definition.plugin_id, module_name))
    return tuple(
        Diagnostic(found.code, found.message, where, found.detail)
        for found in plugin_contract_mismatches(adapter, definition, HOST_API_VERSION)
    )


def check_plugin_configuration(
    values: Mapping[str, Any], definition: PluginDefinition, where: str, source: Path | None
) -> None:
    """The operator's values for a plugin (the `[[plugins]]` entry at key path `where`)
    against the schema its manifest declares; also run by `mymcp plugin check`."""
    problem = definition.configuration.violation(values, definition.secret_references)
    if problem is not None:
        key, detail = problem
        error = ExternalPluginLoadError(
            "external_plugin_configuration_invalid",
            location=Location(key=f"{where}.configuration.{key}"),
            detail=detail,
        )
        locate_in_configuration(error, source)
        raise error


@dataclass(frozen=True, slots=True)
class _Preflighted:
    """An enabled declaration, its key path (`plugins[2]`) and its manifest's definition."""

    declaration: PluginDeclaration
    where: str
    definition: PluginDefinition


NamesCheck = Callable[[Sequence[tuple[str, PluginDefinition]]], None]
"""Given each enabled plugin's key path (`plugins[2]`) and manifest definition, raises
for names the start could not publish, before any plugin's code has run."""


def load_external_plugins(
    declarations: Sequence[PluginDeclaration],
    source: Path | None = None,
    *,
    check_names: NamesCheck | None = None,
) -> tuple[PluginAdapter, ...]:
    """Load the enabled external plugins, in declaration order.

    First every enabled manifest is preflighted (safe read, strict manifest v1, id equal
    to the declared id, host API supported, the entry's configuration valid under the
    manifest's schema) and the limits are checked: at most 32 enabled plugins and 256
    declared capabilities, and distinct module names. Only then is each module imported
    and its `mymcp_plugin_v1()` called; the returned adapter must match its manifest.
    Disabled declarations are never touched. `source` is the configuration file, named
    in errors. Binding and collision checks belong to runtime composition, which passes
    `check_names` so that a clash the manifests already show stops the start before any
    module is imported.
    """
    enabled = [
        (f"plugins[{index}]", declaration)
        for index, declaration in enumerate(declarations)
        if declaration.enabled
    ]
    where = Location(None if source is None else str(source), key="plugins")
    if len(enabled) > MAX_EXTERNAL_PLUGINS:
        raise ExternalPluginLoadError(
            "external_plugin_limit_exceeded",
            location=where,
            detail=f"{len(enabled)} plugins are enabled; at most {MAX_EXTERNAL_PLUGINS} may be",
        ) from None
    plugins: list[_Preflighted] = []
    for key, declaration in enabled:
        if declaration.manifest_path is None or declaration.module is None:
            raise ExternalPluginLoadError(
                "external_manifest_invalid",
                location=Location(where.source, key=key),
                detail="schema 1",
            ) from None
        definition = preflight_manifest(declaration.manifest_path, declaration.id)
        check_plugin_configuration(declaration.configuration, definition, key, source)
        plugins.append(_Preflighted(declaration, key, definition))
    total = sum(len(plugin.definition.capabilities) for plugin in plugins)
    if total > MAX_EXTERNAL_CAPABILITIES:
        raise ExternalPluginLoadError(
            "external_plugin_limit_exceeded",
            location=where,
            detail=f"{total} tools are declared in all; at most {MAX_EXTERNAL_CAPABILITIES} may be",
        ) from None
    modules: dict[str, str] = {}
    for plugin in plugins:
        module = str(plugin.declaration.module)
        if module in modules:
            raise ExternalPluginLoadError(
                "external_plugin_composition_invalid",
                location=Location(where.source, key=f"{plugin.where}.module"),
                detail=f"module {module!r} is already declared by {modules[module]}",
            ) from None
        modules[module] = plugin.where
    if check_names is not None:
        check_names([(plugin.where, plugin.definition) for plugin in plugins])
    return tuple(
        activate_external_plugin(
            str(plugin.declaration.module), plugin.definition, plugin.declaration.configuration
        )
        for plugin in plugins
    )
