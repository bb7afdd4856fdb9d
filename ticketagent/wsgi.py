"""The WSGI entry point for a production web server."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketagent.settings")
application = get_wsgi_application()
