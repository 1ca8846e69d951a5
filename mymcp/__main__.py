"""`python -m mymcp`: the same as `mymcp`, for an environment whose scripts are not on PATH."""

from mymcp.cli.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
