"""The Pythonic API: Model, Session, Sampler, Completion, Stream.

Everything native goes through pocketllm.native; this module holds no ctypes.
"""
from __future__ import annotations

import codecs
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from . import native
from .errors import InvalidArgumentError

__all__ = ["Model", "Session", "Sampler", "Completion", "Usage", "Stream"]


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens}


@dataclass
class Completion:
    """The result of a generation. ``str(c)`` is its text.

    text           the generated text (without a stop string that ended it)
    tokens         every generated token id, including an end-of-generation
                   token or the token that completed a stop string
    finish_reason  "stop" (end-of-generation token or stop string) or
                   "length" (max_tokens reached or the context is full)
    usage          prompt / completion / total token counts
    prompt_tokens  the prompt's token ids
    timings        prefill_ms, decode_ms (wall clock)
    logprobs       with generate(logprobs=N): per generated token a dict
                   {"token", "text", "logprob", "top_logprobs": [{"token",
                   "text", "logprob"}]} from the raw logits (the model's own
                   distribution, before penalties and temperature); else None
    """
    text: str
    tokens: list[int]
    finish_reason: str
    usage: Usage
    prompt_tokens: list[int] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    logprobs: list | None = None

    def __str__(self) -> str:
        return self.text


class Sampler:
    """pl_sampler: greedy when temperature <= 0, else llama.cpp's chain
    top-k -> top-p -> min-p -> temperature -> one seeded draw."""

    def __init__(self, n_vocab: int, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, seed: int | None = None):
        if seed is None:
            seed = native.sampler_default_params()["seed"]
        self._h = None
        self.n_vocab = int(n_vocab)
        self._h = native.sampler_create(n_vocab, temperature, top_k, top_p, min_p, seed)

    def sample(self, logits: np.ndarray) -> int:
        if not self._h:
            raise InvalidArgumentError("the sampler is closed")
        logits = np.asarray(logits)
        if logits.shape != (self.n_vocab,):
            raise InvalidArgumentError(f"logits must have shape ({self.n_vocab},), not {logits.shape}")
        return native.sampler_sample(self._h, logits)

    def set_penalties(self, repeat_penalty: float = 1.0, repeat_last_n: int = 64, frequency_penalty: float = 0.0,
                      presence_penalty: float = 0.0) -> None:
        """llama.cpp's repeat penalty over the last repeat_last_n tokens of
        history + output; OpenAI's frequency/presence penalties (-2..2) over
        the sampled tokens (see pl_sampler_set_penalties)."""
        native.sampler_set_penalties(self._h, repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty)

    def set_logit_bias(self, bias: dict) -> None:
        """{token id: bias} added to the logits (-100 bans, +100 forces)."""
        native.sampler_set_logit_bias(self._h, bias)

    def add_history(self, ids: Sequence[int]) -> None:
        """Tokens before the generation (the prompt), for the repeat window."""
        native.sampler_add_history(self._h, ids)

    def close(self) -> None:
        h, self._h = self._h, None
        if h:
            native.sampler_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Session:
    """One sequence: a KV-cache slot of the model and its position.
    A model has ``sequences`` slots (default 1), so at most that many
    sessions (and streams) can be alive at once."""

    def __init__(self, model: "Model"):
        self._h = None
        self.model = model
        self._h = native.session_create(model._handle)
        model._sessions.add(self)

    @property
    def _handle(self) -> int:
        if not self._h:
            raise InvalidArgumentError("the session is closed")
        return self._h

    @property
    def pos(self) -> int:
        """Tokens in the sequence so far."""
        return native.session_pos(self._handle)

    def reset(self) -> None:
        native.session_reset(self._handle)

    def rewind(self, pos: int) -> None:
        """Drops the tokens from position pos on (0 <= pos <= self.pos):
        the next eval continues at pos and the KV cache forgets the rest,
        so an edited history re-evaluates only what follows the common
        prefix. InvalidArgumentError for pos out of range."""
        with self.model._lock:
            native.session_rewind(self._handle, pos)

    def eval(self, ids: Sequence[int], logits: bool | np.ndarray = True) -> np.ndarray | None:
        """Appends ids; returns the logits after the last one (float32
        [n_vocab]), or None when logits=False. A preallocated float32
        array may be passed as logits to be filled and returned."""
        ids = list(ids) if not isinstance(ids, np.ndarray) else ids
        out = None
        if isinstance(logits, np.ndarray):
            out = logits
            if out.shape != (self.model.n_vocab,):
                raise InvalidArgumentError(f"logits buffer must have shape ({self.model.n_vocab},)")
        elif logits:
            out = np.empty(self.model.n_vocab, dtype=np.float32)
        with self.model._lock:
            native.session_eval(self._handle, ids, out)
        return out

    def close(self) -> None:
        h, self._h = self._h, None
        if h:
            self.model._sessions.discard(self)
            if self.model._ptr:   # a closed model already freed its sessions' slots
                native.session_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Stream:
    """An iterator over generated text pieces (str). Pieces never split a
    UTF-8 character and never contain (part of) a stop string. After the
    iteration ends, ``completion`` holds the Completion (finish_reason,
    tokens, usage). close() (or leaving a ``with`` block) ends it early and
    releases its KV-cache slot."""

    def __init__(self, gen: Iterator[str], owned: Sequence = ()):
        self._gen = gen
        self._owned = list(owned)   # native objects to release on close
        self.completion: Completion | None = None

    def __iter__(self):
        return self

    def __next__(self) -> str:
        return next(self._gen)

    def close(self) -> None:
        close = getattr(self._gen, "close", None)
        if close is not None:
            close()
        for o in self._owned:
            o.close()
        self._owned = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def text(self) -> str | None:
        return None if self.completion is None else self.completion.text


def _stop_list(stop) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    out = [s for s in stop if s]
    if not all(isinstance(s, str) for s in out):
        raise InvalidArgumentError("stop must be a string or a list of strings")
    return out


class Model:
    """A GGUF model loaded on one device.

        with pocketllm.Model("model.gguf") as m:
            print(m.generate("The capital of France is", max_tokens=8))

    path      the .gguf file
    device    backend name: "cpu" (default) or "ref"
    threads   worker threads (None = all cores)
    ctx       context length per sequence (None or 0 = min(file's, 4096))
    sequences KV-cache slots, i.e. sessions/streams alive at once (default 1)
    batch     max tokens per forward call (None = 512)
    memory_budget  bytes the device may use (None = no limit)
    vocab_only     load only the tokenizer
    cache_type_k, cache_type_v  KV cache element types: "f16" (None = f16), "q8_0" or "q4_0",
                   as llama.cpp's --cache-type-k / -v (quantized caches are Hadamard-rotated as
                   there; PL_ATTN_ROT_DISABLE=1 turns that off)
    """

    def __init__(self, path: str | os.PathLike, device: str = "cpu", threads: int | None = None,
                 ctx: int | None = 4096, *, sequences: int = 1, batch: int | None = None,
                 memory_budget: int | None = None, vocab_only: bool = False,
                 cache_type_k: str | None = None, cache_type_v: str | None = None):
        self._ptr = None
        self._lock = threading.RLock()
        self._sessions: weakref.WeakSet = weakref.WeakSet()
        self._inspect = None
        self.path = os.fspath(path)
        for name, v in (("threads", threads), ("ctx", ctx), ("batch", batch), ("memory_budget", memory_budget)):
            if v is not None and (not isinstance(v, (int, np.integer)) or v < 0):
                raise InvalidArgumentError(f"{name} must be a non-negative integer or None, not {v!r}")
        for name, v in (("cache_type_k", cache_type_k), ("cache_type_v", cache_type_v)):
            if v is not None and v not in ("f16", "q8_0", "q4_0"):
                raise InvalidArgumentError(f"{name} must be 'f16', 'q8_0', 'q4_0' or None, not {v!r}")
        if not isinstance(sequences, (int, np.integer)) or sequences < 1:
            raise InvalidArgumentError(f"sequences must be a positive integer, not {sequences!r}")
        self._ptr = native.model_load(self.path, device=device, n_threads=threads or 0, n_ctx=ctx or 0,
                                      n_seq=sequences, n_batch=batch or 0, memory_budget=memory_budget or 0,
                                      vocab_only=vocab_only, cache_type_k=cache_type_k,
                                      cache_type_v=cache_type_v)
        info = native.model_info(self._ptr)
        self.n_vocab: int = info["n_vocab"]
        self.vocab_only = bool(vocab_only)

    # ---- lifetime ----

    @property
    def _handle(self) -> int:
        if not self._ptr:
            raise InvalidArgumentError("the model is closed")
        return self._ptr

    @property
    def closed(self) -> bool:
        return not self._ptr

    def close(self) -> None:
        """Frees the model's native memory (weights mapping, KV cache,
        scratch). Sessions and streams of the model become unusable."""
        with self._lock:
            ptr = self._ptr
            if not ptr:
                return
            for s in list(self._sessions):
                s.close()
            self._ptr = None
            if self._inspect is not None:
                self._inspect.close()
                self._inspect = None
            native.model_free(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        if not self._ptr:
            return f"<pocketllm.Model {self.path!r} (closed)>"
        return f"<pocketllm.Model {self.path!r} arch={self.arch} device={self.device} n_ctx={self.n_ctx}>"

    # ---- properties ----

    @property
    def info(self) -> dict:
        """n_vocab, n_ctx, n_threads, n_params, weight_bytes, arch, device,
        memory_plan (bytes: weights, kv_cache, scratch, total)."""
        return native.model_info(self._handle)

    @property
    def n_ctx(self) -> int:
        return self.info["n_ctx"]

    @property
    def arch(self) -> str:
        return self.info["arch"]

    @property
    def device(self) -> str:
        return self.info["device"]

    @property
    def n_params(self) -> int:
        return self.info["n_params"]

    @property
    def memory_plan(self) -> dict:
        return self.info["memory_plan"]

    def fit(self, memory: int | None = None, *, device: str | None = None, ctx: int | None = None) -> dict:
        """Where this model's file stands on the quantization ladder for a
        budget (pocketllm.fit): by default on this model's device, context
        length and threads; memory None = the device's free memory."""
        from .quant import fit
        info = self.info
        return fit(self.path, device=device or info["device"], memory=memory, n_ctx=ctx or info["n_ctx"],
                   threads=info["n_threads"])

    def meta_str(self, key: str) -> str | None:
        """A string metadata value of the file (None if absent or not a string)."""
        return native.model_meta_str(self._handle, key)

    def meta(self, key: str, default=None):
        """Any metadata value of the file (int, float, bool, str, or a list
        for arrays), read through the C GGUF reader; default if absent."""
        from .errors import NotFoundError
        with self._lock:
            if self._inspect is None:
                self._inspect = native.InspectFile(self.path)
            f = self._inspect
        try:
            return f.get(key)
        except NotFoundError:
            return default

    @property
    def chat_template(self) -> str | None:
        """The file's tokenizer.chat_template, or None."""
        return self.meta_str("tokenizer.chat_template")

    # ---- tokenizer ----

    def tokenize(self, text: str | bytes, special: bool = True, add_bos: bool | None = None) -> list[int]:
        """Token ids of text. special: text of control tokens (such as
        "<|im_start|>") becomes those tokens. add_bos: None = as the file
        says (tokenizer.ggml.add_bos_token)."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        elif not isinstance(text, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"text must be str or bytes, not {type(text).__name__}")
        return native.tokenize(self._handle, bytes(text), special, add_bos)

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token (possibly a partial UTF-8 sequence).
        special: render control tokens as their text."""
        return native.token_to_piece(self._handle, token, special)

    def detokenize(self, ids: Iterable[int], special: bool = True) -> str:
        """The text of token ids (invalid UTF-8 becomes U+FFFD). special:
        render control tokens as their text."""
        return self.detokenize_bytes(ids, special).decode("utf-8", "replace")

    def detokenize_bytes(self, ids: Iterable[int], special: bool = True) -> bytes:
        return native.detokenize(self._handle, list(ids), special)

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, <|im_end|>, ...)."""
        return native.token_is_eog(self._handle, token)

    # ---- low level ----

    def session(self) -> Session:
        """A new sequence (holds one of the model's KV-cache slots until closed)."""
        return Session(self)

    def sampler(self, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                seed: int | None = None) -> Sampler:
        return Sampler(self.n_vocab, temperature, top_k, top_p, min_p, seed)

    def logits(self, ids: Sequence[int] | str, all_positions: bool = False) -> np.ndarray:
        """Logits after a fresh prefill of ids (a str is tokenized first):
        float32 [n_vocab] for the last position, or [len(ids), n_vocab]
        for every position when all_positions is true."""
        if isinstance(ids, (str, bytes)):
            ids = self.tokenize(ids)
        ids = [int(i) for i in ids]
        if not ids:
            raise InvalidArgumentError("logits: no tokens given")
        with Session(self) as s:
            if not all_positions:
                return s.eval(ids)
            out = np.empty((len(ids), self.n_vocab), dtype=np.float32)
            # The engine produces n_seq logit rows per graph, so per-token
            # evaluation costs what one batched call with every row would.
            for i, t in enumerate(ids):
                s.eval([t], out[i])
            return out

    def kv_truncate(self, seq: int, pos: int) -> None:
        """pl_model_kv_truncate: slot seq's cache forgets positions pos on."""
        with self._lock:
            native.model_kv_truncate(self._handle, seq, pos)

    def kv_len(self, seq: int = 0) -> int:
        """The positions 0..kv_len-1 slot seq's cache holds (forward() refuses
        a token past it: a gap); -1 for a slot that does not exist."""
        return native.model_kv_len(self._handle, seq)

    def kv_read(self, seq: int, pos: int, n: int) -> bytes:
        """pl_model_kv_read: slot seq's KV rows of positions pos..pos+n-1
        (within kv_len), position-major: every layer's K and V rows of one
        position, then the next, so a prefix of the bytes is the rows of a
        prefix of the positions."""
        with self._lock:
            return native.model_kv_read(self._handle, seq, pos, n)

    def kv_write(self, seq: int, pos: int, data: bytes) -> None:
        """pl_model_kv_write: rows from kv_read written back into slot seq
        from position pos (at most kv_len: no gap) at the positions they were
        read from; the slot then holds pos + len(data) / bytes-per-position."""
        with self._lock:
            native.model_kv_write(self._handle, seq, pos, data)

    def forward(self, tokens: Sequence[int], pos: Sequence[int], seq: Sequence[int] | int = 0,
                want_logits: Sequence[bool] | None = None) -> np.ndarray:
        """pl_model_forward: one batch of tokens, each with its own position
        and KV-cache slot (0 .. sequences-1). Returns float32
        [n_wanted, n_vocab] logits for the tokens whose want_logits is set
        (default: the last token only). Slots used here must not belong to a
        live Session. A token may land at most one position past what its slot
        holds (kv_len; InvalidArgumentError otherwise); writing an earlier
        position ends the slot's sequence there (see kv_truncate)."""
        n = len(tokens)
        if isinstance(seq, (int, np.integer)):
            seq = [int(seq)] * n
        if want_logits is None:
            want_logits = [False] * (n - 1) + [True] if n else []
        want = np.asarray(want_logits, dtype=bool)
        out = np.empty((int(want.sum()), self.n_vocab), dtype=np.float32)
        with self._lock:
            native.model_forward(self._handle, tokens, pos, seq, want, out if out.size else None)
        return out

    # ---- generation ----

    def _prompt_ids(self, prompt, special: bool, add_bos: bool | None) -> list[int]:
        if isinstance(prompt, (str, bytes)):
            ids = self.tokenize(prompt, special=special, add_bos=add_bos)
        else:
            ids = [int(i) for i in prompt]
        if not ids:
            raise InvalidArgumentError("the prompt is empty")
        return ids

    def stream(self, prompt: str | Sequence[int], max_tokens: int | None = 128, temperature: float = 0.0,
               top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, seed: int | None = None,
               stop: str | Sequence[str] | None = None, *, special: bool = True,
               add_bos: bool | None = None, ignore_eos: bool = False, presence_penalty: float = 0.0,
               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
               logit_bias: dict | None = None, logprobs: int | None = None) -> Stream:
        """Generates from prompt (text, or token ids), yielding text pieces
        as they complete. See generate() for the parameters."""
        ids = self._prompt_ids(prompt, special, add_bos)
        if max_tokens is not None and (not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0):
            raise InvalidArgumentError(f"max_tokens must be a non-negative integer or None, not {max_tokens!r}")
        stops = _stop_list(stop)
        # Create native objects now, so errors surface at the call, not at
        # the first next().
        session = Session(self)
        if logprobs is not None and not (isinstance(logprobs, (int, np.integer)) and 0 <= logprobs <= 20):
            session.close()
            raise InvalidArgumentError(f"logprobs must be an integer 0..20 or None, not {logprobs!r}")
        sampler = None
        try:
            sampler = Sampler(self.n_vocab, temperature, top_k, top_p, min_p, seed)
            if presence_penalty or frequency_penalty or repeat_penalty != 1.0:
                sampler.set_penalties(repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty)
                sampler.add_history(ids)
            if logit_bias:
                sampler.set_logit_bias(logit_bias)
        except BaseException:
            if sampler is not None:
                sampler.close()
            session.close()
            raise
        st = Stream(iter(()), owned=(sampler, session))
        st._gen = self._run(st, session, sampler, ids, max_tokens, stops, ignore_eos, logprobs)
        return st

    def generate(self, prompt: str | Sequence[int], max_tokens: int | None = 128, temperature: float = 0.0,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, seed: int | None = None,
                 stop: str | Sequence[str] | None = None, *, special: bool = True,
                 add_bos: bool | None = None, ignore_eos: bool = False, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 logit_bias: dict | None = None, logprobs: int | None = None) -> Completion:
        """Generates a completion of prompt.

        prompt       text (tokenized with special tokens parsed) or token ids
        max_tokens   tokens to generate at most (None = until the context is full)
        temperature  0 = greedy (token-identical to llama.cpp); > 0 samples
        top_k, top_p, min_p  sampling filters (llama.cpp's defaults)
        seed         RNG seed (None = the library's fixed default)
        stop         a string or strings that end the generation (not
                     included in the text)
        special      parse special-token text in a text prompt
        add_bos      prepend BOS (None = as the file says)
        ignore_eos   keep generating past end-of-generation tokens (their
                     text is empty), as llama.cpp's --ignore-eos
        presence_penalty, frequency_penalty  OpenAI's (-2..2) over the
                     generated tokens: logit -= freq*count + presence*(count>0)
        repeat_penalty, repeat_last_n  llama.cpp's repetition penalty over
                     the last repeat_last_n tokens of prompt + output (1 = off)
        logit_bias   {token id: bias} added to the logits (-100 bans, +100 forces)
        logprobs     N (0..20): Completion.logprobs gets each token's
                     log-probability and its top N alternatives
        """
        with self.stream(prompt, max_tokens, temperature, top_k, top_p, min_p, seed, stop, special=special,
                         add_bos=add_bos, ignore_eos=ignore_eos, presence_penalty=presence_penalty,
                         frequency_penalty=frequency_penalty, repeat_penalty=repeat_penalty,
                         repeat_last_n=repeat_last_n, logit_bias=logit_bias, logprobs=logprobs) as st:
            for _ in st:
                pass
        return st.completion

    def _run(self, st: Stream, session: Session, sampler: Sampler, ids: list[int], max_tokens: int | None,
             stops: list[str], ignore_eos: bool, n_logprobs: int | None = None) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = ""          # decoded text so far
        emitted = 0        # characters of text already yielded
        searched = 0       # text[:searched] holds no complete stop string
        longest = max((len(s) for s in stops), default=0)
        tokens: list[int] = []
        finish = "length"
        stopped_by_string = False
        t_prefill = t_decode = 0.0
        lps: list | None = [] if n_logprobs is not None else None
        try:
            logits = np.empty(self.n_vocab, dtype=np.float32)
            t0 = time.perf_counter()
            session.eval(ids, logits)
            t_prefill = time.perf_counter() - t0
            t0 = time.perf_counter()
            n_ctx = self.n_ctx
            limit = max_tokens if max_tokens is not None else n_ctx
            step = 0
            while step < limit:
                tok = sampler.sample(logits)
                if lps is not None:
                    lp, top = native.logprobs(logits, tok, n_logprobs)
                    piece = lambda t: self.token_to_piece(t, special=True).decode("utf-8", "replace")
                    lps.append({"token": tok, "text": piece(tok), "logprob": lp,
                                "top_logprobs": [{"token": t, "text": piece(t), "logprob": v} for t, v in top]})
                tokens.append(tok)
                step += 1
                if not ignore_eos and self.is_eog(tok):
                    finish = "stop"
                    break
                text += decoder.decode(self.token_to_piece(tok, special=False))
                end = len(text)
                if stops:
                    start = max(0, searched - longest + 1)
                    hits = [i for i in (text.find(s, start) for s in stops) if i >= 0]
                    if hits:
                        text = text[:min(hits)]
                        finish = "stop"
                        stopped_by_string = True
                        break
                    searched = len(text)
                    # Hold back a tail that could still begin a stop string.
                    for k in range(min(longest - 1, len(text)), 0, -1):
                        tail = text[-k:]
                        if any(s.startswith(tail) for s in stops):
                            end = len(text) - k
                            break
                if end > emitted:
                    piece = text[emitted:end]
                    emitted = end
                    yield piece
                if step >= limit:
                    break
                if session.pos >= n_ctx:
                    break
                session.eval([tok], logits)
            if not stopped_by_string:
                text += decoder.decode(b"", final=True)
            t_decode = time.perf_counter() - t0
            if len(text) > emitted:
                yield text[emitted:]
                emitted = len(text)
            st.completion = Completion(text=text, tokens=tokens, finish_reason=finish,
                                       usage=Usage(len(ids), len(tokens)), prompt_tokens=ids,
                                       timings={"prefill_ms": t_prefill * 1e3, "decode_ms": t_decode * 1e3},
                                       logprobs=lps)
        finally:
            sampler.close()
            session.close()

    # ---- chat ----

    def chat(self, messages: Sequence[dict], *, stream: bool = False, add_generation_prompt: bool = True,
             tools: Sequence[dict] | None = None, template: str | None = None,
             template_kwargs: dict | None = None, **gen_kwargs) -> Completion | Stream:
        """Renders messages ([{"role": ..., "content": ...}, ...]) with the
        file's chat template and generates the assistant's reply (a
        Completion, or a Stream when stream=True). template overrides the
        file's template; template_kwargs adds variables (for example
        {"enable_thinking": False}); other keyword arguments go to
        generate()."""
        from .chat import render_chat
        prompt = render_chat(self, messages, add_generation_prompt=add_generation_prompt, tools=tools,
                             template=template, **(template_kwargs or {}))
        add_bos = gen_kwargs.pop("add_bos", None)
        if add_bos is None:
            add_bos = None if not self._bos_text() or not prompt.startswith(self._bos_text()) else False
        if stream:
            return self.stream(prompt, add_bos=add_bos, **gen_kwargs)
        return self.generate(prompt, add_bos=add_bos, **gen_kwargs)

    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                            tools: Sequence[dict] | None = None, template: str | None = None, **kwargs) -> str:
        """The prompt text chat() would generate from."""
        from .chat import render_chat
        return render_chat(self, messages, add_generation_prompt=add_generation_prompt, tools=tools,
                           template=template, **kwargs)

    def _special_text(self, key: str) -> str:
        tok = self.meta(key)
        if not isinstance(tok, int) or not 0 <= tok < self.n_vocab:
            return ""
        return self.token_to_piece(tok, special=True).decode("utf-8", "replace")

    def _bos_text(self) -> str:
        return self._special_text("tokenizer.ggml.bos_token_id")

    def _eos_text(self) -> str:
        return self._special_text("tokenizer.ggml.eos_token_id")
