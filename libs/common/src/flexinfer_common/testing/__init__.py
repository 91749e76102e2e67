"""Test doubles shared by every FlexInfer package (never imported by production code).

Nothing here imports pytest except the explicit ``fixtures`` modules.
"""
