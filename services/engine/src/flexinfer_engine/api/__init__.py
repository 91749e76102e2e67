"""HTTP edge of the engine: FastAPI routers over core/."""
