"""`python -m bench`: see `bench.harness`."""

import sys

from bench.harness import main

sys.exit(main())
