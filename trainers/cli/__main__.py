"""``python -m trainers.cli COMMAND ...`` (what `cory train --num_processes N` launches in every process)."""

import sys

from trainers.cli import main

sys.exit(main())
