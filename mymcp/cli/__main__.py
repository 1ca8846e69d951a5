"""`python -m mymcp.cli`: the same as `mymcp`."""

from mymcp.cli.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
