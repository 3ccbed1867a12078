"""Chat templates: the renderer against the reference renderings in
tests/fixtures/chat-template-cases.json, and Model.chat end to end."""
import datetime as dt
import json
import sys

import pytest

import pocketllm
from pocketllm import chat
from conftest import FIXTURES, load_golden, margin_for, model_path
from test_golden import compare

jinja2 = pytest.importorskip("jinja2", reason="jinja2 (the chat extra) is not installed")

CASES = json.loads((FIXTURES / "chat-template-cases.json").read_text())
NOW = dt.datetime(2026, 1, 2, 3, 4, 5)


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: f"{c['template'].split('.')[0]}-{c['conversation']}")
def test_template_cases(case):
    template = (FIXTURES / "templates" / case["template"]).read_text()
    if case.get("error"):
        with pytest.raises(pocketllm.ChatTemplateError) as e:
            chat.render_template(template, case["input"], now=NOW)
        assert case["error"].split(": ", 1)[1] == str(e.value)
    else:
        assert chat.render_template(template, case["input"], now=NOW) == case["output"]


def test_chat_matches_golden_chat_prompt():
    """The Qwen3 template renders a single user turn exactly as the golden
    chat-format prompt, and chat() then generates llama.cpp's tokens."""
    name = "tiny-qwen3-f16"
    golden = next(c for c in load_golden(name)["cases"] if c["prompt"].startswith("<|im_start|>"))
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    with pocketllm.Model(model_path(name), ctx=512) as m:
        assert m.apply_chat_template(msgs) == golden["prompt"]
        c = m.chat(msgs, max_tokens=24, ignore_eos=True)
        assert c.prompt_tokens == golden["tokens"]
        assert compare(golden, c.tokens, margin_for(name)) is None
        st = m.chat(msgs, max_tokens=5, stream=True)
        assert "".join(st) == st.completion.text
        # template variables pass through
        no_think = m.apply_chat_template(msgs, enable_thinking=False)
        assert no_think.endswith("<think>\n\n</think>\n\n")
        assert m.apply_chat_template(msgs, add_generation_prompt=False) == golden["prompt"].rsplit(
            "<|im_start|>assistant\n", 1)[0]


def test_chat_errors(tiny, monkeypatch):
    with pytest.raises(pocketllm.ChatTemplateError, match="bad role"):
        tiny.chat([{"role": "user", "content": "x"}],
                  template="{{ raise_exception('bad role') }}")
    with pytest.raises(pocketllm.ChatTemplateError, match="syntax"):
        tiny.apply_chat_template([], template="{% if %}")
    with pytest.raises(pocketllm.ChatTemplateError):
        tiny.chat("just a string")
    monkeypatch.setattr(type(tiny), "chat_template", property(lambda self: None))
    with pytest.raises(pocketllm.NotFoundError, match="chat_template"):
        tiny.chat([{"role": "user", "content": "x"}])


def test_chat_without_jinja2(tiny, monkeypatch):
    # Model.chat renders with the C renderer: jinja2 is not needed, and the
    # prompt equals jinja2's rendering.
    msgs = [{"role": "user", "content": "x"}]
    with_jinja = pocketllm.chat.render_template(tiny.chat_template, {"messages": msgs, "add_generation_prompt": True})
    monkeypatch.setitem(sys.modules, "jinja2", None)
    monkeypatch.setitem(sys.modules, "jinja2.sandbox", None)
    assert tiny.apply_chat_template([{"role": "user", "content": "x"}]) == with_jinja
    assert pocketllm.chat.render_template is not None
    with pytest.raises(pocketllm.ChatTemplateError, match="jinja2"):
        pocketllm.chat.render_template("{{ 1 }}", {})
    out = tiny.chat([{"role": "user", "content": "x"}], max_tokens=2)
    assert len(out.tokens) <= 2
