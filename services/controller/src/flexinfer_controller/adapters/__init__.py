"""Adapters to systems outside the controller (the only place foreign clients are imported)."""
