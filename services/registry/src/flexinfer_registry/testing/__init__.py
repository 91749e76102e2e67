"""Test helpers shipped with the package so every store backend's tests can reuse them."""
