"""`python -m pko` is the `pko` command (the local workspace runtime starts agents this way)."""

import sys

from pko.cli.main import main

sys.exit(main())
