"""The operational tools' management commands: `killtest` and `bench`."""
