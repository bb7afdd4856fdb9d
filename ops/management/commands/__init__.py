"""`python -m ops killtest` and `python -m ops bench`."""
