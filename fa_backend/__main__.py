"""`python -m fa_backend COMMAND` (see fa_backend/cli)."""

import sys

from .cli._main import main

sys.exit(main())
