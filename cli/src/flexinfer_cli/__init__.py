"""The flexinfer command line."""
