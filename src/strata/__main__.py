"""``python -m strata``: the broker and the command-line tools, each in a process of its own.

kio imports ``hypothesis`` whenever it is installed (to register strategies for its protocol types), and a
test environment has it: 0.28 s of every broker start and tool run (0.89 -> 0.61 s to import the broker,
measured). Nothing run from here generates test data, so such a process does without it; code that imports
strata in-process (tests, notebooks) is untouched.
"""

import sys

sys.modules.setdefault("hypothesis", None)  # type: ignore[assignment]

from strata.cli import main  # noqa: E402

raise SystemExit(main())
