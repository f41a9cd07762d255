"""Entry point of the self-contained agent executable: the same `pko agent` command line, with no Python needed
beside it (the operator copies this one file into the user's Pulumi image, as the reference copies its Go binary).
"""

import sys

from pko.cli.agent import main

if __name__ == "__main__":
    sys.exit(main())
