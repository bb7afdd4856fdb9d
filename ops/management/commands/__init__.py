"""`manage.py killtest` and `manage.py bench`."""
