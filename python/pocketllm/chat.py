"""Chat templates: turning a list of messages into a prompt.

This module is the one place that decides how a chat template is rendered.
Today that is jinja2 (an optional dependency: ``pip install pocketllm[chat]``),
configured the way Hugging Face's ``apply_chat_template`` does (sandboxed,
trim_blocks, lstrip_blocks, loop controls, ``tojson`` without ASCII escaping,
``raise_exception`` and ``strftime_now``). When libpocketllm exports its own
renderer (the C one in src/chat/), ``render_template`` is where it plugs in.
"""
from __future__ import annotations

import datetime as _dt
import json
from typing import Sequence

from .errors import ChatTemplateError, NotFoundError

__all__ = ["render_template", "render_chat", "renderer_name"]


def _jinja_env():
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ChatTemplateError(
            "rendering a chat template needs jinja2, which is not installed: "
            "pip install 'pocketllm[chat]' (or pip install jinja2)") from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    return env


class _TemplateRaised(Exception):
    pass


def renderer_name() -> str:
    """Which renderer render_template uses ("jinja2", or "none" if none is available)."""
    import importlib.util
    try:
        return "jinja2" if importlib.util.find_spec("jinja2") is not None else "none"
    except (ImportError, ValueError):
        return "none"


def render_template(template: str, context: dict, now: _dt.datetime | None = None) -> str:
    """Renders a chat template with the given variables. A template's
    raise_exception("msg") raises ChatTemplateError("msg"); other template
    errors raise ChatTemplateError naming the problem."""
    env = _jinja_env()   # raises ChatTemplateError when jinja2 is missing
    import jinja2

    def raise_exception(message):
        raise _TemplateRaised(str(message))

    def strftime_now(fmt):
        return (now or _dt.datetime.now()).strftime(fmt)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        tmpl = env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template syntax error at line {e.lineno}: {e.message}") from None
    try:
        return tmpl.render(**context)
    except _TemplateRaised as e:
        raise ChatTemplateError(str(e)) from None
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
        raise ChatTemplateError(f"chat template error: {type(e).__name__}: {e}") from None


def render_chat(model, messages: Sequence[dict], add_generation_prompt: bool = True,
                tools: Sequence[dict] | None = None, template: str | None = None,
                now: _dt.datetime | None = None, **extra) -> str:
    """The prompt text for messages, rendered with template (default: the
    model file's tokenizer.chat_template). bos_token and eos_token are the
    texts of the file's BOS/EOS tokens; extra keyword arguments become
    template variables (for example enable_thinking=False)."""
    if template is None and model.chat_template is None:
        raise NotFoundError(f"{model.path}: the file has no tokenizer.chat_template; pass template=...")
    if isinstance(messages, dict) or isinstance(messages, str):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    context = {
        "messages": [dict(m) for m in messages],
        "add_generation_prompt": bool(add_generation_prompt),
        "bos_token": model._bos_text(),
        "eos_token": model._eos_text(),
    }
    if tools is not None:
        context["tools"] = list(tools)
    context.update(extra)
    if now is not None:
        # A fixed clock (tests): render with jinja2, which takes one.
        return render_template(template if template is not None else model.chat_template, context, now=now)
    # The C renderer (byte-identical with jinja2 on the reference cases): no
    # Python dependency needed.
    import json
    from . import native
    from .errors import PocketLLMError
    try:
        return native.chat_apply_template(model._handle, template, json.dumps(context, ensure_ascii=False))
    except PocketLLMError as e:
        if isinstance(e, ChatTemplateError):
            raise
        raise ChatTemplateError(str(e)) from None
