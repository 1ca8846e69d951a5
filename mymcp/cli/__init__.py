"""The `mymcp` command line: serving (HTTP or stdio), checks, plugin checks, credentials,
policy, audit, the console's sign-in and the memory commands.

`entry` dispatches each command to the module that owns it; `parser` describes them
all; `terminal` is what every command shares about talking to the operator.
"""

from mymcp.cli.entry import main, selftest_main
from mymcp.cli.serving import dev_main, serve, stdio

__all__ = ["dev_main", "main", "selftest_main", "serve", "stdio"]
