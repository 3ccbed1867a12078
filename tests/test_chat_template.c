/* Chat templates: the 72 fixture cases (real templates rendered by jinja2 the
 * way transformers does) must match byte for byte; a table of smaller
 * templates pins individual jinja2 behaviours (expected texts produced with
 * jinja2 3.1 in Hugging Face's configuration); hostile templates must fail
 * cleanly with an error, never crash or run away. */
#include "testutil.h"
#include "chat/chat_template.h"
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct tm fixed_now(void) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 0;
    tm.tm_mday = 2;
    tm.tm_hour = 3;
    tm.tm_min = 4;
    tm.tm_sec = 5;
    tm.tm_wday = 5;   /* a Friday */
    tm.tm_yday = 1;
    return tm;
}

/* Renders src with a JSON context; returns the text or NULL (status in *st). */
static char *render_opts(const char *src, const char *ctx, const pl_chat_template_options *o, pl_status *st) {
    pl_chat_template *t = NULL;
    *st = pl_chat_template_parse(src, strlen(src), &t);
    if (*st != PL_OK) return NULL;
    char *out = NULL;
    size_t n;
    *st = pl_chat_template_render_json(t, ctx ? ctx : "{}", strlen(ctx ? ctx : "{}"), o, &out, &n);
    pl_chat_template_free(t);
    return out;
}

static char *render(const char *src, const char *ctx, pl_status *st) {
    struct tm now = fixed_now();
    pl_chat_template_options o = {0};
    o.now = &now;
    return render_opts(src, ctx, &o, st);
}

/* ------------------------------------------------ jinja2 behaviour table */

/* Expected texts below were produced by jinja2 3.1 configured like
 * transformers (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
 * loopcontrols, tojson = json.dumps(ensure_ascii=False)). expect == NULL:
 * jinja2 raises, so we must fail too. */
/* Generated from jinja2 3.1.6 renders (trim_blocks, lstrip_blocks, loopcontrols, HF tojson). */
static const char *const feature_ctx[] = {
    "{\"a\": 1, \"b\": [1, 2], \"s\": \"h\303\251llo w\303\266rld\", \"n\": null, \"t\": true, \"f\": 1.5, \"e\": \"\", \"l\": [3, 1, 2], \"msgs\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"bye\"}], \"d\": {\"x\": 1, \"y\": {\"z\": [1, 2]}, \"items\": 5}, \"u\": \"\303\205\303\237\303\207 stra\303\237e \316\243\316\221\316\243\", \"big\": 12345678901234}",
    "{\"a\": 1, \"l\": [1, 2], \"x\": \" sp \"}",
    "{\"a\": 1, \"l\": [1, 2], \"s\": \"str\", \"d\": {\"k\": \"v\"}, \"n\": null}",
    "{}",
    "{\"people\": [{\"name\": \"bob\", \"age\": 30, \"tags\": [\"a\"]}, {\"name\": \"Alice\", \"age\": 25}, {\"name\": \"carl\", \"age\": 30, \"x\": {\"y\": 1}}], \"nums\": [3, -1, 2.5, 0, true], \"words\": [\"b\", \"A\", \"a\", \"B\", \"c\"], \"d\": {\"b\": 2, \"A\": 1, \"a\": 3}, \"mixed\": [1, \"a\", null], \"empty\": []}",
};
static const struct feature_case { const char *tmpl; int ctx; const char *expect; } feature_cases[] = {
    {"{{ a }}{{ b }}{{ s }}{{ n }}{{ t }}{{ f }}{{ e }}{{ d }}", 0, "1[1, 2]h\303\251llo w\303\266rldNoneTrue1.5{'x': 1, 'y': {'z': [1, 2]}, 'items': 5}"},
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", 0, "7 9 64 4 3 -4 -2 2 3.0 0.5"},
    {"{{ 1 / 3 }} {{ 2 / 2 }} {{ 1e300 * 1e10 }} {{ 0.1 + 0.2 }} {{ 1.5e-7 }} {{ 123456789.0 * 1000000000 }} {{ 3.0 * 2 }}", 0, "0.3333333333333333 1.0 inf 0.30000000000000004 1.5e-07 1.23456789e+17 6.0"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ [1] }}|{{ 'x' ~ undefined_var ~ 'y' }}", 0, "a1NoneTrue[1]|xy"},
    {"{{ 'abc'[1] }}{{ 'abc'[-1] }}{{ 'abc'[1:] }}{{ 'abc'[:-1] }}{{ 'abcdef'[::2] }}{{ 'abcdef'[::-2] }}{{ s[::-1] }}{{ s[2:5] }}", 0, "bcbcabacefdbdlr\303\266w oll\303\251hllo"},
    {"{{ l[1:] }}{{ l[::-1] }}{{ l[-2:] }}{{ l[5:] }}{{ l[-100:100] }}{{ l[2:0:-1] }}", 0, "[1, 2][2, 1, 3][1, 2][][3, 1, 2][2, 1]"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", 0, "x=1;y={'z': [1, 2]};items=5;"},
    {"{% for k in d %}{{ k }}{% endfor %}{% for ch in 'h\303\251j' %}[{{ ch }}]{% endfor %}", 0, "xyitems[h][\303\251][j]"},
    {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}", 0, "1032TrueFalse31|2121FalseFalse332|3210FalseTrue31|"},
    {"{% for x in l if x > 1 %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% else %}none{% endfor %}", 0, "1/2:3 2/2:2 "},
    {"{% for x in [] %}a{% else %}empty{% endfor %}{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}", 0, "empty32"},
    {"{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}", 0, "aba"},
    {"{% for m in msgs %}{% for c in m.content %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", 0, "1211221233"},
    {"{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}", 0, "22"},
    {"{% set ns = namespace(c=0, s='') %}{% for i in l %}{% set ns.c = ns.c + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.c }} {{ ns.s }}", 0, "6 312"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1,) %}{{ t }}{% set t2 = () %}{{ t2 }}", 0, "12(1,)()"},
    {"{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} {{ greet('Al', greeting='Hi') }} {{ greet(name='Z') }}", 0, "Hello, Bob! Hi, Al! Hello, Z!"},
    {"{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", 0, "(1, 2){'k': 3}"},
    {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ a }}{% endcall %}", 0, "<b>bold 1</b>"},
    {"{% filter upper %}hello {{ s }}{% endfilter %}|{% set x | trim %}  padded  {% endset %}[{{ x }}]", 0, "HELLO H\303\211LLO W\303\226RLD|[padded]"},
    {"{% set v %}a{{ 1 }}b{% endset %}{{ v }}{{ v|length }}", 0, "a1b3"},
    {"{{ s|upper }} {{ s|lower }} {{ s|title }} {{ s|capitalize }} {{ u|upper }} {{ u|lower }}", 0, "H\303\211LLO W\303\226RLD h\303\251llo w\303\266rld H\303\251llo W\303\266rld H\303\251llo w\303\266rld \303\205SS\303\207 STRASSE \316\243\316\221\316\243 \303\245\303\237\303\247 stra\303\237e \317\203\316\261\317\202"},
    {"{{ '  x y  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s|length }}|{{ l|count }}|{{ d|length }}", 0, "x y|a|11|3|3"},
    {"{{ l|first }}{{ l|last }}{{ s|first }}{{ s|last }}{{ []|first }}|{{ l|join(',') }}{{ l|join }}|{{ msgs|map(attribute='role')|join(' ') }}", 0, "32hd|3,1,2312|user assistant user"},
    {"{{ l|sort }}{{ l|sort(reverse=true) }}{{ ['b','A','c']|sort }}{{ ['b','A','c']|sort(case_sensitive=true) }}{{ msgs|sort(attribute='content')|map(attribute='content')|list }}", 0, "[1, 2, 3][3, 2, 1]['A', 'b', 'c']['A', 'b', 'c']['bye', 'hi', 'yo']"},
    {"{{ [1,2,1,3]|unique|list }}{{ ['a','A','b']|unique|list }}{{ l|max }}{{ l|min }}{{ l|sum }}{{ msgs|selectattr('role','equalto','user')|list|length }}", 0, "[1, 2, 3]['a', 'b']3162"},
    {"{{ l|select('odd')|list }}{{ l|reject('odd')|list }}{{ l|select|list }}{{ [0,1,'',none,'a']|select|list }}{{ msgs|rejectattr('role','==','user')|map(attribute='content')|first }}", 0, "[3, 1][2][3, 1, 2][1, 'a']yo"},
    {"{{ 'a-b-c'|replace('-', '+') }}{{ 'aaa'|replace('a','b',2) }}{{ 3.7|int }}{{ '12'|int + 1 }}{{ 'x'|int(7) }}{{ '0x1A'|int(0, 16) }}{{ 2|float }}{{ 'nan'|float }}", 0, "a+b+cbba3137262.0nan"},
    {"{{ -3|abs }}{{ (-3)|abs }}{{ 2.567|round(2) }}{{ 2.5|round }}{{ 3.5|round }}{{ 2.567|round(1, 'floor') }}{{ 2.561|round(1, 'ceil') }}", 0, "332.572.04.02.52.6"},
    {"{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ msgs|tojson(indent=4) }}|{{ '\303\251\"\\\n'|tojson }}|{{ [1.0, 2.5e-8, 1e100]|tojson }}", 0, "{\"x\": 1, \"y\": {\"z\": [1, 2]}, \"items\": 5}|{\n  \"x\": 1,\n  \"y\": {\n    \"z\": [\n      1,\n      2\n    ]\n  },\n  \"items\": 5\n}|[\n    {\n        \"role\": \"user\",\n        \"content\": \"hi\"\n    },\n    {\n        \"role\": \"assistant\",\n        \"content\": \"yo\"\n    },\n    {\n        \"role\": \"user\",\n        \"content\": \"bye\"\n    }\n]|\"\303\251\\\"\"|[1.0, 2.5e-08, 1e+100]"},
    {"{{ d|tojson(sort_keys=true) }}{{ {'b':1,'a':2}|tojson(separators=(',',':')) }}{{ '\303\251'|tojson(ensure_ascii=true) }}{{ '\360\237\230\200'|tojson(ensure_ascii=true) }}", 0, "{\"items\": 5, \"x\": 1, \"y\": {\"z\": [1, 2]}}{\"b\":1,\"a\":2}\"\\u00e9\"\"\\ud83d\\ude00\""},
    {"{{ d|items|list }}{{ d|dictsort }}{{ d|dictsort(by='value', reverse=true) if false else '' }}", 0, "[('x', 1), ('y', {'z': [1, 2]}), ('items', 5)][('items', 5), ('x', 1), ('y', {'z': [1, 2]})]"},
    {"{{ s|wordcount }}{{ 'a b\nc'|indent(2) }}|{{ 'x'|center(9) }}|{{ '%s-%d' % ('a', 3) }}|{{ '%5.2f|%-4s|%03d' % (3.14159, 'ab', 7) }}|{{ 'v=%(x)s' % d }}", 0, "2a b\n  c|    x    |a-3| 3.14|ab  |007|v=1"},
    {"{{ '{} {}'.format(1, 'a') }}|{{ '{0}{1}{0}'.format('x','y') }}|{{ '{a}-{b}'.format(a=1, b=2) }}|{{ '{:>5}|{:<5}|{:^5}|{:05d}|{:.2f}|{:,}'.format('r','l','c',42,3.14159,1234567) }}", 0, "1 a|xyx|1-2|    r|l    |  c  |00042|3.14|1,234,567"},
    {"{{ s.upper() }}{{ s.startswith('h\303\251') }}{{ s.endswith(('x','ld')) }}{{ s.find('l') }}{{ s.rfind('l') }}{{ s.count('l') }}{{ s.replace('l', 'L') }}{{ s.split() }}{{ s.split('l', 1) }}{{ s.rsplit('l', 1) }}", 0, "H\303\211LLO W\303\226RLDTrueTrue293h\303\251LLo w\303\266rLd['h\303\251llo', 'w\303\266rld']['h\303\251', 'lo w\303\266rld']['h\303\251llo w\303\266r', 'd']"},
    {"{{ '  a b  '.strip() }}|{{ '\n\nx\n'.lstrip('\n') }}|{{ 'x\n\n'.rstrip() }}|{{ ',a,,b,'.split(',') }}|{{ ' a  b '.split() }}|{{ ' a  b '.split(none, 1) }}|{{ ' a  b '.rsplit(none, 1) }}", 0, "a b|x\n|x|['', 'a', '', 'b', '']|['a', 'b']|['a', 'b ']|[' a', 'b']"},
    {"{{ 'Hello World'.title() }}{{ \"they're bill's\".title() }}{{ 'hello'.capitalize() }}{{ 'ab'.center(6, '*') }}{{ '42'.zfill(5) }}{{ '-42'.zfill(5) }}{{ 'abc'.isalpha() }}{{ '12'.isdigit() }}", 0, "Hello WorldThey'Re Bill'SHello**ab**00042-0042TrueTrue"},
    {"{{ 'a,b'.partition(',') }}{{ 'prefix_x'.removeprefix('prefix_') }}{{ ','.join(['a','b']) }}{{ 'l1\nl2\r\nl3'.splitlines() }}{{ 'x'.ljust(3) }}|", 0, "('a', ',', 'b')xa,b['l1', 'l2', 'l3']x  |"},
    {"{{ d.get('x') }}{{ d.get('q') }}{{ d.get('q', 9) }}{{ d.keys()|list }}{{ d.values()|list|length }}{{ l.index(2) }}{{ l.count(3) }}", 0, "1None9['x', 'y', 'items']321"},
    {"{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' in 'cat' }}{{ 2 in l }}{{ 'x' in d }}{{ 'q' not in d }}{{ [1,2] == [1,2] }}{{ (1,2) == [1,2] }}{{ {'a':1} == {'a':1} }}", 0, "TrueTrueTrueFalseTrueTrueTrueTrueTrueFalseTrue"},
    {"{{ a and b }}{{ n or 'default' }}{{ e or n }}{{ not a }}{{ not n }}{{ a if t else 'no' }}{{ 'yes' if n }}|{{ 'yes' if n else 'no' }}", 0, "[1, 2]defaultNoneFalseTrue1|no"},
    {"{{ a is defined }}{{ zz is defined }}{{ zz is undefined }}{{ n is none }}{{ t is boolean }}{{ a is integer }}{{ f is float }}{{ a is number }}{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ l is sequence }}{{ a is even }}{{ a is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}", 0, "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueFalse"},
    {"{{ t is true }}{{ t is false }}{{ 1 is true }}{{ 'a' is in 'abc' }}{{ a is eq 1 }}{{ a is ne 1 }}{{ a is lt 2 }}{{ a is ge 1 }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ n is sameas none }}{{ range is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}", 0, "TrueFalseFalseTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"{{ range(5)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ range(0)|list }}{{ dict(a=1, b=2) }}{{ namespace(x=1).x }}", 0, "[0, 1, 2, 3, 4][1, 4, 7][5, 3, 1][]{'a': 1, 'b': 2}1"},
    {"{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j') }}", 0, "02 Jan 2026|2026-01-02 03:04:05 Friday January 002"},
    {"{% if a %}A{% elif b %}B{% else %}C{% endif %}{% if n %}A{% elif e %}B{% else %}C{% endif %}", 0, "AC"},
    {"{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}{{ ('a',) }}{{ {'q': \"it's\"} }}{{ ['a\"b', \"c'd\", 'e\\'f\"g'] }}{{ ['\\t\\x01\\x7f', '\303\251\\u200b'] }}", 0, "[1, 'a', None, True, 1.5, [2], {'k': 'v'}]('a',){'q': \"it's\"}['a\"b', \"c'd\", 'e\\'f\"g']['\\t\\x01\\x7f', '\303\251\\u200b']"},
    {"{{ \"\\n\\t\\\\ \\x41 \\u00e9 \\U0001F600 \\101 \\q\" }}|{{ 'a' 'b' \"c\" }}", 0, "\n\t\\ A \303\251 \360\237\230\200 A \\q|abc"},
    {"{{ 0b101 }} {{ 0o17 }} {{ 0xFF }} {{ 1_000 }} {{ 1.5e3 }} {{ 10E-2 }} {{ 1_0.2_5 }}", 0, "5 15 255 1000 1500.0 0.1 10.25"},
    {"  {% if true %}\n  x\n  {% endif %}\n  y  \n{%- if true %} z {% endif -%}\n\n w", 0, "  x\n  y z w"},
    {"a\n{# comment #}\nb\n  {#- c -#}  \nc {#+ d +#}\n", 0, "a\nbc "},
    {"{{ 'x' }}\n{{- ' y' }} {{- ' z' -}} \n\n  end", 0, "x y zend"},
    {"line1\n  {%+ if true %}kept{% endif %}\n{% if true +%}\nnot-trimmed{% endif %}", 0, "line1\n  kept\nnot-trimmed"},
    {"{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}  |", 0, "{{ not evaluated }} {% if %}|x|"},
    {"\r\nwin\r\nlines\r\n{% if true %}\r\nx\r\n{% endif %}\r\n", 0, "\nwin\nlines\nx\n"},
    {"trailing newline kept?\n", 0, "trailing newline kept?"},
    {"two trailing\n\n", 0, "two trailing\n"},
    {"{{ d['y'] }}{{ msgs[0] }}{{ msgs[-1]['content'] }}{{ msgs[5] }}|{{ msgs|length }}", 0, "{'z': [1, 2]}{'role': 'user', 'content': 'hi'}bye|3"},
    {"{% for m in msgs %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}", 0, "user,assistant,user"},
    {"{% with x = 5, y = a %}{{ x + y }}{% endwith %}{{ x }}", 0, "6"},
    {"{{ msgs|map(attribute='content')|map('upper')|join }}{{ l|map('string')|join('-') }}{{ msgs|map(attribute='zz', default='D')|list }}", 0, "HIYOBYE3-1-2['D', 'D', 'D']"},
    {"{{ 'abc'|reverse }}{{ l|reverse|list }}{{ l|batch(2)|list }}{{ l|batch(2, 0)|list }}", 0, "cba[2, 1, 3][[3, 1], [2]][[3, 1], [2, 0]]"},
    {"{{ '%s' % none }}{{ '%r' % 'x' }}{{ '%x %X %o %#x %e %g %c' % (255, 255, 8, 255, 1234.5, 0.00001, 65) }}{{ '%%' % () }}{{ '%+d % d' % (5, 5) }}", 0, "None'x'ff FF 10 0xff 1.234500e+03 1e-05 A%+5  5"},
    {"{{ 'a'|format }}{{ '%s and %s'|format('x', 'y') }}{{ '%(k)s'|format(k='v') }}", 0, "ax and yv"},
    {"{{ 10 / 4 }} {{ 10 // 4 }} {{ 2 ** 0.5 }} {{ 2 ** -2 }} {{ 10 ** 15 }} {{ 1e16 }} {{ 1e15 }} {{ 100.0 }} {{ -0.0 }} {{ 1e-4 }} {{ 1e-5 }} {{ 123e-20 }}", 0, "2.5 2 1.4142135623730951 0.25 1000000000000000 1e+16 1000000000000000.0 100.0 -0.0 0.0001 1e-05 1.23e-18"},
    {"{{ big * 1000 }} {{ big / 7 }} {{ 2**62 }} {{ -(2**62) }}", 0, "12345678901234000 1763668414462.0 4611686018427387904 -4611686018427387904"},
    {"{{ 'x' * 3 }}{{ 3 * 'ab' }}{{ [0] * 3 }}{{ 'x' * 0 }}{{ 'x' * -1 }}{{ true + 1 }}{{ true * 'z' }}", 0, "xxxababab[0, 0, 0]2z"},
    {"{{ [1, 2] + [3] }}{{ (1,) + (2,) }}{{ 'a' + 'b' }}{{ 1 + 1.5 }}", 0, "[1, 2, 3](1, 2)ab2.5"},
    {"{{ zz|default('dflt') }}{{ e|default('dflt') }}{{ e|default('dflt', true) }}{{ n|default('z') }}{{ zz|d(5) }}", 0, "dfltdfltNone5"},
    {"{{ zz }}|{{ zz|length }}|{{ zz|list }}|{{ zz|string }}|{{ zz|trim }}|{{ zz|join }}|{{ zz|items|list }}|{{ zz|upper }}|{{ zz|sort }}|{{ zz|first }}", 0, "|0|[]||||[]||[]|"},
    {"{% for x in zz %}a{% else %}else{% endfor %}{{ 'q' in zz }}{{ zz == zz }}{{ zz != 1 }}{{ not zz }}{{ zz is iterable }}", 0, "elseFalseTrueTrueTrueTrue"},
    {"{% set x = [1, 2, 3] %}{% set y = x[1:] %}{{ y }}{% set messages = msgs[1:] %}{{ messages|length }}{{ msgs|length }}", 0, "[2, 3]23"},
    {"{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}", 0, "10 20 21 "},
    {"{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %}", 0, "37123"},
    {"{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}", 0, "54321"},
    {"{% set x = 'outer' %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% set x = 'changed' %}{{ m() }}", 0, "outerchanged"},
    {"{{ [3, 1, 2]|sort|first }}{{ {'b': 2, 'a': 1}|dictsort|first }}{{ ['x', 'y']|list|last }}", 0, "1('a', 1)y"},
    {"{% print 'a', 1 %}|{% print s %}", 0, "a1|h\303\251llo w\303\266rld"},
    {"{% for i in range(3) %}{{ loop.changed(i // 2) }}{% endfor %}", 0, "TrueFalseTrue"},
    {"{{ '\303\251'|length }}{{ '\346\227\245\346\234\254\350\252\236'[1] }}{{ '\346\227\245\346\234\254\350\252\236'|reverse }}{{ '\346\227\245\346\234\254\350\252\236'[::-1] }}{{ 'a\303\251'.upper() }}{{ 'x\302\240y'.split() }}{{ '\343\200\200x\343\200\200'.strip() }}", 0, "1\346\234\254\350\252\236\346\234\254\346\227\245\350\252\236\346\234\254\346\227\245A\303\211['x', 'y']x"},
    {"{{ 1 if true }}{{ 1 if false }}|{{ [1 if x else 2 for x in []] if false else 'lc' }}", 0, NULL},
    {"{% if a %}\n    X\n{% endif %}\n", 1, "    X\n"},
    {"    {% if a %}\n    X\n    {% endif %}\n", 1, "    X\n"},
    {"\t {% if a %}yes{% endif %} \t\nafter", 1, "yes \t\nafter"},
    {"text    {% if a %}inline{% endif %}   more", 1, "text    inline   more"},
    {"{%- if a -%}\n\n  X  \n\n{%- endif -%}\n\n", 1, "X"},
    {"A  {{- x -}}  B", 1, "A sp B"},
    {"A  {{+ x +}}  B", 1, NULL},
    {"A\n  {#- c #}\nB", 1, "AB"},
    {"A\n  {# c -#}\n  B", 1, "A\nB"},
    {"A\n  {# c +#}\nB", 1, "A\n\nB"},
    {"A {%- raw %} R {% endraw -%} B", 1, "A R B"},
    {"x{% raw -%}\n  R\n{%- endraw %}\ny", 1, "xRy"},
    {"{% for i in l %}\n  {{ i }}\n{% endfor %}\n", 1, "  1\n  2\n"},
    {"{% for i in l -%}\n  {{ i }}\n{%- endfor %}\n", 1, "12"},
    {"{{ {'a': {'b': 1}} }}", 1, "{'a': {'b': 1}}"},
    {"{{ {'a': {'b': 1}}}}", 1, "{'a': {'b': 1}}"},
    {"{{ a -}}\n\n{{- a }}", 1, "11"},
    {"{{ a-1 }}{{ a -1 }}{{ a - 1 }}{{a}}", 1, "0001"},
    {"{%if a%}x{%endif%}", 1, "x"},
    {"{% if a %}{% if l %}nested{% endif %}{% endif %}", 1, "nested"},
    {"  \n  {% if a %}\n  y\n  {% endif %}  \n  z", 1, "  \n  y\n  \n  z"},
    {"{{ 'a' }}   {% if a %}b{% endif %}", 1, "a   b"},
    {"a\n\n{% set q = 1 %}\n\nb", 1, "a\n\n\nb"},
    {"{% set q = 1 %}{{ q }}\n", 1, "1"},
    {"  {{ a }}\n  {% if a %}x{% endif %}", 1, "  1\nx"},
    {"{%- for i in l %}\n{{- i }}\n{%- endfor %}", 1, "12"},
    {"{{ 'x' if a else 'y' }}{{ 'x' if not a else 'y' }}{{ a if a > 0 else -a }}", 1, "xy1"},
    {"{{ (a) }}{{ (a,) }}{{ (a, 2) }}{{ [a,] }}{{ {'k': a,} }}{{ f(1,) if false else '' }}", 1, "1(1,)(1, 2)[1]{'k': 1}"},
    {"{{ l|length > 1 and l[0] == 1 }}{{ not l|length }}{{ -l|length }}", 1, NULL},
    {"{{ a + 1|string }}", 1, NULL},
    {"{{ 'n' ~ a|string ~ 'n' }}", 1, "n1n"},
    {"{{ 2 * 3 ~ 4 }}{{ 2 ~ 3 * 4 }}", 1, "64212"},
    {"{{ not a == 1 }}{{ not a is defined }}{{ a is not defined }}{{ a is not none }}", 1, "FalseFalseFalseTrue"},
    {"{{ l[0] if l else 'e' }}{{ l[-1] }}{{ l.0 }}{{ l.1 }}", 1, "1212"},
    {"{{ a is divisibleby 1 }}{{ a is sameas 1 }}", 1, "TrueTrue"},
    {"{{ 'a' is string and 'b' is string }}", 1, "True"},
    {"{{ '\\'' }}{{ \"\\\"\" }}{{ 'a\\\nb' }}", 1, "'\"ab"},
    {"{{ 1.0e1 }}{{ 1.e1 if false else '' }}", 1, "10.0"},
    {"{# multi\nline\ncomment #}x", 1, "x"},
    {"{{ x|trim|upper|replace('S','Z') }}", 1, "ZP"},
    {"{% set l2 = l + [3] %}{{ l2 }}{{ l }}", 1, "[1, 2, 3][1, 2]"},
    {"{% if a is defined and a %}ok{% endif %}", 1, "ok"},
    {"{%- set foo = 'bar' -%}\n{{- foo -}}\n", 1, "bar"},
    {"{{ 'abc' if 'b' in 'abc' }}", 1, "abc"},
    {"{% for i in range(3) %}{{ i }}{% if loop.last %}!{% endif %}{% endfor %}", 1, "012!"},
    {"{{ undefined_x.attr }}", 2, NULL},
    {"{{ undefined_x[0] }}", 2, NULL},
    {"{{ undefined_x() }}", 2, NULL},
    {"{{ undefined_x + 1 }}", 2, NULL},
    {"{{ 1 + undefined_x }}", 2, NULL},
    {"{{ undefined_x < 1 }}", 2, NULL},
    {"{{ -undefined_x }}", 2, NULL},
    {"{{ undefined_x|tojson }}", 2, NULL},
    {"{{ undefined_x|abs }}", 2, NULL},
    {"{{ undefined_x|round }}", 2, NULL},
    {"{{ s() }}", 2, NULL},
    {"{{ a.b.c }}", 2, NULL},
    {"{{ n.b.c }}", 2, NULL},
    {"{{ d.k.x.y }}", 2, NULL},
    {"{{ l[5].x }}", 2, NULL},
    {"{{ s + 1 }}", 2, NULL},
    {"{{ 1 - 'a' }}", 2, NULL},
    {"{{ l + 1 }}", 2, NULL},
    {"{{ d + d }}", 2, NULL},
    {"{{ s * s }}", 2, NULL},
    {"{{ 1 / 0 }}", 2, NULL},
    {"{{ 1 % 0 }}", 2, NULL},
    {"{{ 1.0 // 0 }}", 2, NULL},
    {"{{ 1 < 'a' }}", 2, NULL},
    {"{{ l < s }}", 2, NULL},
    {"{{ 1 in s }}", 2, NULL},
    {"{{ 1 in a }}", 2, NULL},
    {"{{ [1] in d }}", 2, NULL},
    {"{% for x in a %}{% endfor %}", 2, NULL},
    {"{% for x in n %}{% endfor %}", 2, NULL},
    {"{% for a, b in l %}{% endfor %}", 2, NULL},
    {"{{ n|length }}", 2, NULL},
    {"{{ a|length }}", 2, NULL},
    {"{{ a|join }}", 2, NULL},
    {"{{ s|dictsort }}", 2, NULL},
    {"{{ l.append(3) }}", 2, NULL},
    {"{{ d.update({}) }}", 2, NULL},
    {"{{ d.pop('k') }}", 2, NULL},
    {"{{ l.sort() }}", 2, NULL},
    {"{{ range(1, 2, 0) }}", 2, NULL},
    {"{{ range('a') }}", 2, NULL},
    {"{{ range(100001)|length }}", 2, NULL},
    {"{{ raise_exception('custom message') }}", 2, NULL},
    {"{% if true %}{{ raise_exception('in if') }}{% endif %}", 2, NULL},
    {"{{ '%d' % 'x' }}", 2, NULL},
    {"{{ '%s %s' % ('a',) }}", 2, NULL},
    {"{{ '%s' % ('a', 'b') }}", 2, NULL},
    {"{{ '{}'.format() }}", 2, NULL},
    {"{{ '{'.format() }}", 2, NULL},
    {"{{ '}'.format() }}", 2, NULL},
    {"{{ s.split('') }}", 2, NULL},
    {"{{ s.index('z') }}", 2, NULL},
    {"{{ l.index(9) }}", 2, NULL},
    {"{{ 'a'|center('x') }}", 2, NULL},
    {"{{ [1, 'a']|sort }}", 2, NULL},
    {"{{ [[1], [2]]|unique|list }}", 2, NULL},
    {"{{ {'a': 1}|max }}", 2, "a"},
    {"{% set x.y = 1 %}", 2, NULL},
    {"{% set ns = namespace() %}{% set s.y = 1 %}", 2, NULL},
    {"{{ l[1:2:0] }}", 2, NULL},
    {"{{ {[1]: 2} }}", 2, NULL},
    {"{{ caller() }}", 2, NULL},
    {"{{ varargs }}", 2, ""},
    {"{{ loop.index }}", 2, NULL},
    {"{{ 'a' is divisibleby 2 }}", 2, NULL},
    {"{{ s is even }}", 2, NULL},
    {"{{ }}", 2, NULL},
    {"{% %}", 2, NULL},
    {"{% if %}{% endif %}", 2, NULL},
    {"{% for x in %}{% endfor %}", 2, NULL},
    {"{% for x y %}{% endfor %}", 2, NULL},
    {"{{ a b }}", 2, NULL},
    {"{% set %}", 2, NULL},
    {"{% set 1 = 2 %}", 2, NULL},
    {"{% set a.b = 1 %}x", 2, NULL},
    {"{% endif %}", 2, NULL},
    {"{% else %}", 2, NULL},
    {"{% if a %}{% else %}{% else %}{% endif %}", 2, NULL},
    {"{% macro %}{% endmacro %}", 2, NULL},
    {"{% macro m(a=1, b) %}{% endmacro %}", 2, NULL},
    {"{% call m %}{% endcall %}", 2, NULL},
    {"{{ a | }}", 2, NULL},
    {"{{ a is }}", 2, NULL},
    {"{{ 1 +* 2 }}", 2, NULL},
    {"{{ [1, 2 }}", 2, NULL},
    {"{{ {'a' 1} }}", 2, NULL},
    {"{{ a[] }}", 2, ""},
    {"{{ a. }}", 2, NULL},
    {"{{ f(a=1, 2) }}", 2, NULL},
    {"{{ 'a' is defined is defined }}", 2, NULL},
    {"{% for x in l %}{% continue %}", 2, NULL},
    {"{% filter %}{% endfilter %}", 2, NULL},
    {"{% with %}{% endwith %}", 2, ""},
    {"{{ @ }}", 2, NULL},
    {"{{ a;b }}", 2, NULL},
    {"{% extends 'x' %}", 2, NULL},
    {"{% import 'x' as y %}", 2, NULL},
    {"{% from 'x' import y %}", 2, NULL},
    {"{% block b %}x{% endblock %}{% endblock %}", 2, NULL},
    {"{% do l.append(1) %}", 2, NULL},
    {"{{ a }", 2, NULL},
    {"{{ a }}}", 2, "1}"},
    {"{% if a }", 2, NULL},
    {"{% if (a %}{% endif %}", 2, NULL},
    {"{{ 0x }}", 2, NULL},
    {"{{ '\\x4' }}", 2, NULL},
    {"{{ '\\u12' }}", 2, NULL},
    {"{% for i in [1, 2] %}{% macro m() %}[{{ i }}]{% endmacro %}{{ m() }}{% endfor %}", 3, "[1][2]"},
    {"{% macro outer(x) %}{% macro inner() %}<{{ x }}>{% endmacro %}{{ inner() }}{% endmacro %}{{ outer(5) }}", 3, "<5>"},
    {"{% set g = 1 %}{% macro m() %}{{ g }}{% set g = 2 %}{{ g }}{% endmacro %}{{ m() }}{{ g }}", 3, "121"},
    {"{% macro m(a) %}{{ a }}{% endmacro %}{% set a = 'top' %}{{ m() }}", 3, ""},
    {"{% for i in [1] %}{% set x = 5 %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% endfor %}", 3, "5"},
    {"{% macro m() %}{% macro n() %}x{% endmacro %}{{ n() }}{% endmacro %}{{ m() }}{{ m() }}", 3, "xx"},
    {"{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}", 3, "B"},
    {"{% filter upper %}{% set x = 1 %}{% endfilter %}{{ x }}", 3, ""},
    {"{% set y %}{% set x = 1 %}{% endset %}{{ x }}", 3, ""},
    {"{% with %}{% set x = 1 %}{% endwith %}{{ x }}", 3, ""},
    {"{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}{% set x = 1 %}{% endcall %}{{ x }}", 3, ""},
    {"{% if true %}{% set x = 1 %}{% endif %}{{ x }}", 3, "1"},
    {"{% for i in [1] %}{% if true %}{% set x = i %}{% endif %}{{ x }}{% endfor %}{{ x }}", 3, "1"},
    {"{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}", 3, "01020"},
    {"{% for i in [1, 2] %}{% for j in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", 3, "1112"},
    {"{% set loop = 5 %}{{ loop }}{% for i in [1] %}{{ loop.index }}{% endfor %}{{ loop }}", 3, "515"},
    {"{% for i in [1, 2] %}{% else %}{% endfor %}{{ i }}", 3, ""},
    {"{% for x in [1, 2] if x > 5 %}a{% else %}{{ x }}b{% endfor %}", 3, "b"},
    {"{% set a, b = 'xy' %}{{ b }}{{ a }}", 3, "yx"},
    {"{% for a, b in {'k': 'v'}.items() %}{{ a }}{{ b }}{% endfor %}", 3, "kv"},
    {"{% for a in {'k': 'v'}|dictsort %}{{ a }}{% endfor %}", 3, "('k', 'v')"},
    {"{{ ({'a': 1}|items|list)[0] }}", 3, "('a', 1)"},
    {"{% set x = namespace(a=1) %}{% set x.b = 2 %}{{ x.a }}{{ x.b }}{{ x }}", 3, "12<Namespace {'a': 1, 'b': 2}>"},
    {"{% set d = {'a': 1} %}{{ d.a }}{{ d['a'] }}{{ d.get('a') }}", 3, "111"},
    {"{% macro m(a, b) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}|{{ m(b=2) }}", 3, "1-|-2"},
    {"{{ x is defined and x }}|{{ (x is defined) and x }}", 3, "False|False"},
    {"{% set r = range(3) %}{{ r|list }}{{ r|length }}{{ r[1] }}", 3, "[0, 1, 2]31"},
    {"{% set s = 'abc' %}{% for c in s %}{{ loop.revindex0 }}{{ c }}{% endfor %}", 3, "2a1b0c"},
    {"{{ '' ~ 1.0 ~ 2.50 ~ 1e-3 ~ 1e22 ~ -0.5 }}", 3, "1.02.50.0011e+22-0.5"},
    {"{{ [1.0, 2.50, 1e-3, 1e22]|tojson }}{{ {'a': 1e22}|string }}", 3, "[1.0, 2.5, 0.001, 1e+22]{'a': 1e+22}"},
    {"{{ 123456789012345678 }}{{ 1.7976931348623157e308 }}{{ 5e-324 }}{{ 0.1 * 3 }}{{ 2.675 * 100 }}", 3, "1234567890123456781.7976931348623157e+3085e-3240.30000000000000004267.5"},
    {"{{ ' a '.strip() }}", 3, "a"},
    {"{{ ' a '.lstrip() }}", 3, "a "},
    {"{{ ' a '.rstrip() }}", 3, " a"},
    {"{{ 'abcXYZabc'.strip('ac') }}", 3, "bcXYZab"},
    {"{{ 'a b'.split(' ') | tojson }}", 3, "[\"a\", \"b\"]"},
    {"{{ 'ok'.capitalize() }}", 3, "Ok"},
    {"{{ 'abcXYZabcXYZabc'.replace('bc', 'oui') }}", 3, "aouiXYZaouiXYZaoui"},
    {"{{ 'abcXYZabcXYZabc'.replace('abc', 'ok', 2) }}", 3, "okXYZokXYZabc"},
    {"{{ 'abcXYZabcXYZabc'.replace('def', 'ok') }}", 3, "abcXYZabcXYZabc"},
    {"{{ 'hello world'.upper() }}", 3, "HELLO WORLD"},
    {"{{ 'MiXeD'.upper() }}", 3, "MIXED"},
    {"{{ ''.upper() }}", 3, ""},
    {"{{ 'HELLO WORLD'.lower() }}", 3, "hello world"},
    {"{{ 'MiXeD'.lower() }}", 3, "mixed"},
    {"{{ ''.lower() }}", 3, ""},
    {"{# Hey\nHo #}{#- Multiline...\nComments! -#}{{ 'ok' }}{# yo #}", 3, "ok"},
    {"    {% if True %}\n    {% endif %}", 3, ""},
    {"  {% set _ = 1 %}    ", 3, "    "},
    {"  \n    {% set _ = 1 %}        \n                ", 3, "  \n        \n                "},
    {"{% set _ = 1 %}\n  ", 3, "  "},
    {"{{ range(*[2,4]) | list }}", 3, "[2, 3]"},
    {"{% for i in [true, false, 10, -10, 10.1, -10.1, None, 'a', '2', {}, [1]] %}{{ i | int }}, {% endfor %}", 3, "1, 0, 10, -10, 10, -10, 0, 0, 2, 0, 0, "},
    {"{% filter trim %} abc {% endfilter %}", 3, "abc"},
    {"{{ [1] + [2, 3] }}", 3, "[1, 2, 3]"},
    {"{{ 'AbC' | lower }}", 3, "abc"},
    {"{{ 'me' | upper }}", 3, "ME"},
    {"{{ foo | default('the default') }}{{ 1 | default('nope') }}", 3, "the default1"},
    {"{{ '' | default('the default', true) }}{{ 1 | default('nope', true) }}", 3, "the default1"},
    {"{% set txt = 'a\\nb\\n' %}{{ txt | indent(2) }}|{{ txt | indent(2, first=true) }}", 3, "a\n  b\n|  a\n  b\n"},
    {"a\nb\n", 3, "a\nb"},
    {"  {{- ' a\n'}}", 3, " a\n"},
    {"{{ 'a' + [] | length | string + 'b' }}", 3, "a0b"},
    {"{{ [1, 2, 3] | join(', ') + '...' }}", 3, "1, 2, 3..."},
    {"{{ 'Tools: ' + [1, 2, 3] | reject('equalto', 2) | join(', ') + '...' }}", 3, "Tools: 1, 3..."},
    {"{{ 'Tools: ' + [1, 2, 3] | select('equalto', 2) | join(', ') + '...' }}", 3, "Tools: 2..."},
    {"{{ [1, 2, 3] | join(', ') }}", 3, "1, 2, 3"},
    {"{% for i in range(3) %}{{i}},{% endfor %}", 3, "0,1,2,"},
    {"{% set foo %}Hello {{ 'there' }}{% endset %}{{ 1 ~ foo ~ 2 }}", 3, "1Hello there2"},
    {"{{ [1, False, 2, '3', 1, '3', False] | unique | list }}", 3, "[1, False, 2, '3']"},
    {"{{ range(5) | length % 2 }}", 3, "1"},
    {"{{ range(5) | length % 2 == 1 }},{{ [] | length > 0 }}", 3, "True,False"},
    {"{{ messages[0]['role'] != 'system' }}", 3, NULL},
    {"{{ 1 is not string }}", 3, "True"},
    {"{{ 'ab' * 3 }}", 3, "ababab"},
    {"{{ [1, 2, 3][-1] }}", 3, "3"},
    {"{%- for i in range(0) -%}NAH{% else %}OK{% endfor %}", 3, "OK"},
    {"{%- for i in range(5) if i % 2 == 0 -%}\n{{ i }}, first={{ loop.first }}, last={{ loop.last }}, index={{ loop.index }}, index0={{ loop.index0 }}, revindex={{ loop.revindex }}, revindex0={{ loop.revindex0 }}, prev={{ loop.previtem }}, next={{ loop.nextitem }},\n{% endfor -%}", 3, "0, first=True, last=False, index=1, index0=0, revindex=3, revindex0=2, prev=, next=2,\n2, first=False, last=False, index=2, index0=1, revindex=2, revindex0=1, prev=0, next=4,\n4, first=False, last=True, index=3, index0=2, revindex=1, revindex0=0, prev=2, next=,\n"},
    {" a {{  'b' -}} c ", 3, " a bc "},
    {" a {{- 'b'  }} c ", 3, " ab c "},
    {"a\n{{- 'b'  }}\nc", 3, "ab\nc"},
    {"a\n{{  'b' -}}\nc", 3, "a\nbc"},
    {"{{ [] is iterable }}", 3, "True"},
    {"{{ [] is not number }}", 3, "True"},
    {"{% set x = [0, 1, 2, 3] %}{{ x[1:] }}{{ x[:2] }}{{ x[1:3] }}", 3, "[1, 2, 3][0, 1][1, 2]"},
    {"{% set x = '0123' %}{{ x[1:] }};{{ x[:2] }};{{ x[1:3] }};{{ x[:] }};{{ x[::] }}", 3, "123;01;12;0123;0123"},
    {"{% set x = [0, 1, 2, 3] %}{{ x[::-1] }}{{ x[:0:-1] }}{{ x[2::-1] }}{{ x[2:0:-1] }}{{ x[::2] }}{{ x[::-2] }}{{ x[-2::-2] }}", 3, "[3, 2, 1, 0][3, 2, 1][2, 1, 0][2, 1][0, 2][3, 1][2, 0]"},
    {"{% set x = '0123' %}{{ x[::-1] }};{{ x[:0:-1] }};{{ x[2::-1] }};{{ x[2:0:-1] }};{{ x[::2] }};{{ x[::-2] }};{{ x[-2::-2] }}", 3, "3210;321;210;21;02;31;20"},
    {"{{ ' a  ' | trim }}", 3, "a"},
    {"{{ range(3) | list }}{{ range(4, 7) | list }}{{ range(0, 10, 2) | list }}", 3, "[0, 1, 2][4, 5, 6][0, 2, 4, 6, 8]"},
    {"{% set x = [] %}{% set _ = x.append(1) %}{{ x | tojson(indent=2) }}", 3, NULL},
    {"{{ not [] }}", 3, "True"},
    {"{% if 1 %}{% elif 1 %}{% else %}{% endif %}", 3, ""},
    {"{% for i in range(10) %}{{ i }},{% if i == 2 %}{% break %}{% endif %}{% endfor %}", 3, "0,1,2,"},
    {"{% for i in range(10) %}{% if i % 2 %}{% continue %}{% endif %}{{ i }},{% endfor %}", 3, "0,2,4,6,8,"},
    {"{% break %}", 3, NULL},
    {"{% continue %}", 3, NULL},
    {"{%- set _ = [].pop() -%}", 3, NULL},
    {"{%- set _ = {}.pop() -%}", 3, NULL},
    {"{%- set _ = {}.pop('foooo') -%}", 3, NULL},
    {"{% elif 1 %}", 3, NULL},
    {"{% endfor %}", 3, NULL},
    {"{% endfilter %}", 3, NULL},
    {"{% endmacro %}", 3, NULL},
    {"{% endcall %}", 3, NULL},
    {"{% if 1 %}", 3, NULL},
    {"{% for x in 1 %}", 3, NULL},
    {"{% generation %}", 3, NULL},
    {"{% if 1 %}{% else %}", 3, NULL},
    {"{% if 1 %}{% else %}{% elif 1 %}{% endif %}", 3, NULL},
    {"{% filter trim %}", 3, NULL},
    {"{# ", 3, NULL},
    {"{% macro test() %}", 3, NULL},
    {"{% call test %}", 3, NULL},
    {"{%- macro test() -%}content{%- endmacro -%}{%- call test -%}caller_content{%- endcall -%}", 3, NULL},
    {"{{ (a.b.c) }}", 3, NULL},
    {"{{ a.b }}", 3, NULL},
    {"{{ raise_exception('hey') }}", 3, NULL},
    {"  {% set _ = 1 %}    {% set _ = 2 %}b", 3, "    b"},
    {"{%- if True %}        {% set _ = x %}{%- endif %}{{ 1 }}", 3, "        1"},
    {"  {{- 'a' -}}{{ '  ' }}{{- 'b' -}}  ", 3, "a  b"},
    {"{{ \"abcd\"[1:-1] }}", 3, "bc"},
    {"{{ [0, 1, 2, 3][1:-1] }}", 3, "[1, 2]"},
    {"{{ \"123456789\" | length }}", 3, "9"},
    {"    {%- if True %}{%- endif %}{{ '        ' }}{%- for x in [] %}foo{% endfor %}end", 3, "        end"},
    {"{% set ns = namespace(is_first=false, nottool=false, and_or=true, delme='') %}{{ ns.is_first }}", 3, "False"},
    {"{{ {} is mapping }},{{ '' is mapping }}", 3, "True,False"},
    {"{{ {} is iterable }},{{ '' is iterable }}", 3, "True,True"},
    {"{% for x in [\"a\", \"b\"] %}{{ x }},{% endfor %}", 3, "a,b,"},
    {"{% for x in {\"a\": 1, \"b\": 2} %}{{ x }},{% endfor %}", 3, "a,b,"},
    {"{% for x in \"ab\" %}{{ x }},{% endfor %}", 3, "a,b,"},
    {"{{ 'foo bar'.title() }}", 3, "Foo Bar"},
    {"{{ 1 | safe }}", 3, "1"},
    {"{{ 'abc'.startswith('ab') }},{{ ''.startswith('a') }}", 3, "True,False"},
    {"{{ 'abc'.endswith('bc') }},{{ ''.endswith('a') }}", 3, "True,False"},
    {"{{ none | selectattr(\"foo\", \"equalto\", \"bar\") | list }}", 3, "[]"},
    {"{{ 'a' in {\"a\": 1} }},{{ 'a' in {} }}", 3, "True,False"},
    {"{{ 'a' in [\"a\"] }},{{ 'a' in [] }}", 3, "True,False"},
    {"{{ 'a' in 'abc' }},{{ 'd' in 'abc' }}", 3, "True,False"},
    {"{{ 'a' not in 'abc' }},{{ 'd' not in 'abc' }}", 3, "False,True"},
    {"{{ ['a', 'b', 'c', 'a'] | select('in', ['a']) | list }}", 3, "['a', 'a']"},
    {"{{ {'a': 1, 'b': 2}.keys() | list }},{{ {}.keys() | list }}", 3, "['a', 'b'],[]"},
    {"{{ [{\"a\": 1}, {\"a\": 2}, {}] | selectattr(\"a\", \"equalto\", 1) | list }}", 3, "[{'a': 1}]"},
    {"{{ [{\"a\": 1}, {\"a\": 2}, {}] | rejectattr(\"a\", \"equalto\", 1) | list }}", 3, "[{'a': 2}, {}]"},
    {"{{ [{\"a\": 1}, {\"a\": 2}] | map(attribute=\"a\") | list }}", 3, "[1, 2]"},
    {"{{ [\"\", \"a\"] | map(\"length\") | list }}", 3, "[0, 1]"},
    {"{{ range(3) | last }}", 3, "2"},
    {"{% set foo = true %}{{ foo is defined }}", 3, "True"},
    {"{% set foo = true %}{{ not foo is defined }}", 3, "False"},
    {"{% set foo = true %}{{ foo is true }}", 3, "True"},
    {"{% set foo = true %}{{ foo is false }}", 3, "False"},
    {"{% set foo = false %}{{ foo is not true }}", 3, "True"},
    {"{% set foo = false %}{{ foo is not false }}", 3, "False"},
    {"{{ {\"a\": \"b\"} | tojson }}", 3, "{\"a\": \"b\"}"},
    {"{{ {\"a\": \"b\"} }}", 3, "{'a': 'b'}"},
    {"{%- set separator = joiner(' | ') -%}\n            {%- for item in [\"a\", \"b\", \"c\"] %}{{ separator() }}{{ item }}{% endfor -%}", 3, "a | b | c"},
    {"\n            {%- for x in range(3) -%}\n                {%- if loop.first -%}\n                    but first, mojitos!\n                {%- endif -%}\n                {{ loop.index }}{{ \",\" if not loop.last -}}\n            {%- endfor -%}\n        ", 3, "but first, mojitos!1,2,3"},
    {"\n            {%- for x, y in [(\"a\", \"b\"), (\"c\", \"d\")] -%}\n                {{- x }},{{ y -}};\n            {%- endfor -%}\n        ", 3, "a,b;c,d;"},
    {"\n            {%- for i in range(5) -%}\n                ({{ i }}, {{ loop.cycle('odd', 'even') }}),\n            {%- endfor -%}\n        ", 3, "(0, odd),(1, even),(2, odd),(3, even),(4, odd),"},
    {"\n            {%- set o = [0, 1, 2, 3] -%}\n            {%- set _ = o.pop() -%}\n            {{- o | tojson -}}\n            {%- set _ = o.pop(1) -%}\n            {{- o | tojson -}}\n        ", 3, NULL},
    {"\n            {%- set o = {\"x\": 1, \"y\": 2} -%}\n            {%- set _ = o.pop(\"x\") -%}\n            {{- o | tojson -}}\n        ", 3, NULL},
    {"\n            {%- set res = [] -%}\n            {%- for c in [\"<\", \">\", \"&\", '\"'] -%}\n                {%- set _ = res.append(c | e) -%}\n            {%- endfor -%}\n            {{- res | join(\", \") -}}\n        ", 3, NULL},
    {"\n            {%- set x = 1 -%}\n            {%- set y = 2 -%}\n            {%- macro foo(x, z, w=10) -%}\n                x={{ x }}, y={{ y }}, z={{ z }}, w={{ w -}}\n            {%- endmacro -%}\n            {{- foo(100, 3) -}}\n        ", 3, "x=100, y=2, z=3, w=10"},
    {"\n            {% macro input(name, value='', type='text', size=20) -%}\n                <input type=\"{{ type }}\" name=\"{{ name }}\" value=\"{{ value|e }}\" size=\"{{ size }}\">\n            {%- endmacro -%}\n\n            <p>{{ input('username') }}</p>\n            <p>{{ input('password', type='password') }}</p>", 3, "\n<p><input type=\"text\" name=\"username\" value=\"\" size=\"20\"></p>\n            <p><input type=\"password\" name=\"password\" value=\"\" size=\"20\"></p>"},
    {"\n            {#- The values' default array should be created afresh at each call, unlike the equivalent Python function -#}\n            {%- macro foo(values=[]) -%}\n                {%- set _ = values.append(1) -%}\n                {{- values -}}\n            {%- endmacro -%}\n            {{- foo() }} {{ foo() -}}", 3, NULL},
    {"\n            {%- macro test() -%}{{ caller() }},{{ caller() }}{%- endmacro -%}\n            {%- call test() -%}x{%- endcall -%}\n        ", 3, "x,x"},
    {"\n            {%- macro outer() -%}Outer[{{ caller() }}]{%- endmacro -%}\n            {%- macro inner() -%}Inner({{ caller() }}){%- endmacro -%}\n            {%- call outer() -%}{%- call inner() -%}X{%- endcall -%}{%- endcall -%}\n        ", 3, "Outer[Inner(X)]"},
    {"\n            {%- macro test(prefix, suffix) -%}{{ prefix }}{{ caller() }}{{ suffix }}{%- endmacro -%}\n            {%- set items = [\"a\", \"b\"] -%}\n            {%- call test(\"<ul>\", \"</ul>\") -%}\n                {%- for item in items -%}\n                    <li>{{ item | upper }}</li>\n                {%- endfor -%}\n            {%- endcall -%}\n        ", 3, "<ul><li>A</li><li>B</li></ul>"},
    {"\n            {%- macro recursive(obj) -%}\n            {%- set ns = namespace(content = caller()) -%}\n            {%- for key, value in obj.items() %}\n                {%- if value is mapping %}\n                    {%- call recursive(value) -%}\n                        {{ '\\\\n\\\\nclass ' + key.title() + ':\\\\n' }}\n                    {%- endcall -%}\n                {%- else -%}\n                    {%- set ns.content = ns.content + '  ' + key + ': ' + value + '\\\\n' -%}\n                {%- endif -%}\n            {%- endfor -%}\n            {{ ns.content }}\n            {%- endmacro -%}\n\n            {%- call recursive({\"a\": {\"b\": \"1\", \"c\": \"2\"}}) -%}\n            {%- endcall -%}\n        ", 3, "\\n\\nclass A:\\n  b: 1\\n  c: 2\\n"},
    {"{{ {1: 2} | items | list | tojson }}", 3, "[[1, 2]]"},
    {"{{ {1: 2, 3: 4, 5: 7} | dictsort | tojson }}", 3, "[[1, 2], [3, 4], [5, 7]]"},
    {"{{ {1: 2}.items() | map(\"list\") | list }}", 3, "[[1, 2]]"},
    {"{{ {1: 2}.get(1) }}; {{ {}.get(1) or '' }}; {{ {}.get(1, 10) }}", 3, "2; ; 10"},
    {"\n            {%- for x in [1, 1.2, \"a\", true, True, false, False, None, [], [1], [1, 2], {}, {\"a\": 1}, {1: \"b\"}] -%}\n                {{- x | tojson -}},\n            {%- endfor -%}\n        ", 3, "1,1.2,\"a\",true,true,false,false,null,[],[1],[1, 2],{},{\"a\": 1},{\"1\": \"b\"},"},
    {"\n            {%- set n = namespace(value=1, title='') -%}\n            {{- n.value }} \"{{ n.title }}\",\n            {%- set n.value = 2 -%}\n            {%- set n.title = 'Hello' -%}\n            {{- n.value }} \"{{ n.title }}\"", 3, "1 \"\",2 \"Hello\""},
    {"\n        {%- for x, y in z -%}\n            {{- x }},{{ y -}};\n        {%- endfor -%}\n    )\", {{\"z\", json({json({1, 10}), json({2, 20})})}}, {}));\n    EXPECT_EQ(\n        \" a bc \",\n        render(\" a {{  'b' -}} c \", {}, {}));\n    EXPECT_EQ(\n        \" ab c \",\n        render(\" a {{- 'b'  }} c \", {}, {}));\n    EXPECT_EQ(\n        \"ab\\nc\",\n        render(\"a\\n{{- 'b'  }}\\nc\", {}, {}));\n    EXPECT_EQ(\n        \"a\\nbc\",\n        render(\"a\\n{{  'b' -}}\\nc\", {}, {}));\n    EXPECT_EQ(\n        \"True\",\n        render(\"{{ [] is iterable }}\", {}, {}));\n    EXPECT_EQ(\n        \"True\",\n        render(\"{{ [] is not number }}\", {}, {}));\n    EXPECT_EQ(\n        \"[1, 2, 3][0, 1][1, 2]\",\n        render(\"{% set x = [0, 1, 2, 3] %}{{ x[1:] }}{{ x[:2] }}{{ x[1:3] }}\", {}, {}));\n    EXPECT_EQ(\n        \"123;01;12;0123;0123\",\n        render(\"{% set x = '0123' %}{{ x[1:] }};{{ x[:2] }};{{ x[1:3] }};{{ x[:] }};{{ x[::] }}\", {}, {}));\n    EXPECT_EQ(\n        \"[3, 2, 1, 0][3, 2, 1][2, 1, 0][2, 1][0, 2][3, 1][2, 0]\",\n        render(\"{% set x = [0, 1, 2, 3] %}{{ x[::-1] }}{{ x[:0:-1] }}{{ x[2::-1] }}{{ x[2:0:-1] }}{{ x[::2] }}{{ x[::-2] }}{{ x[-2::-2] }}\", {}, {}));\n    EXPECT_EQ(\n        \"3210;321;210;21;02;31;20\",\n        render(\"{% set x = '0123' %}{{ x[::-1] }};{{ x[:0:-1] }};{{ x[2::-1] }};{{ x[2:0:-1] }};{{ x[::2] }};{{ x[::-2] }};{{ x[-2::-2] }}\", {}, {}));\n    EXPECT_EQ(\n        \"a\",\n        render(\"{{ ' a  ' | trim }}\", {}, {}));\n    if (!getenv(\"USE_JINJA2\")) {\n        EXPECT_EQ(\n            \"\",\n            render(R\"({{ None | trim }}", 3, NULL},
    {" {{ \"a\" -}} b {{- \"c\" }} ", 3, " abc "},
    {"\n        {%- set user = \"Olivier\" -%}\n        {%- set greeting = \"Hello \" ~ user -%}\n        {{- greeting -}}\n    ", 3, "Hello Olivier"},
    {"{{ '%s' % 42 }}", 3, "42"},
    {"{{ '% d' % 42 }}", 3, " 42"},
    {"{{ '%10.3f|' % 42 }}", 3, "    42.000|"},
    {"{{ '%5s|' % 42 }}", 3, "   42|"},
    {"{{ '{:<5}|'.format(42) }}", 3, "42   |"},
    {"{{ '{:#x}'.format(42) }}", 3, "0x2a"},
    {"{{ '{:.3g}'.format(42) }}", 3, "42"},
    {"{{ '{:=+6}'.format(42) }}", 3, "+   42"},
    {"{{ '%+d' % -42 }}", 3, "-42"},
    {"{{ '%.2f' % -42 }}", 3, "-42.00"},
    {"{{ '%c' % -42 }}", 3, NULL},
    {"{{ '{:5}|'.format(-42) }}", 3, "  -42|"},
    {"{{ '{:x}'.format(-42) }}", 3, "-2a"},
    {"{{ '{:e}'.format(-42) }}", 3, "-4.200000e+01"},
    {"{{ '{:c}'.format(-42) }}", 3, NULL},
    {"{{ '%05d' % 3.14159 }}", 3, "00003"},
    {"{{ '%f' % 3.14159 }}", 3, "3.141590"},
    {"{{ '%.3g' % 3.14159 }}", 3, "3.14"},
    {"{{ '{:d}'.format(3.14159) }}", 3, NULL},
    {"{{ '{: }'.format(3.14159) }}", 3, " 3.14159"},
    {"{{ '{:10.3f}|'.format(3.14159) }}", 3, "     3.142|"},
    {"{{ '{:.2}'.format(3.14159) }}", 3, "3.1"},
    {"{{ '%-5d|' % -0.5 }}", 3, "0    |"},
    {"{{ '%#o' % -0.5 }}", 3, NULL},
    {"{{ '%G' % -0.5 }}", 3, "-0.5"},
    {"{{ '{!r}'.format(-0.5) }}", 3, "-0.5"},
    {"{{ '{:+}'.format(-0.5) }}", 3, "-0.5"},
    {"{{ '{:.2f}'.format(-0.5) }}", 3, "-0.50"},
    {"{{ '{:s}'.format(-0.5) }}", 3, NULL},
    {"{{ '%5d' % 1e20 }}", 3, "100000000000000000000"},
    {"{{ '%o' % 1e20 }}", 3, NULL},
    {"{{ '%g' % 1e20 }}", 3, "1e+20"},
    {"{{ '{}'.format(1e20) }}", 3, "1e+20"},
    {"{{ '{:05}'.format(1e20) }}", 3, "1e+20"},
    {"{{ '{:f}'.format(1e20) }}", 3, "100000000000000000000.000000"},
    {"{{ '{:,.2f}'.format(1e20) }}", 3, "100,000,000,000,000,000,000.00"},
    {"{{ '%i' % 'str' }}", 3, NULL},
    {"{{ '%X' % 'str' }}", 3, NULL},
    {"{{ '%.3E' % 'str' }}", 3, NULL},
    {"{{ '%%' % () }}", 3, "%"},
    {"{{ '{:*^7}|'.format('str') }}", 3, "**str**|"},
    {"{{ '{:b}'.format('str') }}", 3, NULL},
    {"{{ '{:,}'.format('str') }}", 3, NULL},
    {"{{ '%d' % '\303\251' }}", 3, NULL},
    {"{{ '%#x' % '\303\251' }}", 3, NULL},
    {"{{ '%e' % '\303\251' }}", 3, NULL},
    {"{{ '%.2s' % '\303\251' }}", 3, "\303\251"},
    {"{{ '{:^5}|'.format('\303\251') }}", 3, "  \303\251  |"},
    {"{{ '{:o}'.format('\303\251') }}", 3, NULL},
    {"{{ '{:.1%}'.format('\303\251') }}", 3, NULL},
    {"{{ '%r' % true }}", 3, "True"},
    {"{{ '%x' % true }}", 3, "1"},
    {"{{ '%-10.1f|' % true }}", 3, "1.0       |"},
    {"{{ '%-5s|' % true }}", 3, "True |"},
    {"{{ '{:>5}|'.format(true) }}", 3, "    1|"},
    {"{{ '{:X}'.format(true) }}", 3, "1"},
    {"{{ '{:%}'.format(true) }}", 3, "100.000000%"},
    {"{{ '%s' % none }}", 3, "None"},
    {"{{ '% d' % none }}", 3, NULL},
    {"{{ '%10.3f|' % none }}", 3, NULL},
    {"{{ '%5s|' % none }}", 3, " None|"},
    {"{{ '{:<5}|'.format(none) }}", 3, NULL},
    {"{{ '{:#x}'.format(none) }}", 3, NULL},
    {"{{ '{:.3g}'.format(none) }}", 3, NULL},
    {"{{ '{:=+6}'.format(none) }}", 3, NULL},
    {"{{ '%+d' % 0 }}", 3, "+0"},
    {"{{ '%.2f' % 0 }}", 3, "0.00"},
    {"{{ '%c' % 0 }}", 3, "\000"},
    {"{{ '{:5}|'.format(0) }}", 3, "    0|"},
    {"{{ '{:x}'.format(0) }}", 3, "0"},
    {"{{ '{:e}'.format(0) }}", 3, "0.000000e+00"},
    {"{{ '{:c}'.format(0) }}", 3, "\000"},
    {"{{ '%05d' % 255 }}", 3, "00255"},
    {"{{ '%f' % 255 }}", 3, "255.000000"},
    {"{{ '%.3g' % 255 }}", 3, "255"},
    {"{{ '{:d}'.format(255) }}", 3, "255"},
    {"{{ '{: }'.format(255) }}", 3, " 255"},
    {"{{ '{:10.3f}|'.format(255) }}", 3, "   255.000|"},
    {"{{ '{:.2}'.format(255) }}", 3, NULL},
    {"{{ '%*d|%-*d' % (5, 1, 4, 2) }}", 3, "    1|2   "},
    {"{{ '%c' % '\303\251' }}", 3, "\303\251"},
    {"{{ ''.split() }}", 3, "[]"},
    {"{{ ''.strip('a ') }}", 3, ""},
    {"{{ ''.count('') }}", 3, "1"},
    {"{{ ''.splitlines() }}", 3, "[]"},
    {"{{ ''.index('a') }}", 3, NULL},
    {"{{ ' '.split(none, 1) }}", 3, "[]"},
    {"{{ ' '.find('a', -2) }}", 3, "-1"},
    {"{{ ' '.startswith('a') }}", 3, "False"},
    {"{{ ' '.isalpha() }}", 3, "False"},
    {"{{ ' '.zfill(6) }}", 3, "00000 "},
    {"{{ 'a'.split() }}", 3, "['a']"},
    {"{{ 'a'.strip('a ') }}", 3, ""},
    {"{{ 'a'.count('') }}", 3, "2"},
    {"{{ 'a'.lower() }}", 3, "a"},
    {"{{ 'a'.splitlines() }}", 3, "['a']"},
    {"{{ 'a'.index('a') }}", 3, "0"},
    {"{{ '  a b  c  '.split(none, 1) }}", 3, "['a', 'b  c  ']"},
    {"{{ '  a b  c  '.find('a', -2) }}", 3, "-1"},
    {"{{ '  a b  c  '.startswith('a') }}", 3, "False"},
    {"{{ '  a b  c  '.isalpha() }}", 3, "False"},
    {"{{ '  a b  c  '.zfill(6) }}", 3, "  a b  c  "},
    {"{{ 'a,b,,c,'.split() }}", 3, "['a,b,,c,']"},
    {"{{ 'a,b,,c,'.strip('a ') }}", 3, ",b,,c,"},
    {"{{ 'a,b,,c,'.count('') }}", 3, "8"},
    {"{{ 'a,b,,c,'.lower() }}", 3, "a,b,,c,"},
    {"{{ 'a,b,,c,'.splitlines() }}", 3, "['a,b,,c,']"},
    {"{{ 'a,b,,c,'.index('a') }}", 3, "0"},
    {"{{ ',a'.split(none, 1) }}", 3, "[',a']"},
    {"{{ ',a'.find('a', -2) }}", 3, "1"},
    {"{{ ',a'.startswith('a') }}", 3, "False"},
    {"{{ ',a'.isalpha() }}", 3, "False"},
    {"{{ ',a'.zfill(6) }}", 3, "0000,a"},
    {"{{ '\303\251\303\251x\303\251'.split() }}", 3, "['\303\251\303\251x\303\251']"},
    {"{{ '\303\251\303\251x\303\251'.strip('a ') }}", 3, "\303\251\303\251x\303\251"},
    {"{{ '\303\251\303\251x\303\251'.count('') }}", 3, "5"},
    {"{{ '\303\251\303\251x\303\251'.lower() }}", 3, "\303\251\303\251x\303\251"},
    {"{{ '\303\251\303\251x\303\251'.splitlines() }}", 3, "['\303\251\303\251x\303\251']"},
    {"{{ '\303\251\303\251x\303\251'.index('a') }}", 3, NULL},
    {"{{ '\\n\\na\\nb\\r\\nc\\n'.split(none, 1) }}", 3, "['a', 'b\\r\\nc\\n']"},
    {"{{ '\\n\\na\\nb\\r\\nc\\n'.find('a', -2) }}", 3, "-1"},
    {"{{ '\\n\\na\\nb\\r\\nc\\n'.startswith('a') }}", 3, "False"},
    {"{{ '\\n\\na\\nb\\r\\nc\\n'.isalpha() }}", 3, "False"},
    {"{{ '\\n\\na\\nb\\r\\nc\\n'.zfill(6) }}", 3, "\n\na\nb\r\nc\n"},
    {"{{ 'aaa'.split() }}", 3, "['aaa']"},
    {"{{ 'aaa'.strip('a ') }}", 3, ""},
    {"{{ 'aaa'.count('') }}", 3, "4"},
    {"{{ 'aaa'.lower() }}", 3, "aaa"},
    {"{{ 'aaa'.splitlines() }}", 3, "['aaa']"},
    {"{{ 'aaa'.index('a') }}", 3, "0"},
    {"{{ 'Hello World'.split(none, 1) }}", 3, "['Hello', 'World']"},
    {"{{ 'Hello World'.find('a', -2) }}", 3, "-1"},
    {"{{ 'Hello World'.startswith('a') }}", 3, "False"},
    {"{{ 'Hello World'.isalpha() }}", 3, "False"},
    {"{{ 'Hello World'.zfill(6) }}", 3, "Hello World"},
    {"{{ '\\u3000x\\u00a0'.split() }}", 3, "['x']"},
    {"{{ '\\u3000x\\u00a0'.strip('a ') }}", 3, "\343\200\200x\302\240"},
    {"{{ '\\u3000x\\u00a0'.count('') }}", 3, "4"},
    {"{{ '\\u3000x\\u00a0'.lower() }}", 3, "\343\200\200x\302\240"},
    {"{{ '\\u3000x\\u00a0'.splitlines() }}", 3, "['\\u3000x\\xa0']"},
    {"{{ '\\u3000x\\u00a0'.index('a') }}", 3, NULL},
    {"{{ ''|reverse }}", 3, ""},
    {"{{ ''|upper }}", 3, ""},
    {"{{ ' '|length }}", 3, "1"},
    {"{{ ' '|replace('a', 'b') }}", 3, " "},
    {"{{ 'a'|wordcount }}", 3, "1"},
    {"{{ 'a'|sort|join }}", 3, "a"},
    {"{{ '  a b  c  '|capitalize }}", 3, "  a b  c  "},
    {"{{ '  a b  c  '|unique|list }}", 3, "[' ', 'a', 'b', 'c']"},
    {"{{ 'a,b,,c,'|title }}", 3, "A,b,,c,"},
    {"{{ 'a,b,,c,'|list }}", 3, "['a', ',', 'b', ',', ',', 'c', ',']"},
    {"{{ ',a'|trim }}", 3, ",a"},
    {"{{ ',a'|center(9) }}", 3, "    ,a   "},
    {"{{ ',a'|e }}", 3, ",a"},
    {"{{ '\303\251\303\251x\303\251'|indent(2, true, true) }}", 3, "  \303\251\303\251x\303\251"},
    {"{{ '\303\251\303\251x\303\251'|tojson(ensure_ascii=true) }}", 3, "\"\\u00e9\\u00e9x\\u00e9\""},
    {"{{ '\\n\\na\\nb\\r\\nc\\n'|indent(2) }}", 3, "\n\n  a\n  b\n  c\n"},
    {"{{ '\\n\\na\\nb\\r\\nc\\n'|tojson }}", 3, "\"\\n\\na\\nb\\r\\nc\\n\""},
    {"{{ 'aaa'|last }}", 3, "a"},
    {"{{ 'aaa'|string }}", 3, "aaa"},
    {"{{ 'Hello World'|first }}", 3, "H"},
    {"{{ 'Hello World'|lower }}", 3, "hello world"},
    {"{{ '\\u3000x\\u00a0'|reverse }}", 3, "\302\240x\343\200\200"},
    {"{{ '\\u3000x\\u00a0'|upper }}", 3, "\343\200\200X\302\240"},
    {"{{ people|sort }}", 4, NULL},
    {"{{ people|sort(attribute='age,name') if false else 'x' }}", 4, "x"},
    {"{{ people|unique|list }}", 4, NULL},
    {"{{ people|map(attribute='name')|list }}", 4, "['bob', 'Alice', 'carl']"},
    {"{{ people|selectattr('age', 'gt', 26)|list }}", 4, "[{'name': 'bob', 'age': 30, 'tags': ['a']}, {'name': 'carl', 'age': 30, 'x': {'y': 1}}]"},
    {"{{ people|selectattr('tags', 'defined')|list }}", 4, "[{'name': 'bob', 'age': 30, 'tags': ['a']}]"},
    {"{{ people|sum }}", 4, NULL},
    {"{{ people|min }}", 4, NULL},
    {"{{ people|max(attribute='name') }}", 4, "{'name': 'carl', 'age': 30, 'x': {'y': 1}}"},
    {"{{ people|join(',', attribute='name') }}", 4, "bob,Alice,carl"},
    {"{{ people|length }}", 4, "3"},
    {"{{ people|batch(2)|list }}", 4, "[[{'name': 'bob', 'age': 30, 'tags': ['a']}, {'name': 'Alice', 'age': 25}], [{'name': 'carl', 'age': 30, 'x': {'y': 1}}]]"},
    {"{{ people|tojson(sort_keys=true) }}", 4, "[{\"age\": 30, \"name\": \"bob\", \"tags\": [\"a\"]}, {\"age\": 25, \"name\": \"Alice\"}, {\"age\": 30, \"name\": \"carl\", \"x\": {\"y\": 1}}]"},
    {"{{ people|dictsort(true) }}", 4, NULL},
    {"{{ people|items|list }}", 4, NULL},
    {"{{ people|map('default', 'x')|list }}", 4, "[{'name': 'bob', 'age': 30, 'tags': ['a']}, {'name': 'Alice', 'age': 25}, {'name': 'carl', 'age': 30, 'x': {'y': 1}}]"},
    {"{{ people|groupby('age')|list }}", 4, "[(25, [{'name': 'Alice', 'age': 25}]), (30, [{'name': 'bob', 'age': 30, 'tags': ['a']}, {'name': 'carl', 'age': 30, 'x': {'y': 1}}])]"},
    {"{{ nums|sort }}", 4, "[-1, 0, True, 2.5, 3]"},
    {"{{ nums|sort(attribute='age,name') if false else 'x' }}", 4, "x"},
    {"{{ nums|unique|list }}", 4, "[3, -1, 2.5, 0, True]"},
    {"{{ nums|map(attribute='name')|list }}", 4, "[Undefined, Undefined, Undefined, Undefined, Undefined]"},
    {"{{ nums|selectattr('age', 'gt', 26)|list }}", 4, NULL},
    {"{{ nums|selectattr('tags', 'defined')|list }}", 4, "[]"},
    {"{{ nums|sum }}", 4, "5.5"},
    {"{{ nums|min }}", 4, "-1"},
    {"{{ nums|max(attribute='name') }}", 4, NULL},
    {"{{ nums|join(',', attribute='name') }}", 4, ",,,,"},
    {"{{ nums|length }}", 4, "5"},
    {"{{ nums|batch(2)|list }}", 4, "[[3, -1], [2.5, 0], [True]]"},
    {"{{ nums|tojson(sort_keys=true) }}", 4, "[3, -1, 2.5, 0, true]"},
    {"{{ nums|dictsort(true) }}", 4, NULL},
    {"{{ nums|items|list }}", 4, NULL},
    {"{{ nums|map('default', 'x')|list }}", 4, "[3, -1, 2.5, 0, True]"},
    {"{{ nums|groupby('age')|list }}", 4, NULL},
    {"{{ words|sort }}", 4, "['A', 'a', 'b', 'B', 'c']"},
    {"{{ words|sort(attribute='age,name') if false else 'x' }}", 4, "x"},
    {"{{ words|unique|list }}", 4, "['b', 'A', 'c']"},
    {"{{ words|map(attribute='name')|list }}", 4, "[Undefined, Undefined, Undefined, Undefined, Undefined]"},
    {"{{ words|selectattr('age', 'gt', 26)|list }}", 4, NULL},
    {"{{ words|selectattr('tags', 'defined')|list }}", 4, "[]"},
    {"{{ words|sum }}", 4, NULL},
    {"{{ words|min }}", 4, "A"},
    {"{{ words|max(attribute='name') }}", 4, NULL},
    {"{{ words|join(',', attribute='name') }}", 4, ",,,,"},
    {"{{ words|length }}", 4, "5"},
    {"{{ words|batch(2)|list }}", 4, "[['b', 'A'], ['a', 'B'], ['c']]"},
    {"{{ words|tojson(sort_keys=true) }}", 4, "[\"b\", \"A\", \"a\", \"B\", \"c\"]"},
    {"{{ words|dictsort(true) }}", 4, NULL},
    {"{{ words|items|list }}", 4, NULL},
    {"{{ words|map('default', 'x')|list }}", 4, "['b', 'A', 'a', 'B', 'c']"},
    {"{{ words|groupby('age')|list }}", 4, NULL},
    {"{{ d|sort }}", 4, "['A', 'a', 'b']"},
    {"{{ d|sort(attribute='age,name') if false else 'x' }}", 4, "x"},
    {"{{ d|unique|list }}", 4, "['b', 'A']"},
    {"{{ d|map(attribute='name')|list }}", 4, "[Undefined, Undefined, Undefined]"},
    {"{{ d|selectattr('age', 'gt', 26)|list }}", 4, NULL},
    {"{{ d|selectattr('tags', 'defined')|list }}", 4, "[]"},
    {"{{ d|sum }}", 4, NULL},
    {"{{ d|min }}", 4, "A"},
    {"{{ d|max(attribute='name') }}", 4, NULL},
    {"{{ d|join(',', attribute='name') }}", 4, ",,"},
    {"{{ d|length }}", 4, "3"},
    {"{{ d|batch(2)|list }}", 4, "[['b', 'A'], ['a']]"},
    {"{{ d|tojson(sort_keys=true) }}", 4, "{\"A\": 1, \"a\": 3, \"b\": 2}"},
    {"{{ d|dictsort(true) }}", 4, "[('A', 1), ('a', 3), ('b', 2)]"},
    {"{{ d|items|list }}", 4, "[('b', 2), ('A', 1), ('a', 3)]"},
    {"{{ d|map('default', 'x')|list }}", 4, "['b', 'A', 'a']"},
    {"{{ d|groupby('age')|list }}", 4, NULL},
    {"{{ mixed|sort }}", 4, NULL},
    {"{{ mixed|sort(attribute='age,name') if false else 'x' }}", 4, "x"},
    {"{{ mixed|unique|list }}", 4, "[1, 'a', None]"},
    {"{{ mixed|map(attribute='name')|list }}", 4, "[Undefined, Undefined, Undefined]"},
    {"{{ mixed|selectattr('age', 'gt', 26)|list }}", 4, NULL},
    {"{{ mixed|selectattr('tags', 'defined')|list }}", 4, "[]"},
    {"{{ mixed|sum }}", 4, NULL},
    {"{{ mixed|min }}", 4, NULL},
    {"{{ mixed|max(attribute='name') }}", 4, NULL},
    {"{{ mixed|join(',', attribute='name') }}", 4, ",,"},
    {"{{ mixed|length }}", 4, "3"},
    {"{{ mixed|batch(2)|list }}", 4, "[[1, 'a'], [None]]"},
    {"{{ mixed|tojson(sort_keys=true) }}", 4, "[1, \"a\", null]"},
    {"{{ mixed|dictsort(true) }}", 4, NULL},
    {"{{ mixed|items|list }}", 4, NULL},
    {"{{ mixed|map('default', 'x')|list }}", 4, "[1, 'a', None]"},
    {"{{ mixed|groupby('age')|list }}", 4, NULL},
    {"{{ empty|sort }}", 4, "[]"},
    {"{{ empty|sort(attribute='age,name') if false else 'x' }}", 4, "x"},
    {"{{ empty|unique|list }}", 4, "[]"},
    {"{{ empty|map(attribute='name')|list }}", 4, "[]"},
    {"{{ empty|selectattr('age', 'gt', 26)|list }}", 4, "[]"},
    {"{{ empty|selectattr('tags', 'defined')|list }}", 4, "[]"},
    {"{{ empty|sum }}", 4, "0"},
    {"{{ empty|min }}", 4, ""},
    {"{{ empty|max(attribute='name') }}", 4, ""},
    {"{{ empty|join(',', attribute='name') }}", 4, ""},
    {"{{ empty|length }}", 4, "0"},
    {"{{ empty|batch(2)|list }}", 4, "[]"},
    {"{{ empty|tojson(sort_keys=true) }}", 4, "[]"},
    {"{{ empty|dictsort(true) }}", 4, NULL},
    {"{{ empty|items|list }}", 4, NULL},
    {"{{ empty|map('default', 'x')|list }}", 4, "[]"},
    {"{{ empty|groupby('age')|list }}", 4, "[]"},
    {"{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}", 4, "A1a3b2"},
    {"{{ people|map(attribute='age')|unique|list }}", 4, "[30, 25]"},
    {"{{ people[1:]|length }}", 4, "2"},
};

static void test_features(void) {
    size_t n = sizeof feature_cases / sizeof feature_cases[0], ok = 0;
    for (size_t i = 0; i < n; i++) {
        const struct feature_case *fc = &feature_cases[i];
        pl_status st;
        char *out = render(fc->tmpl, feature_ctx[fc->ctx], &st);
        bool good = fc->expect ? (st == PL_OK && out && !strcmp(out, fc->expect)) : st != PL_OK;
        CHECK(good, "feature %zu: %s\n  template: %s\n  expected: %s\n  got:      %s", i,
              fc->expect ? "output differs" : "should fail", fc->tmpl, fc->expect ? fc->expect : "(error)",
              st == PL_OK ? (out ? out : "(null)") : pl_last_error());
        ok += good;
        free(out);
    }
    printf("jinja2 behaviour cases: %zu/%zu\n", ok, n);
}

/* ------------------------------------------------------------------ API */

static void test_api(void) {
    pl_chat_template *t = NULL;
    /* syntax errors carry line and column */
    const char *bad = "line one\n{{ x }}\n  {% if %}\n";
    CHECK(pl_chat_template_parse(bad, strlen(bad), &t) == PL_ERR_FORMAT, "syntax error status");
    CHECK(strstr(pl_last_error(), "line 3, column 9") != NULL, "position in '%s'", pl_last_error());
    /* raise_exception gives exactly its message */
    pl_status st;
    char *out = render("{% if true %}{{ raise_exception('System role not supported') }}{% endif %}", "{}", &st);
    CHECK(st == PL_ERR_INVALID_ARG && !strcmp(pl_last_error(), "System role not supported"), "raise: %s",
          pl_last_error());
    free(out);
    /* other runtime errors name the line */
    out = render("a\nb\n{{ 1 + none }}", "{}", &st);
    CHECK(st == PL_ERR_INVALID_ARG && strstr(pl_last_error(), "line 3"), "runtime error line: %s", pl_last_error());
    free(out);
    /* the injected clock */
    out = render("{{ strftime_now('%Y-%m-%d %H:%M:%S %a %b') }}", "{}", &st);
    CHECK(st == PL_OK && out && !strcmp(out, "2026-01-02 03:04:05 Fri Jan"), "strftime_now: %s", out ? out : pl_last_error());
    free(out);
    /* the context must be a JSON object */
    CHECK(pl_chat_template_parse("x", 1, &t) == PL_OK, "parse x");
    size_t n;
    CHECK(pl_chat_template_render_json(t, "[1]", 3, NULL, &out, &n) == PL_ERR_INVALID_ARG, "array context");
    CHECK(pl_chat_template_render_json(t, "{bad", 4, NULL, &out, &n) == PL_ERR_INVALID_ARG, "bad json");
    CHECK(pl_chat_template_render(t, NULL, NULL, &out, &n) == PL_OK && n == 1 && !strcmp(out, "x"), "no context");
    free(out);
    pl_chat_template_free(t);
    /* an empty template renders to "" */
    CHECK(pl_chat_template_parse("", 0, &t) == PL_OK, "empty template");
    CHECK(pl_chat_template_render(t, NULL, NULL, &out, &n) == PL_OK && n == 0 && out && !out[0], "empty output");
    free(out);
    pl_chat_template_free(t);
    /* a deep JSON input is refused, not recursed into without bound */
    char *deep = malloc(2 * 3000 + 16);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{\"x\": ");
    for (int i = 0; i < 1000; i++) deep[k++] = '[';
    for (int i = 0; i < 1000; i++) deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = 0;
    out = render("{{ x|length }}", deep, &st);
    CHECK(st != PL_OK, "deep input refused");
    free(out);
    free(deep);
}

/* One parsed template rendered from several threads at once. */
typedef struct thread_arg {
    const pl_chat_template *t;
    const char *ctx;
    const char *expect;
    int ok;
} thread_arg;

static void *render_thread(void *p) {
    thread_arg *a = p;
    struct tm now = fixed_now();
    pl_chat_template_options o = {0};
    o.now = &now;
    for (int i = 0; i < 50; i++) {
        char *out = NULL;
        size_t n;
        if (pl_chat_template_render_json(a->t, a->ctx, strlen(a->ctx), &o, &out, &n) == PL_OK &&
            !strcmp(out, a->expect))
            a->ok++;
        free(out);
    }
    return NULL;
}

static void test_threads(void) {
    const char *src = "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ m.role[0] %}"
                      "{{ m.content|upper }}{% endfor %}|{{ ns.s }}|{{ messages|tojson }}";
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}";
    const char *expect = "HIYO|ua|[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]";
    pl_chat_template *t = NULL;
    CHECK(pl_chat_template_parse(src, strlen(src), &t) == PL_OK, "parse: %s", pl_last_error());
    if (!t) return;
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){t, ctx, expect, 0};
        pthread_create(&th[i], NULL, render_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok == 50, "thread %d: %d/50 renders correct", i, args[i].ok);
    }
    pl_chat_template_free(t);
}

/* ------------------------------------------------------------ fixtures */

static void test_fixture_cases(void) {
    size_t len;
    char *text = pl_read_file(pl_fixture("chat-template-cases.json"), &len);
    CHECK(text != NULL, "cannot read chat-template-cases.json");
    if (!text) return;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    CHECK(root != NULL, "bad fixture json: %s", jerr.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    size_t n = json_array_size(cases), identical = 0;
    struct tm now = fixed_now();
    pl_chat_template_options opts = {0};
    opts.now = &now;
    for (size_t i = 0; i < n; i++) {
        json_t *cs = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(cs, "template"));
        const char *conv = json_string_value(json_object_get(cs, "conversation"));
        json_t *expected = json_object_get(cs, "output"), *error = json_object_get(cs, "error");
        char rel[512];
        snprintf(rel, sizeof rel, "templates/%s", name);
        size_t tlen;
        char *tsrc = pl_read_file(pl_fixture(rel), &tlen);
        CHECK(tsrc != NULL, "cannot read %s", rel);
        if (!tsrc) continue;
        pl_chat_template *t = NULL;
        pl_status st = pl_chat_template_parse(tsrc, tlen, &t);
        free(tsrc);
        CHECK(st == PL_OK, "%s: parse: %s", name, pl_last_error());
        if (st != PL_OK) continue;
        char *out = NULL;
        size_t olen = 0;
        st = pl_chat_template_render(t, json_object_get(cs, "input"), &opts, &out, &olen);
        if (json_is_string(error)) {
            /* "TemplateError: <message>": the template raised; we must fail
             * with that message */
            const char *msg = strchr(json_string_value(error), ':');
            msg = msg ? msg + 2 : json_string_value(error);
            bool ok = st != PL_OK && strstr(pl_last_error(), msg) != NULL;
            CHECK(ok, "%s/%s: expected error '%s', got %s", name, conv, msg,
                  st == PL_OK ? "output" : pl_last_error());
            identical += ok;
        } else {
            const char *exp = json_string_value(expected);
            size_t elen = json_string_length(expected);
            bool ok = st == PL_OK && olen == elen && !memcmp(out, exp, elen);
            CHECK(ok, "%s/%s: %s", name, conv, st != PL_OK ? pl_last_error() : "output differs");
            if (!ok && st == PL_OK) {
                size_t k = 0;
                while (k < olen && k < elen && out[k] == exp[k]) k++;
                fprintf(stderr, "  first difference at byte %zu\n  expected: %.80s\n  got:      %.80s\n", k,
                        exp + (k > 20 ? k - 20 : 0), out + (k > 20 ? k - 20 : 0));
            }
            identical += ok;
        }
        free(out);
        pl_chat_template_free(t);
    }
    printf("fixture cases: %zu/%zu identical\n", identical, n);
    CHECK(n == 72, "expected 72 cases, found %zu", n);
    json_decref(root);
}

/* ---------------------------------------------------- hostile templates */

static void expect_parse_error(const char *src, const char *what) {
    pl_chat_template *t = NULL;
    pl_status st = pl_chat_template_parse(src, strlen(src), &t);
    CHECK(st != PL_OK, "%s: should not parse", what);
    if (st == PL_OK) pl_chat_template_free(t);
    else CHECK(strstr(pl_last_error(), "line") != NULL, "%s: message without a position: %s", what, pl_last_error());
}

static void expect_render_error(const char *src, const char *ctx, const char *needle) {
    pl_status st;
    char *out = render(src, ctx, &st);
    CHECK(st != PL_OK && out == NULL, "'%.60s' should fail", src);
    if (st != PL_OK && needle)
        CHECK(strstr(pl_last_error(), needle) != NULL, "'%.60s': message '%s' lacks '%s'", src, pl_last_error(), needle);
    free(out);
}

static char *repeat_str(const char *s, size_t times, const char *tail) {
    size_t n = strlen(s), tl = strlen(tail);
    char *p = malloc(n * times + tl + 1);
    for (size_t i = 0; i < times; i++) memcpy(p + i * n, s, n);
    memcpy(p + n * times, tail, tl + 1);
    return p;
}

static void test_hostile(void) {
    expect_parse_error("{{ x ", "unterminated variable");
    expect_parse_error("{% if x %}", "unterminated if");
    expect_parse_error("{% if x %}{% endfor %}", "mismatched end tag");
    expect_parse_error("{# comment", "unterminated comment");
    expect_parse_error("{{ 'abc }}", "unterminated string");
    expect_parse_error("{% for %}{% endfor %}", "for without target");
    expect_parse_error("{{ x | no_such_filter }}", "undefined filter");
    expect_parse_error("{{ x is no_such_test }}", "undefined test");
    expect_parse_error("{% frobnicate %}", "unknown tag");
    expect_parse_error("{{ (1 }}", "unbalanced paren");
    expect_parse_error("{{ 1 ) }}", "unbalanced paren 2");
    expect_parse_error("{% break %}", "break outside loop");
    expect_parse_error("{{ 99999999999999999999 }}", "integer too large");
    expect_parse_error("{% include 'x' %}", "include");
    expect_parse_error("{% raw %}abc", "unterminated raw");
    expect_parse_error("{{ }}", "empty expression");

    /* 10,000 nested ifs: an error, not a stack overflow */
    char *deep = repeat_str("{% if true %}", 10000, "x");
    expect_parse_error(deep, "10000 nested ifs");
    free(deep);
    char *parens = repeat_str("(", 100000, "1");
    char *deep2 = malloc(strlen(parens) + 10);
    sprintf(deep2, "{{ %s", parens);
    expect_parse_error(deep2, "100000 parentheses");
    free(parens);
    free(deep2);
    char *nots = repeat_str("not ", 50000, "x }}");
    char *deep3 = malloc(strlen(nots) + 4);
    sprintf(deep3, "{{ %s", nots);
    expect_parse_error(deep3, "50000 nots");
    free(nots);
    free(deep3);
    /* a long flat chain parses but is too deep to evaluate recursively */
    char *chain = repeat_str("x.", 20000, "y }}");
    char *deep4 = malloc(strlen(chain) + 4);
    sprintf(deep4, "{{ %s", chain);
    expect_render_error(deep4, "{}", NULL);
    free(chain);
    free(deep4);

    /* runaway loops, output and memory */
    expect_render_error("{% for i in range(10**9) %}x{% endfor %}", "{}", "Range too big");
    expect_render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}",
                        "iteration limit");
    expect_render_error("{{ 'x' * 10**10 }}", "{}", "limit");
    expect_render_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", "{}", "limit");
    expect_render_error("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}"
                        "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "{}", "output");
    expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", "recursion too deep");
    expect_render_error("{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(0) }}", "{}", NULL);
    expect_render_error("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
                        "{}", "nested");
    /* a namespace that contains itself: printing it must stop, freeing must not leak */
    expect_render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "{}", "nested");

    /* runtime errors come back as messages */
    expect_render_error("{{ raise_exception('boom: ' ~ 42) }}", "{}", "boom: 42");
    expect_render_error("{{ foo.bar }}", "{}", "'foo' is undefined");
    expect_render_error("{{ 1 + 'a' }}", "{}", "unsupported operand");
    expect_render_error("{{ 'a' + 1 }}", "{}", "can only concatenate str");
    expect_render_error("{{ 1 // 0 }}", "{}", "division");
    expect_render_error("{{ [1].append(2) }}", "{}", "unsafe");
    expect_render_error("{{ none|length }}", "{}", "has no len");
    expect_render_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{}", "too many values");
    expect_render_error("{{ 9223372036854775807 + 1 }}", "{}", "overflow");
    expect_render_error("{{ x|tojson }}", "{}", "not JSON serializable");
    expect_render_error("{{ messages[0].content }}", "{\"messages\": 5}", NULL);

    /* invalid UTF-8 and NUL bytes in templates and inputs are just bytes */
    pl_status st;
    char *out = render("a\xff{{ 'b\xfe' }}c", "{}", &st);
    CHECK(st == PL_OK && out && !strcmp(out, "a\xff" "b\xfe" "c"), "invalid UTF-8 passes through");
    free(out);
    out = render("{{ s|length }}|{{ s|tojson }}", "{\"s\": \"a\\u0000b\"}", &st);
    CHECK(st == PL_OK && out && !strcmp(out, "3|\"a\\u0000b\""), "NUL in input: %s", out ? out : pl_last_error());
    free(out);

    /* small limits through the options */
    pl_chat_template_options o = {0};
    o.max_output = 100;
    out = render_opts("{% for i in range(50) %}abc{% endfor %}", "{}", &o, &st);
    CHECK(st != PL_OK && strstr(pl_last_error(), "output"), "max_output honoured");
    free(out);
    o.max_output = 0;
    o.max_iterations = 10;
    out = render_opts("{% for i in range(11) %}{% endfor %}", "{}", &o, &st);
    CHECK(st != PL_OK && strstr(pl_last_error(), "iteration"), "max_iterations honoured");
    free(out);
}

/* ------------------------------------------------ nesting at any depth */

/* Every construct that nests (in the grammar, in the AST, in evaluation or
 * in values) at depths from just past the limits to 100,000: the result is
 * a clean error (or, for the flat forms, text), never a crash. A stack
 * overflow kills this program, so the test fails without a bound on every
 * recursive path. prefix is repeated n times, then core, then suffix n
 * times. must_fail: the construct cannot succeed at these depths. */
typedef struct nest_case {
    const char *name, *head, *prefix, *core, *suffix, *tail;
    bool must_fail;
} nest_case;

static const nest_case nest_cases[] = {
    {"filter chain", "{{ 'x'", "|e", "", "", " }}", true},
    {"filter chain with args", "{{ 'x'", "|replace('a', 'b')", "", "", " }}", true},
    {"filter chain, dotted name", "{{ 'x'", "|e|trim", "", "", " }}", true},
    {"test/filter chain", "{{ 1", " is defined|e", "", "", " }}", true},
    {"filter in filter args", "{{ 'x'", "|replace('a', 'x'", "", ")", " }}", true},
    {"not", "{{ ", "not ", "1", "", " }}", true},
    {"unary minus", "{{ ", "- ", "1", "", " }}", true},
    {"unary plus", "{{ ", "+", "1", "", " }}", true},
    {"parentheses", "{{ ", "(", "1", ")", " }}", true},
    {"lists", "{{ ", "[", "1", "]", " }}", true},
    {"dicts", "{{ ", "{'a': ", "1", "}", " }}", true},
    {"tuples", "{{ ", "(1, ", "1", ")", " }}", true},
    {"subscript in subscript", "{{ x", "[x", "", "]", " }}", true},
    {"call in call", "{{ ", "range(", "1", ")", " }}", true},
    {"attribute chain", "{{ x", ".a", "", "", " }}", true},
    {"subscript chain", "{{ x", "[0]", "", "", " }}", true},
    {"slice chain", "{{ 'abc'", "[1:]", "", "", " }}", true},
    {"call chain", "{{ x", "()", "", "", " }}", true},
    {"method chain", "{{ 'a'", ".upper()", "", "", " }}", true},
    {"plus chain", "{{ 1", " + 1", "", "", " }}", true},
    {"minus chain", "{{ 1", " - 1", "", "", " }}", true},
    {"times chain", "{{ 1", " * 1", "", "", " }}", true},
    {"power chain", "{{ 1", " ** 1", "", "", " }}", true},
    {"floordiv chain", "{{ 1", " // 1", "", "", " }}", true},
    {"modulo chain", "{{ 1", " % 7", "", "", " }}", true},
    {"and chain", "{{ 1", " and 1", "", "", " }}", true},
    {"or chain", "{{ 0", " or 0", "", "", " }}", true},
    {"if chain", "{{ 1", " if 1", "", "", " }}", true},
    {"else chain", "{{ ", "0 if 0 else ", "1", "", " }}", true},
    {"concat chain (flat)", "{{ 'a'", " ~ 'a'", "", "", "|length }}", false},
    {"compare chain (flat)", "{{ 1", " < 2", "", "", " }}", false},
    {"in chain (flat)", "{{ 1", " in [1]", "", "", " }}", false},
    {"output list (flat)", "{% print 1", ", 1", "", "", " %}", false},
    {"nested if", "", "{% if 1 %}", "x", "{% endif %}", "", true},
    {"nested for", "", "{% for i in [1] %}", "x", "{% endfor %}", "", true},
    {"nested with", "", "{% with %}", "x", "{% endwith %}", "", true},
    {"nested filter blocks", "", "{% filter upper %}", "x", "{% endfilter %}", "", true},
    {"nested set blocks", "", "{% set a %}", "x", "{% endset %}", "", true},
    {"nested macros", "", "{% macro m() %}", "x", "{% endmacro %}", "", true},
    {"nested call blocks", "{% macro m() %}{{ caller() }}{% endmacro %}", "{% call m() %}", "x", "{% endcall %}", "", true},
    {"nested blocks", "", "{% block b %}", "x", "{% endblock %}", "", true},
    {"nested generation", "", "{% generation %}", "x", "{% endgeneration %}", "", true},
    {"nested autoescape", "", "{% autoescape false %}", "x", "{% endautoescape %}", "", true},
    {"set block filter chain", "{% set a", "|e", "", "", " %}x{% endset %}{{ a }}", true},
    {"filter block chain", "{% filter e", "|e", "", "", " %}x{% endfilter %}", true},
    {"elif chain (flat)", "{% if 0 %}", "{% elif 0 %}", "", "", "{% else %}x{% endif %}", false},
    {"statement list (flat)", "", "{% set a = 1 %}", "", "", "x", false},
};

/* Macro and value recursion, built at run time rather than written out. */
static const char *const nest_runtime[] = {
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% macro f(n) %}{{ n|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e ~ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}",
    "{% macro f() %}{{ caller() }}{% endmacro %}{% macro g() %}{% call f() %}{{ g() }}{% endcall %}{% endmacro %}{{ g() }}",
    "{% macro f(x) %}{{ [x]|map('string')|join|length ~ f(x ~ 'a') }}{% endmacro %}{{ f('') }}",
    "{% macro f(x) %}{{ '{}'.format(f) ~ f(x) }}{% endmacro %}{{ f(1) }}",
    "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|tojson }}",
    "{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = {'a': ns.d} %}{% endfor %}{{ ns.d }}",
    "{% set ns = namespace(v=none) %}{% for i in range(100000) %}{% set ns.v = namespace(v=ns.v) %}{% endfor %}{{ ns.v }}",
    "{% set ns = namespace(v=none) %}{% for i in range(100000) %}{% set ns.v = namespace(v=ns.v) %}{% endfor %}"
    "{{ ns.v|tojson }}",
    "{% set ns = namespace(v=none) %}{% for i in range(100000) %}{% set ns.v = [namespace(v=ns.v)] %}{% endfor %}"
    "{{ ns.v|string|length }}",
    "{% set ns = namespace(l=[]) %}{% for i in range(300) %}{% set ns.l = [ns.l] %}{% endfor %}{{ [ns.l, ns.l]|sort }}",
};

/* Chains of values longer than any depth limit, one link per iteration,
 * through the two kinds of value whose nesting is not counted (bound
 * methods, and macros holding their defining scope): they render, and
 * freeing them must not recurse once per link. */
static const char *const nest_chains[] = {
    "{% set ns = namespace(v={}) %}{% for i in range(100000) %}{% set ns.v = {'a': ns.v.get} %}{% endfor %}x",
    "{% set ns = namespace(v='') %}{% for i in range(100000) %}{% set ns.v = [ns.v.upper] %}{% endfor %}x",
    "{% set ns = namespace(f=none) %}{% for i in range(100000) %}{% set prev = ns.f %}"
    "{% macro h() %}{% endmacro %}{% set ns.f = h %}{% endfor %}x",
};

typedef struct nest_job {
    size_t done;   /* templates tried (a crash ends the process instead) */
} nest_job;

static char *nest_text(const nest_case *k, size_t n) {
    size_t hl = strlen(k->head), pl = strlen(k->prefix), cl = strlen(k->core), sl = strlen(k->suffix),
           tl = strlen(k->tail);
    char *s = malloc(hl + n * (pl + sl) + cl + tl + 1), *p = s;
    if (!s) return NULL;
    memcpy(p, k->head, hl), p += hl;
    for (size_t i = 0; i < n; i++) memcpy(p, k->prefix, pl), p += pl;
    memcpy(p, k->core, cl), p += cl;
    for (size_t i = 0; i < n; i++) memcpy(p, k->suffix, sl), p += sl;
    memcpy(p, k->tail, tl + 1);
    return s;
}

/* Parses and renders; returns true when either step failed cleanly (an
 * error message was set), false when it rendered. */
static bool nest_try(const char *src, const char *name, size_t depth) {
    static const char ctx[] = "{\"x\": [[[1]]]}";
    pl_chat_template *t = NULL;
    pl_status st = pl_chat_template_parse(src, strlen(src), &t);
    if (st != PL_OK) {
        CHECK(pl_last_error()[0] != 0, "%s at %zu: parse error without a message", name, depth);
        return true;
    }
    char *out = NULL;
    size_t n = 0;
    struct tm now = fixed_now();
    pl_chat_template_options o = {0};
    o.now = &now;
    st = pl_chat_template_render_json(t, ctx, strlen(ctx), &o, &out, &n);
    pl_chat_template_free(t);
    free(out);
    if (st != PL_OK) {
        CHECK(pl_last_error()[0] != 0, "%s at %zu: render error without a message", name, depth);
        return true;
    }
    return false;
}

static void *nest_sweep(void *arg) {
    nest_job *job = arg;
    static const size_t depths[] = {150, 260, 1100, 5000, 30000, 100000};
    for (size_t k = 0; k < sizeof nest_cases / sizeof nest_cases[0]; k++) {
        const nest_case *c = &nest_cases[k];
        for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
            char *src = nest_text(c, depths[d]);
            if (!src) continue;
            bool failed = nest_try(src, c->name, depths[d]);
            /* short chains may render; past the limits they must not */
            if (c->must_fail && depths[d] >= 1100)
                CHECK(failed, "%s at depth %zu rendered", c->name, depths[d]);
            free(src);
            job->done++;
        }
    }
    for (size_t k = 0; k < sizeof nest_chains / sizeof nest_chains[0]; k++) {
        pl_status st;
        char *out = render(nest_chains[k], "{}", &st);
        CHECK(st == PL_OK && out && !strcmp(out, "x"), "'%.70s': %s", nest_chains[k], out ? out : pl_last_error());
        free(out);
        job->done++;
    }
    for (size_t k = 0; k < sizeof nest_runtime / sizeof nest_runtime[0]; k++) {
        CHECK(nest_try(nest_runtime[k], nest_runtime[k], 0), "'%.70s' rendered", nest_runtime[k]);
        job->done++;
    }
    return NULL;
}

static void test_nesting(void) {
    /* on the main thread's stack, then on a thread with a 1 MiB stack like
     * the server's HTTP threads (MHD_OPTION_THREAD_STACK_SIZE) */
    nest_job job = {0};
    nest_sweep(&job);
    printf("nesting sweep: %zu templates, main thread\n", job.done);
    /* and on threads whose whole stack is smaller than the renderer's
     * default budget (512 KiB), 128 KiB: the budget shrinks to fit */
    static const size_t stacks[] = {(size_t)1 << 20, (size_t)128 << 10};
    for (size_t i = 0; i < 2; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, stacks[i]);
        pthread_t th;
        nest_job job2 = {0};
        CHECK(pthread_create(&th, &attr, nest_sweep, &job2) == 0, "thread");
        pthread_join(th, NULL);
        pthread_attr_destroy(&attr);
        printf("nesting sweep: %zu templates, %zu KiB thread\n", job2.done, stacks[i] >> 10);
        CHECK(job2.done == job.done, "thread sweep incomplete");
    }
}

int main(void) {
    test_fixture_cases();
    test_features();
    test_api();
    test_threads();
    test_hostile();
    test_nesting();
    return pl_test_summary("test_chat_template");
}
