"""Aliases: spec.litellm.aliases, service labels (spec + annotation), and LoRA adapters."""

from __future__ import annotations

from pathlib import Path

from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams


async def test_aliases_labels_and_adapters(tmp_path: Path) -> None:
    base = make_model("llama", served_name="llama-3-8b", aliases=["llama3"])
    base.metadata.annotations["flexinfer.ai/lora-adapters"] = "sql-lora, chat-lora"
    base.spec.service_labels = ["textgen"]
    coder = make_model("coder")
    coder.metadata.annotations["flexinfer.ai/service-labels"] = "code,textgen"
    async with upstreams(2) as ups, proxy_stack(tmp_path, [base, coder]) as stack:
        (llama_fake, llama_url), (coder_fake, coder_url) = ups
        await stack.set_endpoints("default/llama", [llama_url])
        messages = [{"role": "user", "content": "hi"}]
        async with stack.openai() as client:
            for name, sent in (
                ("llama3", "llama-3-8b"),  # alias -> served name
                ("sql-lora", "sql-lora"),  # adapter -> base model, adapter name kept
                ("chat-lora", "chat-lora"),
                ("textgen", "llama-3-8b"),  # label claimed by both: the ready one wins
            ):
                reply = await client.chat.completions.create(model=name, messages=messages)  # type: ignore[arg-type]
                assert reply.choices[0].message.content == "hello from u0"
                assert llama_fake.seen[-1].json()["model"] == sent
            await stack.set_endpoints("default/coder", [coder_url])
            reply = await client.chat.completions.create(model="code", messages=messages)  # type: ignore[arg-type]
            assert reply.choices[0].message.content == "hello from u1"
            assert coder_fake.seen[-1].json()["model"] == "coder"
