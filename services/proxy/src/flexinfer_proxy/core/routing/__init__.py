"""Routing strategies: one small plugin per name, chosen per model by ``flexinfer.ai/routing``."""
