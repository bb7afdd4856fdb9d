"""`python -m ops.fake_model --latency S`: the fake model as a process of its own (the bench's)."""

import sys

from ops.fake_model.server import main

sys.exit(main())
