"""Upstream transports: the proxy's HTTP client side, behind ``base.UpstreamTransport``."""
