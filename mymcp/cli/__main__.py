"""`python -m mymcp.cli`: the same as `mymcp`."""

from mymcp.cli.entry import main

raise SystemExit(main())
