"""Settings for the operator's tools (`python -m ops killtest|bench …`): the product's, with the `ops` app added.

The product's own settings (`ticketagent.settings`) do not install `ops`: no
request or worker loads the kill test or the benchmarks.
"""

from ticketagent.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "ops"]  # noqa: F405
