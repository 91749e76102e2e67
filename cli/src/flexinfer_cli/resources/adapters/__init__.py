"""Backends that need a cluster SDK (the only place the CLI imports ``kubernetes``)."""
