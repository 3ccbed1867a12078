/*
 * Pre-tokenizers: the tokenizer.ggml.pre table and the word splitters.
 *
 * The splitters transcribe the behaviour of llama.cpp's hand-written
 * splitters (unicode.cpp: unicode_regex_split_custom_qwen2 / _llama3 /
 * _gpt2). Two conventions of theirs matter and are kept:
 *   - the flags of a position outside the fragment are 0, and several rules
 *     test "flags != 0" instead of a bounds check;
 *   - every codepoint inside the fragment has non-zero flags (unassigned ones
 *     are PL_UCD_UNDEFINED), so "flags != 0" means "inside".
 */
#include <string.h>
#include "tokenizer/pretok.h"
#include "tokenizer/ucd.h"

/* Names accepted for tokenizer.ggml.pre, with the settings llama.cpp's
 * llama_vocab::impl::load gives them. Only rows whose pre-tokenizer is one of
 * the splitters below are listed; any other name (including llama.cpp's
 * "default" regex set, used when the key is missing) is rejected with a
 * message by the loader. To add a pre-tokenizer: add a pl_pretok_kind, its
 * splitter in pl_pretok_next, and rows here. */
static const pl_pretok_info k_pretok_table[] = {
    /* name                 kind              ignore_merges add_bos clean_spaces */
    {"qwen2",              PL_PRETOK_QWEN2,  false, false, false},
    {"deepseek-r1-qwen",   PL_PRETOK_QWEN2,  false, false, false},
    {"kormo",              PL_PRETOK_QWEN2,  false, false, false},
    {"f2llmv2",            PL_PRETOK_QWEN2,  false, false, false},
    {"hunyuan",            PL_PRETOK_QWEN2,  false, false, false},
    {"solar-open",         PL_PRETOK_QWEN2,  false, false, false},
    {"megrez",             PL_PRETOK_QWEN2,  false, false, true},
    {"stablelm2",          PL_PRETOK_QWEN2,  false, false, true},

    {"llama3",             PL_PRETOK_LLAMA3, true,  true,  true},
    {"llama-v3",           PL_PRETOK_LLAMA3, true,  true,  true},
    {"llama-bpe",          PL_PRETOK_LLAMA3, true,  true,  true},
    {"falcon3",            PL_PRETOK_LLAMA3, true,  true,  true},
    {"falcon-h1",          PL_PRETOK_LLAMA3, true,  true,  true},
    {"pixtral",            PL_PRETOK_LLAMA3, true,  true,  true},
    {"midm-2.0",           PL_PRETOK_LLAMA3, true,  true,  true},
    {"lfm2",               PL_PRETOK_LLAMA3, true,  true,  true},
    {"dbrx",               PL_PRETOK_LLAMA3, false, false, true},
    {"smaug-bpe",          PL_PRETOK_LLAMA3, false, false, true},

    {"gpt-2",              PL_PRETOK_GPT2,   false, false, true},
    {"smollm",             PL_PRETOK_DIGITS_GPT2, false, false, false},
    {"starcoder",          PL_PRETOK_DIGITS_GPT2, false, false, true},
    {"refact",             PL_PRETOK_DIGITS_GPT2, false, false, true},
    {"phi-2",              PL_PRETOK_GPT2,   false, false, true},
    {"gigachat",           PL_PRETOK_GPT2,   false, false, true},
    {"mpt",                PL_PRETOK_GPT2,   false, false, true},
    {"olmo",               PL_PRETOK_GPT2,   false, false, true},
    {"exaone4",            PL_PRETOK_GPT2,   false, false, true},
};

const pl_pretok_info *pl_pretok_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof k_pretok_table / sizeof k_pretok_table[0]; i++) {
        const char *n = k_pretok_table[i].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return &k_pretok_table[i];
    }
    return NULL;
}

#define OUT_OF_RANGE 0xFFFFFFFFu

static inline uint32_t cpt_at(const uint32_t *c, size_t n, size_t i) {
    return i < n ? c[i] : OUT_OF_RANGE;
}

static inline uint16_t flags_at(const uint32_t *c, size_t n, size_t i) {
    return i < n ? pl_ucd_flags(c[i]) : 0;
}

/* ASCII-only lowering is exact here: no other codepoint lowercases to one of
 * the letters the contraction rule compares with (gen_unicode_tables.py
 * checks this). */
static inline uint32_t lower_ascii(uint32_t c) {
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

#define F_WLN (PL_UCD_WHITESPACE | PL_UCD_LETTER | PL_UCD_NUMBER)

/* The whitespace tail shared by all splitters: \s*[\r\n]+ (qwen2/llama3
 * only), \s+(?!\S), \s+. */
static size_t split_whitespace(const uint32_t *c, size_t n, size_t pos, bool newline_rule) {
    size_t nws = 0, last_rn = 0;
    while (flags_at(c, n, pos + nws) & PL_UCD_WHITESPACE) {
        uint32_t c2 = c[pos + nws];
        if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
        nws++;
    }
    /* \s*[\r\n]+ : up to and including the last line break of the run. */
    if (newline_rule && last_rn > 0) return last_rn;
    /* \s+(?!\S) : a run followed by more text leaves its last whitespace
     * character to the next word (so " world" keeps its space). */
    if (nws > 1 && pos + nws < n) return pos + nws - 1;
    if (nws > 0) return pos + nws;
    return pos + 1;  /* no rule matched: one codepoint (unreachable in practice) */
}

/* qwen2 and llama3 differ only in how many digits one word may hold. */
static size_t split_qwen2_llama3(const uint32_t *c, size_t n, size_t pos, size_t max_digits) {
    const uint32_t cpt = c[pos];
    const uint16_t flags = flags_at(c, n, pos);

    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (cpt == '\'' && pos + 1 < n) {
        uint32_t c1 = lower_ascii(c[pos + 1]);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
        if (pos + 2 < n) {
            uint32_t c2 = lower_ascii(c[pos + 2]);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return pos + 3;
        }
    }

    /* [^\r\n\p{L}\p{N}]?\p{L}+ : any one leading character except CR, LF or a
     * number (a letter leads itself), then letters. */
    if (!(cpt == '\r' || cpt == '\n' || (flags & PL_UCD_NUMBER))) {
        if ((flags & PL_UCD_LETTER) || (flags_at(c, n, pos + 1) & PL_UCD_LETTER)) {
            pos++;
            while (flags_at(c, n, pos) & PL_UCD_LETTER) pos++;
            return pos;
        }
    }

    /* \p{N} (qwen2) or \p{N}{1,3} (llama3) */
    if (flags & PL_UCD_NUMBER) {
        size_t end = pos + 1;
        while (end - pos < max_digits && (flags_at(c, n, end) & PL_UCD_NUMBER)) end++;
        return end;
    }

    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    uint16_t flags2 = cpt == ' ' ? flags_at(c, n, pos + 1) : flags;
    if (!(flags2 & F_WLN) && flags) {
        pos += (cpt == ' ');
        while (!(flags2 & F_WLN) && flags2) flags2 = flags_at(c, n, ++pos);
        uint32_t c2 = cpt_at(c, n, pos);
        while (c2 == '\r' || c2 == '\n') c2 = cpt_at(c, n, ++pos);
        return pos;
    }

    return split_whitespace(c, n, pos, true);
}

static size_t split_gpt2(const uint32_t *c, size_t n, size_t pos) {
    const uint32_t cpt = c[pos];
    const uint16_t flags = flags_at(c, n, pos);

    /* 's|'t|'re|'ve|'m|'ll|'d (case sensitive) */
    if (cpt == '\'' && pos + 1 < n) {
        uint32_t c1 = c[pos + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return pos + 2;
        if (pos + 2 < n) {
            uint32_t c2 = c[pos + 2];
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return pos + 3;
        }
    }

    uint16_t flags2 = cpt == ' ' ? flags_at(c, n, pos + 1) : flags;
    /*  ?\p{L}+ */
    if (flags2 & PL_UCD_LETTER) {
        pos += (cpt == ' ');
        while (flags2 & PL_UCD_LETTER) flags2 = flags_at(c, n, ++pos);
        return pos;
    }
    /*  ?\p{N}+ */
    if (flags2 & PL_UCD_NUMBER) {
        pos += (cpt == ' ');
        while (flags2 & PL_UCD_NUMBER) flags2 = flags_at(c, n, ++pos);
        return pos;
    }
    /*  ?[^\s\p{L}\p{N}]+ */
    if (!(flags2 & F_WLN) && flags2) {
        pos += (cpt == ' ');
        while (!(flags2 & F_WLN) && flags2) flags2 = flags_at(c, n, ++pos);
        return pos;
    }
    return split_whitespace(c, n, pos, false);
}

/* llama.cpp applies "\p{N}" and then the GPT-2 expression to each piece it
 * left, so a digit is always a word of its own and the GPT-2 rules see the
 * text between two digits as if it ended there (a space before a digit stays
 * with the whitespace run: "a  1" is "a", "  ", "1"). The GPT-2 splitter
 * looks one codepoint past the word it returns, and past the end of a
 * whitespace run ("\s+(?!\S)"), so a digit there cuts the text first. */
static size_t split_digits_gpt2(const uint32_t *c, size_t n, size_t pos) {
    if (flags_at(c, n, pos) & PL_UCD_NUMBER) return pos + 1;
    const size_t e = split_gpt2(c, n, pos);
    for (size_t k = pos + 1; k < n; k++) {
        const uint16_t f = flags_at(c, n, k);
        if (f & PL_UCD_NUMBER) return split_gpt2(c, k, pos);
        if (k > e && !(f & PL_UCD_WHITESPACE)) break;
    }
    return e;
}

size_t pl_pretok_next(pl_pretok_kind kind, const uint32_t *cps, size_t n, size_t pos) {
    switch (kind) {
        case PL_PRETOK_QWEN2: return split_qwen2_llama3(cps, n, pos, 1);
        case PL_PRETOK_LLAMA3: return split_qwen2_llama3(cps, n, pos, 3);
        case PL_PRETOK_GPT2: return split_gpt2(cps, n, pos);
        case PL_PRETOK_DIGITS_GPT2: return split_digits_gpt2(cps, n, pos);
    }
    return pos + 1;
}
