"""The command line: thin click commands over :mod:`patchkit.api`."""
