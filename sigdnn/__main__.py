"""``python -m sigdnn``: the same as the ``sigdnn`` command."""

import sys

from sigdnn.cli import main

sys.exit(main())
