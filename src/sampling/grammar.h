/*
 * Grammar-constrained decoding, internal interface (issue 16).
 *
 * A grammar is compiled from llama.cpp's GBNF into a flat array of elements
 * in llama.cpp's layout: each rule is its alternatives separated by GE_ALT
 * and closed by GE_END; a character class is GE_CHAR / GE_CHAR_NOT followed
 * by GE_CHAR_RNG_UPPER / GE_CHAR_ALT elements. Repetitions are expanded into
 * helper rules at parse time, so the matcher only knows sequences,
 * alternatives, rule references and characters.
 *
 * Matching state is a set of "stacks" (positions still to match, the top
 * being the next character element) plus a partial UTF-8 sequence: a token
 * may end inside a multi-byte character.
 */
#ifndef PL_SAMPLING_GRAMMAR_H
#define PL_SAMPLING_GRAMMAR_H
#include "pocketllm.h"
#include <stddef.h>
#include <stdint.h>

enum {
    GE_END = 0, GE_ALT, GE_RULE_REF, GE_CHAR, GE_CHAR_NOT, GE_CHAR_RNG_UPPER, GE_CHAR_ALT, GE_CHAR_ANY,
};

typedef struct pl_gelem { uint32_t type, value; } pl_gelem;

/* A compiled grammar: immutable after parsing, shared by clones. */
typedef struct pl_grules {
    pl_gelem *el;          /* every rule's elements, back to back */
    uint32_t n_el;
    uint32_t *rule_start;  /* index into el of each rule's first element */
    char **rule_name;      /* for messages */
    uint32_t n_rules;
    uint32_t root;
} pl_grules;

/* Parses GBNF text. Errors carry "line:col: message". start: the start rule
 * (NULL = "root"). */
pl_status pl_gbnf_parse(const char *text, size_t len, const char *start, pl_grules **out);
void pl_grules_free(pl_grules *r);

/* A growable uint32 buffer, used for stack sets. A stack set is stored as
 * [count, n_words, {len, e_0 .. e_len-1} * count]; n_words counts what
 * follows the two header words. */
typedef struct pl_u32vec { uint32_t *d; size_t n, cap; } pl_u32vec;
int pl_u32vec_reserve(pl_u32vec *v, size_t extra);

/* UTF-8 decoding state across tokens: value so far and bytes still needed. */
/* len: the sequence's total length. Overlong forms and surrogates are
 * invalid: otherwise F0 80 81 BD would be accepted as '}' by the grammar
 * while every UTF-8 reader rejects it. */
typedef struct pl_utf8_partial { uint32_t value; int n_remain, len; } pl_utf8_partial;
/* Feeds one byte. Returns 1 with *cp set when a code point completes, 0 when
 * more bytes are needed, -1 for a byte that cannot continue valid UTF-8. */
int pl_utf8_feed(pl_utf8_partial *p, uint8_t b, uint32_t *cp);

typedef struct pl_gmatch {
    const pl_grules *r;
    pl_u32vec scratch;     /* stacks under construction */
    int overflow;          /* set when a stack set outgrew PL_GM_MAX_STACKS / _WORDS
                            * or its expansion PL_GM_MAX_WORK */
    uint32_t work;         /* words expanded for the set being built */
    /* Dedup of the set being built: open addressing over PL_GM_HT slots,
     * {generation, offset of the stack in out + 1}; a new set bumps gen
     * instead of clearing the table (the trie walk builds a set per node). */
    uint32_t *ht;
    uint32_t gen;
    /* Stacks with a rule on top already expanded into the set being built:
     * expanding one again adds nothing, so it is skipped (nullable
     * alternatives, e.g. ("a"?)? repeated, reach the same stack along 2^n
     * paths). Same {generation, offset + 1} slots over PL_GM_SEEN_HT;
     * the stacks themselves are kept in `seen` as {len, positions...}. */
    uint32_t *seen_ht;
    uint32_t seen_used;
    pl_u32vec seen;
} pl_gmatch;

/* An ambiguous grammar (e.g. root ::= ("a" | . root)*) can make the number
 * of live stacks grow with every character; past these limits a match step
 * fails (pl_gmatch.overflow) instead of taking time without bound. Grammars
 * from JSON schemas hold a few dozen stacks (an enum: one per value). */
#define PL_GM_MAX_STACKS 4096
#define PL_GM_MAX_WORDS (1u << 14)
/* The limits above bound a set's size, not the work of building it: stacks
 * that expand to ones already in the set (e.g. ("a" | . root)* reaches the
 * same stack along many paths) cost their length each time and count nowhere
 * else. Every stack expanded or offered to the set adds its length + 1 here;
 * past this a step fails as too ambiguous (a few ms, where the fuzzer found
 * steps of seconds). Sets of JSON-schema grammars take a few thousand. */
#define PL_GM_MAX_WORK (1u << 20)
/* The same for a whole token mask (a step per trie node, ~300k nodes for a
 * 151k vocabulary): a grammar that costs near PL_GM_MAX_WORK at every node
 * would stall a server for minutes. test_grammar's masks over a 151k vocab
 * take up to 2.2M words; this allows 30x that. */
#define PL_GM_MAX_MASK_WORK (1ull << 26)
#define PL_GM_HT (2 * PL_GM_MAX_STACKS)   /* a power of two, at most half full */
#define PL_GM_SEEN_HT (1u << 14)          /* filled at most half: past that, no skipping */

/* Appends the initial stack set (the start rule expanded) to out; returns
 * the set's offset in out, or (size_t)-1 out of memory. */
size_t pl_gm_initial(pl_gmatch *m, pl_u32vec *out);
/* Appends the set reached from the set at offset `in` of `out` by matching
 * code point cp; returns its offset (its count may be 0: rejected), or
 * (size_t)-1 when out of memory or the set outgrew the limits (overflow). */
size_t pl_gm_accept_cp(pl_gmatch *m, pl_u32vec *out, size_t in, uint32_t cp);
/* Can some stack of the set continue with a character starting with the
 * partial sequence p (p->n_remain > 0)? */
int pl_gm_partial_ok(const pl_gmatch *m, const uint32_t *set, const pl_utf8_partial *p);
/* Does the set contain an empty stack (the text so far is a full match)? */
int pl_gm_accepting(const uint32_t *set);
/* Are all stacks empty (nothing more may follow)? */
int pl_gm_finished(const uint32_t *set);
void pl_gm_free(pl_gmatch *m);

/* JSON schema -> GBNF (json_schema.c). *gbnf is malloc'd. */
pl_status pl_json_schema_compile(const char *schema, size_t len, char **gbnf, size_t *gbnf_len);

#endif
