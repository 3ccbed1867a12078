"""A chat template parsed once and rendered many times by the C renderer
(pocketllm.h's pl_chat_template_*): no jinja2 needed.

    t = pocketllm.ChatTemplate(open("template.jinja").read())
    t.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    with pocketllm.ChatTemplate.from_model(model) as t:   # the file's, with its BOS/EOS texts
        prompt = t.render(messages, enable_thinking=False)
"""
from __future__ import annotations

import calendar
import datetime as _dt
import json
from typing import Sequence

from . import native
from .errors import ChatTemplateError, NotFoundError, PocketLLMError

__all__ = ["ChatTemplate"]


def _as_template_error(e: PocketLLMError) -> PocketLLMError:
    """Syntax and render errors as ChatTemplateError (message kept); a
    missing template stays NotFoundError."""
    if isinstance(e, (ChatTemplateError, NotFoundError)):
        return e
    return ChatTemplateError(str(e))


class ChatTemplate:
    """A parsed chat template. render() may be called any number of times
    (and from several threads: a parsed template is immutable)."""

    def __init__(self, source: str):
        self._h = None
        try:
            self._h = native.chat_template_parse(source)
        except PocketLLMError as e:
            raise _as_template_error(e) from None
        self._model = None

    @classmethod
    def from_model(cls, model) -> "ChatTemplate":
        """The model file's tokenizer.chat_template, whose bos_token and
        eos_token default to the texts of the model's BOS/EOS tokens.
        NotFoundError if the file has none."""
        self = cls.__new__(cls)
        self._h = None
        try:
            self._h = native.chat_template_from_model(model._handle)
        except PocketLLMError as e:
            raise _as_template_error(e) from None
        self._model = model   # the handle holds copies; this only keeps the pairing obvious
        return self

    @property
    def _handle(self) -> int:
        if not self._h:
            raise ChatTemplateError("the chat template is closed")
        return self._h

    def render(self, messages: Sequence[dict] | None = None, *, add_generation_prompt: bool | None = None,
               tools: Sequence[dict] | None = None, bos_token: str | None = None, eos_token: str | None = None,
               now: _dt.datetime | int | None = None, **extra) -> str:
        """The text for messages. add_generation_prompt / tools None leave
        the variable undefined; bos_token / eos_token None use the
        template's defaults (the model's, for from_model); extra keyword
        arguments become template variables (enable_thinking=False). now:
        the time strftime_now() shows (a datetime's clock fields, or Unix
        seconds shown as UTC); None = the clock."""
        if isinstance(messages, (dict, str)):
            raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
        if isinstance(now, _dt.datetime):
            now = calendar.timegm(now.timetuple())
        dumps = (lambda v: json.dumps(v, ensure_ascii=False))
        try:
            return native.chat_template_apply(
                self._handle,
                None if messages is None else dumps([dict(m) for m in messages]),
                None if tools is None else dumps(list(tools)),
                -1 if add_generation_prompt is None else int(bool(add_generation_prompt)),
                dumps(extra) if extra else None, bos_token, eos_token, now)
        except PocketLLMError as e:
            raise _as_template_error(e) from None

    def close(self) -> None:
        h, self._h = self._h, None
        if h:
            native.chat_template_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
