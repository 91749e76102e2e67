"""Code shared by every FlexInfer service: API types, settings, errors, bus, store, telemetry."""
