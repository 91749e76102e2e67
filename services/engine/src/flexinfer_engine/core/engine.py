"""The synchronous engine: loads weights, generates token by token, sleeps and wakes.

It is not thread-safe on purpose: the AsyncRunner serialises what may not overlap
(generation vs. sleep/wake) and runs this code in worker threads.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from opentelemetry import trace
from opentelemetry.context import Context

from flexinfer_common.errors import ConfigError, PermanentError, UnavailableError
from flexinfer_engine.core import fp8
from flexinfer_engine.core.config import ModelConfig, read_config
from flexinfer_engine.core.lora import Adapter, LoRABatch
from flexinfer_engine.core.model import DecoderLM, KVCache
from flexinfer_engine.core.sampling import SamplingParams, make_generator, sample
from flexinfer_engine.core.stops import StopMatcher
from flexinfer_engine.core.tokenizer import EOS, ByteTokenizer, IncrementalDecoder
from flexinfer_engine.core.transfer_adapter import ReferenceEngineAdapter
from flexinfer_transfer.adapter_loader import AdapterLoader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delta:
    """New text of choice ``index``; ``tokens`` is how many tokens it consumed (0 or 1)."""

    index: int
    text: str
    tokens: int


@dataclass(frozen=True)
class Finished:
    """Choice ``index`` ended: finish_reason "stop" or "length"."""

    index: int
    finish_reason: str
    completion_tokens: int


Event = Delta | Finished


@dataclass(frozen=True)
class LoadInfo:
    """How a load went: when it started (epoch seconds), how long, which strategy loaded
    the weights and from where (a peer's ``mx_source_id/worker_id``, a directory)."""

    started_at: float
    seconds: float
    strategy: str
    source: str = ""


class InferenceEngine:
    """One model on one device."""

    def __init__(
        self,
        model_dir: Path,
        loader: AdapterLoader,
        device: str = "cpu",
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.model_dir = model_dir
        self.loader = loader
        self.tracer = tracer or trace.NoOpTracer()
        self.device = _check_device(device)
        self.config: ModelConfig = read_config(model_dir)
        self.tokenizer = ByteTokenizer()
        with torch.device("meta"):
            self.model = DecoderLM(self.config).eval()
        self.loaded = False
        self.sleep_level = 0
        self._host_copy: dict[str, torch.Tensor] | None = None
        self.load_info: LoadInfo | None = None
        self.load_parent: Context | None = None
        """The trace the first load joins: the scale-up that started this engine (its
        ``TRACEPARENT``). Later loads (a level-2 wake) start traces of their own."""
        self.prepare: Callable[[InferenceEngine], object] | None = None
        """Runs once, after the first load and before the engine counts as loaded: compile
        mode's fetch, compile and warm-up (compile_cache.py)."""
        self._live: list[KVCache] = []
        self._live_lock = threading.Lock()
        """Generations run in worker threads; the metrics scrape reads from the loop."""

    def load(self) -> LoadInfo:
        """Load the weights through the strategy chain (a live peer first) onto the device."""
        started_at, started = time.time(), time.perf_counter()
        parent, self.load_parent = self.load_parent, None
        with self.tracer.start_as_current_span("engine.load_weights", context=parent) as span:
            span.set_attribute("flexinfer.model_dir", str(self.model_dir))
            report = self.loader.load(ReferenceEngineAdapter(self))
            span.set_attribute("flexinfer.weights.strategy", report.strategy)
            span.set_attribute("flexinfer.weights.source", report.source)
            if report.skipped:
                span.set_attribute("flexinfer.weights.skipped", report.skipped)
        seconds = time.perf_counter() - started
        if self.prepare is not None:
            prepare, self.prepare = self.prepare, None
            prepare(self)
        self.loaded = True
        info = LoadInfo(started_at, seconds, report.strategy, report.source)
        self.load_info = info
        log.info(
            "loaded %s via %s from %s in %.3fs",
            self.model_dir,
            info.strategy,
            info.source or "?",
            info.seconds,
            extra={"strategy": info.strategy, "source": info.source, "seconds": info.seconds},
        )
        return info

    def assign_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Make ``tensors`` the model's weights (FP8 ones widened to the model's dtype)."""
        self._assign(tensors)

    def _assign(self, tensors: dict[str, torch.Tensor]) -> None:
        tensors = fp8.dequantize(tensors, self.config.dtype)
        try:
            self.model.load_state_dict(tensors, strict=True, assign=True)
        except RuntimeError as exc:
            raise PermanentError(
                f"weights in {self.model_dir} do not fit config.json: {exc}"
            ) from exc

    def sleep(self, level: int) -> None:
        """Level 1: keep a host copy and free the model; level 2: discard the weights."""
        if level not in (1, 2):
            raise ConfigError("sleep level must be 1 or 2")
        if self.sleep_level:
            return
        if level == 1:
            self._host_copy = self._host_weights()
        self.model.to("meta")
        self.sleep_level = level
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _host_weights(self) -> dict[str, torch.Tensor]:
        """The weights in host memory: copied (pinned) from a GPU; on the CPU the tensors
        themselves, which already are host memory (a copy would only cost time, ~0.6 s
        for the 200 MB medium preset on a busy machine, and twice the memory meanwhile)."""
        weights = self.model.state_dict()
        if self.device.type == "cpu":
            return {k: v.detach() for k, v in weights.items()}
        pin = self.device.type == "cuda"
        return {
            k: (v.detach().to("cpu", copy=True).pin_memory() if pin else v.detach().clone())
            for k, v in weights.items()
        }

    def wake(self) -> None:
        """Restore the weights from the host copy (level 1) or from disk (level 2)."""
        if not self.sleep_level:
            return
        if self._host_copy is not None:
            self._assign({k: v.to(self.device) for k, v in self._host_copy.items()})
        else:
            self.load()  # level 2: through the chain again, a live peer first
        self._host_copy = None
        self.sleep_level = 0

    def generate(
        self,
        prompts: Sequence[list[int]],
        params: SamplingParams,
        cancel: threading.Event,
        adapter: Adapter | None = None,
    ) -> Iterator[Event]:
        """Events of every choice: ``params.n`` per prompt, indexed prompt-major; every
        row runs through the LoRA ``adapter`` when one is given."""
        if not self.loaded or self.sleep_level:
            raise UnavailableError("the model is not loaded")
        generator = make_generator(params.seed, self.device)
        lora = LoRABatch.of([adapter] * params.n, self.device)
        with torch.inference_mode():
            for number, prompt in enumerate(prompts):
                cache = KVCache(self.config, params.n, self.device, self.config.dtype)
                with self._tracked(cache):
                    rows = _Rows(number * params.n, cache, lora)
                    yield from self._generate(prompt, params, generator, cancel, rows)

    @contextlib.contextmanager
    def _tracked(self, cache: KVCache) -> Iterator[None]:
        """Count ``cache`` in ``kv_cache_positions`` while the block runs."""
        with self._live_lock:
            self._live.append(cache)
        try:
            yield
        finally:
            with self._live_lock:
                self._live.remove(cache)

    def kv_cache_positions(self) -> int:
        """Positions the running generations' KV caches hold now."""
        with self._live_lock:
            return sum(cache.positions for cache in self._live)

    def _generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        generator: torch.Generator,
        cancel: threading.Event,
        rows: _Rows,
    ) -> Iterator[Event]:
        n, cache, lora = params.n, rows.cache, rows.lora
        tokens = torch.tensor([prompt] * n, device=self.device)
        logits = self.model(tokens, cache, lora)[:, -1]
        choices = [_Choice(rows.base + row, params.stop) for row in range(n)]
        for step in range(params.max_tokens):
            if cancel.is_set():
                return
            next_ids = sample(logits, params, generator, allow_eos=not params.ignore_eos)
            for choice, token in zip(choices, next_ids.tolist(), strict=True):
                yield from choice.push(token)
            if all(c.done for c in choices):
                return
            if step + 1 < params.max_tokens:
                logits = self.model(next_ids.view(n, 1), cache, lora)[:, -1]
        for choice in choices:
            yield from choice.finish("length")

    def parameter_bytes(self) -> int:
        """Bytes the model's parameters occupy on their device (0 while asleep)."""
        return sum(
            p.untyped_storage().nbytes() for p in self.model.parameters() if p.device.type != "meta"
        )


@dataclass(frozen=True)
class _Rows:
    """The rows of one prompt: the first choice index, their KV cache, their adapters."""

    base: int
    cache: KVCache
    lora: LoRABatch | None


class _Choice:
    """Decoding state of one choice: UTF-8 assembly, stop strings, token count."""

    def __init__(self, index: int, stops: Sequence[str]) -> None:
        self.index = index
        self.decoder = IncrementalDecoder()
        self.stops = StopMatcher(stops)
        self.tokens = 0
        self.done = False

    def push(self, token: int) -> Iterator[Event]:
        if self.done:
            return
        self.tokens += 1
        if token == EOS:
            yield Delta(self.index, "", 1)
            yield from self.finish("stop")
            return
        yield Delta(self.index, self.stops.feed(self.decoder.push(token)), 1)
        if self.stops.stopped:
            self.done = True
            yield Finished(self.index, "stop", self.tokens)

    def finish(self, reason: str) -> Iterator[Event]:
        if self.done:
            return
        self.done = True
        text = self.stops.feed(self.decoder.flush())
        text += "" if self.stops.stopped else self.stops.flush()
        if text:
            yield Delta(self.index, text, 0)
        yield Finished(self.index, "stop" if self.stops.stopped else reason, self.tokens)


def _check_device(device: str) -> torch.device:
    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"invalid device {device!r}: {exc}") from exc
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available")
    if parsed.type not in ("cpu", "cuda"):
        raise ConfigError(f"unsupported device {device!r} (use cpu or cuda[:N])")
    return parsed
