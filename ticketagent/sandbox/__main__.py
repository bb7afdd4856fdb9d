"""``python -m ticketagent.sandbox`` -- run the sandbox helpdesk + mail server."""

import sys

from ticketagent.sandbox.server import main

if __name__ == "__main__":
    sys.exit(main())
