"""The calls the CLI's introspection and chat-template commands use, from
Python (issue 19): pocketllm.backends/devices/architectures/ops agree with
`pocketllm ... --json` exactly; ChatTemplate parses once and renders many
times; Session.rewind and the model's KV-cache slot lengths."""
import datetime as dt
import json
import subprocess

import numpy as np
import pytest

import pocketllm
from pocketllm import native
from conftest import FIXTURES, model_path


def cli_json(*args):
    return json.loads(subprocess.check_output([str(native.find_cli()), *args, "--json"]))


@pytest.mark.parametrize("name", ["backends", "devices", "architectures", "ops"])
def test_introspection_matches_cli(name):
    """The same facts in the same shapes as the CLI's --json listings."""
    got = getattr(pocketllm, name)()
    assert got == cli_json(name)
    assert got, name


def test_introspection_contents():
    names = [b["name"] for b in pocketllm.backends()]
    assert names[:2] == ["ref", "cpu"]
    devs = {d["name"]: d for d in pocketllm.devices()}
    assert devs["ref"]["usable"] and devs["ref"]["detail"] == "host memory"
    assert devs["cpu"]["available"]
    for d in devs.values():
        assert d["usable"] == (d["available"] and d["implemented"])
        assert ("awaits" in d) == (not d["implemented"])
    qwen3 = next(a for a in pocketllm.architectures() if a["name"] == "qwen3")
    assert "qwen3.block_count" in qwen3["keys"] and not any("{arch}" in k for k in qwen3["keys"])
    mm = pocketllm.ops(op="matmul")
    assert len(mm) == 1 and "q4_K" in mm[0]["implemented"]["ref"] and mm[0]["output_dtypes"] == ["f32"]
    assert list(pocketllm.ops(op="matmul", device="cpu")[0]["implemented"]) == ["cpu"]
    assert pocketllm.ops(op="matmul", device="cuda") == cli_json("ops", "--op", "matmul", "--device", "cuda")
    with pytest.raises(pocketllm.InvalidArgumentError):
        pocketllm.ops(op="nosuch")
    with pytest.raises(pocketllm.InvalidArgumentError):
        pocketllm.ops(device="nosuch")


CASES = json.loads((FIXTURES / "chat-template-cases.json").read_text())["cases"]
NOW = dt.datetime(2026, 1, 2, 3, 4, 5)   # the time the fixture outputs were rendered at


def test_chat_template_fixture_cases():
    """Each fixture template parsed once, every one of its cases rendered
    with it (messages, tools and flags as arguments) equals jinja2's text."""
    by_template = {}
    for c in CASES:
        by_template.setdefault(c["template"], []).append(c)
    rendered = 0
    for name, cases in by_template.items():
        with pocketllm.ChatTemplate((FIXTURES / "templates" / name).read_text()) as t:
            for c in cases:
                inp = dict(c["input"])
                kw = {k: inp.pop(k) for k in ("messages", "tools", "add_generation_prompt", "bos_token",
                                               "eos_token") if k in inp}
                messages = kw.pop("messages", None)
                if c.get("error"):
                    with pytest.raises(pocketllm.ChatTemplateError) as e:
                        t.render(messages, now=NOW, **kw, **inp)
                    assert c["error"].split(": ", 1)[-1] in str(e.value)
                else:
                    assert t.render(messages, now=NOW, **kw, **inp) == c["output"], (name, c["conversation"])
                    rendered += 1
    assert rendered >= 60


def test_chat_template_options():
    t = pocketllm.ChatTemplate("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                               "{% if add_generation_prompt is defined %}G{{ add_generation_prompt }}{% endif %}"
                               "{% if tools is defined %}T{{ tools|length }}{% endif %}"
                               "|{{ bos_token }}|{{ flag }}|{{ strftime_now('%Y-%m-%d %H:%M') }}")
    msgs = [{"role": "user", "content": "héllo"}]
    assert t.render(msgs, now=0) == "[user:héllo]|||1970-01-01 00:00"
    assert t.render(msgs, add_generation_prompt=True, tools=[{}, {}], bos_token="<s>", flag=False,
                    now=dt.datetime(2025, 5, 6, 7, 8)) == "[user:héllo]GTrueT2|<s>|False|2025-05-06 07:08"
    assert t.render(add_generation_prompt=False, now=86400) == "GFalse|||1970-01-02 00:00"
    with pytest.raises(pocketllm.ChatTemplateError):
        t.render({"role": "user"})
    with pytest.raises(pocketllm.ChatTemplateError, match="nope"):
        pocketllm.ChatTemplate("{{ raise_exception('nope') }}").render([])
    with pytest.raises(pocketllm.ChatTemplateError, match="syntax error at line 1"):
        pocketllm.ChatTemplate("{% if %}")
    t.close()
    with pytest.raises(pocketllm.ChatTemplateError, match="closed"):
        t.render(msgs)


def test_chat_template_from_model(tiny):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    with pocketllm.ChatTemplate.from_model(tiny) as t:
        a = t.render(msgs, add_generation_prompt=True, enable_thinking=False)
        # what Model.apply_chat_template renders (the one-call C path)
        assert a == tiny.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False)
        assert a != t.render(msgs, add_generation_prompt=False, enable_thinking=False)


def test_session_rewind(tiny_f32):
    m = tiny_f32
    a = m.tokenize("The capital of France is Paris, and")
    b = m.tokenize(" the capital of Spain")
    with m.session() as s:
        full = s.eval(a)
        assert m.kv_len(0) == len(a)
        s.rewind(3)
        assert s.pos == 3 and m.kv_len(0) == 3
        np.testing.assert_allclose(s.eval(a[3:]), full, atol=1e-4)
        s.rewind(3)
        edited = s.eval(b)
        with pytest.raises(pocketllm.InvalidArgumentError):
            s.rewind(s.pos + 1)
        with pytest.raises(pocketllm.InvalidArgumentError):
            s.rewind(-1)
    np.testing.assert_allclose(edited, m.logits(a[:3] + b), atol=1e-4)


def test_kv_truncate_refuses_gaps():
    with pocketllm.Model(model_path("tiny-qwen3-f32"), ctx=64, sequences=2) as m:
        ids = m.tokenize("Hello, my name is")
        m.forward(ids, list(range(len(ids))), 1)
        assert m.kv_len(1) == len(ids) and m.kv_len(0) == 0 and m.kv_len(5) == -1
        m.kv_truncate(1, 2)
        assert m.kv_len(1) == 2
        with pytest.raises(pocketllm.InvalidArgumentError, match="gap"):
            m.forward([ids[3]], [3], 1)
        m.forward([ids[2]], [2], 1)
        assert m.kv_len(1) == 3
