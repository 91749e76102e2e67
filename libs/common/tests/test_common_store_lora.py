"""A ModelStore keeping no LoRAAdapters (the contract runs in test_common_store_contract)."""

from __future__ import annotations

import pytest

from flexinfer_common.api import Model
from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_common.store import EndpointRecord, ModelStore
from flexinfer_common.testing.store_contract import make_adapter


async def test_a_store_without_adapters_holds_none() -> None:
    class Bare(ModelStore):
        """A store that implements only the abstract methods."""

        async def create_model(self, model: Model) -> Model:
            return model

        async def get_model(self, namespace: str, name: str) -> Model:
            raise NotFoundError(name)

        async def list_models(self, namespace: str | None = None) -> list[Model]:
            return []

        async def replace_model(self, model: Model) -> Model:
            return model

        async def update_status(self, *args: object, **kwargs: object) -> Model:
            raise NotFoundError("x")

        async def delete_model(self, namespace: str, name: str) -> None:
            return None

        async def put_endpoint(self, record: EndpointRecord) -> None:
            return None

        async def delete_endpoint(self, model: str, replica: str) -> None:
            return None

        async def list_endpoints(self, model: str | None = None) -> list[EndpointRecord]:
            return []

        async def close(self) -> None:
            return None

    bare = Bare()
    assert await bare.list_adapters() == []
    with pytest.raises(NotFoundError):
        await bare.get_adapter("default", "sql")
    with pytest.raises(PermanentError, match="does not keep LoRAAdapters"):
        await bare.create_adapter(make_adapter())
