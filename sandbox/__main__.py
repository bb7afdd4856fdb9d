"""``python -m sandbox`` -- run the sandbox helpdesk + mail server."""

import sys

from sandbox.server import main

if __name__ == "__main__":
    sys.exit(main())
