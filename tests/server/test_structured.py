"""Structured output on `pocketllm serve` (issue 16): response_format
json_object / json_schema, llama-server's "grammar" (GBNF) and "json_schema"
request fields.

The tiny fixture model produces random text, so every output here is what
the grammar lets through: if it parses and validates at temperature 1 over
several seeds, the constraint is doing the work. Schemas bound their strings
(maxLength, enum) so that random sampling reaches the end well within
max_tokens; a generation that ran out of tokens would be cut JSON and is
reported as such (finish_reason "length") rather than skipped.
"""
import json
import re
from typing import List, Literal, Optional

import jsonschema
import openai
import pydantic
import pytest
import requests

ASK = [{"role": "user", "content": "Describe a person as JSON."}]
SEEDS = range(5)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "kind": {"enum": ["cat", "dog", None]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 3},
        "score": {"type": "number"},
        "born": {"type": "string", "format": "date"},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "kind", "tags", "born", "code"],
    "additionalProperties": False,
}

TREE = {
    "$defs": {"node": {"type": "object",
                       "properties": {"v": {"enum": [1, 2, 3]},
                                      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                       "required": ["v", "kids"], "additionalProperties": False}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}],
}

CHOICE = {"oneOf": [{"type": "string", "enum": ["yes", "no"]},
                    {"type": "object", "properties": {"n": {"const": 7}}, "required": ["n"],
                     "additionalProperties": False},
                    {"type": ["integer", "null"], "minimum": -5, "maximum": 5}]}


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def chat(server, **kw):
    body = {"model": "m", "messages": ASK, "max_tokens": 400, "temperature": 1, **kw}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    return ch["message"]["content"], ch["finish_reason"]


def complete(server, **kw):
    body = {"model": "m", "prompt": "JSON:", "max_tokens": 400, "temperature": 1, **kw}
    r = server.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    return ch["text"], ch["finish_reason"]


def validate(schema, text):
    jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())


def streamed(server, path, body):
    """Content and finish reason of a streamed request, reassembled."""
    r = requests.post(server.url + path, json={**body, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    text, finish = "", None
    for line in r.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        for ch in json.loads(line[6:])["choices"]:
            text += (ch.get("delta") or {}).get("content") or ch.get("text") or ""
            finish = ch["finish_reason"] or finish
    return text, finish


# ---- response_format ---------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_json_object(server, seed):
    text, finish = chat(server, seed=seed, response_format={"type": "json_object"})
    assert finish == "stop", text
    assert isinstance(json.loads(text), dict), text


@pytest.mark.parametrize("schema", [PERSON, TREE, CHOICE], ids=["person", "recursive", "oneof"])
@pytest.mark.parametrize("seed", SEEDS)
def test_json_schema_validates(server, schema, seed):
    rf = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}
    text, finish = chat(server, seed=seed, response_format=rf)
    assert finish == "stop", text
    validate(schema, text)


@pytest.mark.parametrize("seed", SEEDS)
def test_json_schema_on_completions(server, seed):
    rf = {"type": "json_schema", "json_schema": {"name": "out", "schema": PERSON}}
    text, finish = complete(server, seed=seed, response_format=rf)
    assert finish == "stop", text
    validate(PERSON, text)


def test_unconstrained_output_is_not_json(server):
    """The control: without the constraint the same requests do not give JSON."""
    bad = 0
    for seed in SEEDS:
        text, _ = chat(server, seed=seed, max_tokens=30)
        try:
            validate(PERSON, text)
        except (ValueError, jsonschema.ValidationError):
            bad += 1
    assert bad == len(SEEDS)


def test_json_schema_streaming_matches(server):
    rf = {"type": "json_schema", "json_schema": {"name": "out", "schema": PERSON}}
    body = {"model": "m", "messages": ASK, "max_tokens": 400, "temperature": 1, "seed": 3, "response_format": rf}
    whole, finish = chat(server, seed=3, response_format=rf)
    text, sfinish = streamed(server, "/v1/chat/completions", body)
    assert (text, sfinish) == (whole, finish)
    validate(PERSON, text)


# ---- the openai client's parse() with pydantic ----------------------------------

class Address(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=10)
    zip: int = pydantic.Field(ge=1000, le=99999)


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    age: int = pydantic.Field(ge=0, le=120)
    pet: Literal["cat", "dog", "none"]
    address: Address
    nick: Optional[str] = pydantic.Field(max_length=6)
    langs: List[Literal["c", "py", "go"]] = pydantic.Field(max_length=3)


@pytest.mark.parametrize("seed", SEEDS)
def test_openai_parse_pydantic(server, seed):
    r = client(server).chat.completions.parse(model="m", messages=ASK, response_format=Person, temperature=1,
                                              seed=seed, max_tokens=400)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(msg.parsed, Person), msg.content
    assert isinstance(msg.parsed.address, Address)
    assert Person.model_validate_json(msg.content) == msg.parsed


# ---- llama-server's fields ---------------------------------------------------------

GBNF = r'''
root   ::= answer " " number "!"
answer ::= "yes" | "no" | "maybe"
number ::= [1-9] [0-9]{0,2}
'''
GBNF_RE = re.compile(r"(yes|no|maybe) [1-9][0-9]{0,2}!")


@pytest.mark.parametrize("seed", SEEDS)
def test_grammar_field(server, seed):
    text, finish = chat(server, seed=seed, grammar=GBNF)
    assert GBNF_RE.fullmatch(text), text
    assert finish == "stop"
    text, finish = complete(server, seed=seed, grammar=GBNF)
    assert GBNF_RE.fullmatch(text), text
    assert finish == "stop"


def test_grammar_done_stops_early(server):
    """A grammar that admits nothing more ends the output (not max_tokens)."""
    body = {"model": "m", "messages": ASK, "max_tokens": 50, "temperature": 1, "seed": 1,
            "grammar": 'root ::= "ab" [0-9]'}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    j = r.json()
    assert re.fullmatch(r"ab[0-9]", j["choices"][0]["message"]["content"])
    assert j["choices"][0]["finish_reason"] == "stop"
    assert j["usage"]["completion_tokens"] <= 3


def test_grammar_streaming_matches(server):
    body = {"model": "m", "messages": ASK, "max_tokens": 100, "temperature": 1, "seed": 5, "grammar": GBNF}
    whole, finish = chat(server, seed=5, max_tokens=100, grammar=GBNF)
    assert streamed(server, "/v1/chat/completions", body) == (whole, finish)
    cbody = {"model": "m", "prompt": "JSON:", "max_tokens": 100, "temperature": 1, "seed": 5, "grammar": GBNF}
    cwhole, cfinish = complete(server, seed=5, max_tokens=100, grammar=GBNF)
    assert streamed(server, "/v1/completions", cbody) == (cwhole, cfinish)


def test_grammar_dead_end_stops_cleanly(server):
    """A grammar that can reach a point where no token of the vocabulary
    fits (here an empty character range after "a") ends the output there:
    finish_reason "stop", not an error and not a hang. A grammar engine that
    refused the empty range at parse time would answer 400 instead."""
    for stream in (False, True):
        body = {"model": "m", "messages": ASK, "max_tokens": 20, "temperature": 1, "seed": 1,
                "grammar": 'root ::= "a" [z-a]'}
        if stream:
            r = requests.post(server.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=60)
        else:
            r = server.post("/v1/chat/completions", body)
        if r.status_code == 400:
            assert r.json()["error"]["param"] == "grammar"
            continue
        assert r.status_code == 200, r.text
        if stream:
            text, finish = streamed(server, "/v1/chat/completions", body)
        else:
            text, finish = r.json()["choices"][0]["message"]["content"], r.json()["choices"][0]["finish_reason"]
        assert (text, finish) == ("a", "stop")


@pytest.mark.parametrize("seed", SEEDS)
def test_json_schema_field(server, seed):
    text, finish = chat(server, seed=seed, json_schema=CHOICE)
    assert finish == "stop", text
    validate(CHOICE, text)


def test_n_choices_each_constrained(server):
    body = {"model": "m", "messages": ASK, "max_tokens": 100, "temperature": 1, "seed": 2, "n": 3,
            "grammar": GBNF}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    for ch in r.json()["choices"]:
        assert GBNF_RE.fullmatch(ch["message"]["content"]), ch


def test_structured_output_is_never_a_tool_call(server):
    """With tools offered ("auto") and a schema whose answers look like a
    Llama 3 call, the JSON stays content."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    schema = {"type": "object", "properties": {"name": {"const": "get_weather"}, "parameters": {
        "type": "object", "properties": {}, "additionalProperties": False}},
        "required": ["name", "parameters"], "additionalProperties": False}
    body = {"model": "m", "messages": ASK, "max_tokens": 100, "temperature": 0, "tools": [tool],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    assert "tool_calls" not in ch["message"] and ch["finish_reason"] == "stop"
    assert json.loads(ch["message"]["content"]) == {"name": "get_weather", "parameters": {}}


def test_text_and_empty_grammar_ask_for_nothing(server):
    a, _ = chat(server, seed=4, max_tokens=12, response_format={"type": "text"})
    b, _ = chat(server, seed=4, max_tokens=12, grammar="")
    c, _ = chat(server, seed=4, max_tokens=12)
    assert a == b == c


# ---- bad input: 400 naming the field ------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.mark.parametrize("extra, param, words", [
    ({"grammar": 'root ::= "a'}, "grammar", "grammar 1:"),
    ({"grammar": "root ::= undefined-rule"}, "grammar", "undefined-rule"),
    ({"grammar": "x ::= \"a\""}, "grammar", "root"),
    ({"grammar": 5}, "grammar", "string"),
    ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar", "response_format"),
    ({"json_schema": {"type": "object"}, "grammar": 'root ::= "a"'}, "json_schema", "grammar"),
    ({"json_schema": {"type": "object"}, "response_format": {"type": "json_object"}}, "json_schema",
     "response_format"),
    ({"json_schema": {"type": "string", "not": {}}}, "json_schema", "'not'"),
    ({"json_schema": [1]}, "json_schema", "schema"),
    ({"response_format": {"type": "yaml"}}, "response_format", "json_schema"),
    ({"response_format": "json"}, "response_format", "type"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "if": {}}}}}}}, "response_format", "'if'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$ref": "#/$defs/missing"}}}}, "response_format", "missing"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": "yes",
                                                                 "schema": {}}}}, "response_format", "strict"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}}, "response_format",
     "name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 7}}}, "response_format",
     "schema"),
    ({"response_format": {"type": "json_object", "schema": "x"}}, "response_format", "schema"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
     "response_format", "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "required", "grammar": 'root ::= "a"'}, "grammar", "tool_choice"),
])
def test_structured_400(server, extra, param, words):
    body = {"model": "m", "messages": ASK, "max_tokens": 1, **extra}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert words in err["message"], err


def test_structured_400_on_completions(server):
    r = server.post("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 1, "grammar": "root ::= ("})
    assert r.status_code == 400 and r.json()["error"]["param"] == "grammar", r.text
    r = server.post("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 1,
                                        "response_format": {"type": "json_schema",
                                                            "json_schema": {"schema": {"type": "object",
                                                                                       "patternProperties": {}}}}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format" and "patternProperties" in err["message"], err


def test_server_survives_bad_grammars(server):
    """A burst of broken grammars leaves the server answering normally."""
    for g in ['root ::= "', "root ::= [", "root ::= root", "root ::= a\na ::= root \"x\"", "::=", "\x01",
              "root ::= \"a\"{5,2}"]:
        r = server.post("/v1/chat/completions", {"model": "m", "messages": ASK, "max_tokens": 1, "grammar": g})
        assert r.status_code == 400, (g, r.text)
    text, finish = chat(server, seed=1, grammar=GBNF, max_tokens=50)
    assert GBNF_RE.fullmatch(text)
