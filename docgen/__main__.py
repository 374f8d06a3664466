"""`python -m docgen`: rewrite every generated document; `--check`: exit 1 naming the stale.

The generated documents are docs/cli.md (docgen.cli_reference) and docs/fabric.svg
(docgen.picture); each module also runs alone.
"""

from __future__ import annotations

import argparse
import sys

from docgen import cli_reference, picture


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m docgen", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a generated document is stale")
    args = p.parse_args(argv)
    flags = ["--check"] if args.check else []
    return max(cli_reference.main(flags), picture.main(flags))


if __name__ == "__main__":
    sys.exit(main())
