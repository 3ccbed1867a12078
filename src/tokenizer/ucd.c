/*
 * Unicode helpers for the tokenizer: character-class lookup, llama.cpp-style
 * UTF-8 decoding, the GPT-2 byte-to-unicode mapping, and the streaming helper
 * pl_utf8_complete_prefix.
 */
#include "tokenizer/ucd.h"
#include "tokenizer/tokenizer.h"

uint16_t pl_ucd_flags(uint32_t cp) {
    if (cp < 128) return pl_ucd_ascii[cp];
    if (cp > PL_UCD_MAX_CP) return PL_UCD_UNDEFINED;
    /* Last range whose start is <= cp. ranges[0].start == 0, so lo stays valid. */
    size_t lo = 0, hi = pl_ucd_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (pl_ucd_ranges[mid].start <= cp) lo = mid; else hi = mid;
    }
    return pl_ucd_ranges[lo].flags;
}

static int is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

uint32_t pl_utf8_decode(const unsigned char *s, size_t len, size_t *pos) {
    size_t i = *pos;
    unsigned char c = s[i];
    /* The structure checks follow llama.cpp's unicode_cpt_from_utf8: the lead
     * byte decides the length; every following byte must be a continuation
     * byte. Overlong forms and surrogates are NOT rejected (llama.cpp keeps
     * them, and the ids must match). */
    if (c < 0x80) { *pos = i + 1; return c; }
    if (c >= 0xC0 && c < 0xE0) {
        if (i + 1 < len && is_cont(s[i + 1])) {
            *pos = i + 2;
            return ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
        }
    } else if (c >= 0xE0 && c < 0xF0) {
        if (i + 2 < len && is_cont(s[i + 1]) && is_cont(s[i + 2])) {
            *pos = i + 3;
            return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
        }
    } else if (c >= 0xF0 && c < 0xF8) {
        if (i + 3 < len && is_cont(s[i + 1]) && is_cont(s[i + 2]) && is_cont(s[i + 3])) {
            uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                          ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            /* llama.cpp would decode this and then throw while re-encoding it
             * (terminating the process); we treat it like any other bad lead
             * byte instead. */
            if (cp <= PL_UCD_MAX_CP) {
                *pos = i + 4;
                return cp;
            }
        }
    }
    /* Continuation byte as lead, 0xF8..0xFF, truncated or broken sequence:
     * one replacement character for this byte only, as llama.cpp does. */
    *pos = i + 1;
    return PL_UCD_REPLACEMENT;
}

int pl_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the
 * other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) to U+0100.. in byte
 * order. Computed arithmetically so there is no table to get wrong. */
static uint32_t gpt2_byte_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    if (b <= 0x20) return 0x100 + b;                 /* 0x00..0x20 -> U+0100..U+0120 */
    if (b >= 0x7F && b <= 0xA0) return 0x121 + (b - 0x7F); /* -> U+0121..U+0142 */
    return 0x143;                                    /* 0xAD */
}

int pl_gpt2_byte_utf8(unsigned char b, char out[2]) {
    char tmp[4];
    int n = pl_utf8_encode(gpt2_byte_cp(b), tmp);  /* 1 or 2 bytes */
    out[0] = tmp[0];
    out[1] = n > 1 ? tmp[1] : 0;
    return n;
}

int pl_gpt2_cp_to_byte(uint32_t cp) {
    if (cp > 0x143) return -1;
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142) return (int)(0x7F + (cp - 0x121));
    if (cp == 0x143) return 0xAD;
    return -1;
}

/* ---- streaming helper ---------------------------------------------------- */

/* Expected length of a sequence starting with lead byte c under strict UTF-8
 * (RFC 3629), 0 if c cannot start one. */
static int strict_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether byte k (1-based position after the lead) may follow lead c in a
 * strictly valid sequence. The second byte carries the overlong / surrogate /
 * range restrictions. */
static int strict_cont_ok(unsigned char lead, int k, unsigned char c) {
    if (!is_cont(c)) return 0;
    if (k != 1) return 1;
    switch (lead) {
        case 0xE0: return c >= 0xA0;
        case 0xED: return c <= 0x9F;
        case 0xF0: return c >= 0x90;
        case 0xF4: return c <= 0x8F;
        default: return 1;
    }
}

size_t pl_utf8_complete_prefix(const char *buf, size_t len) {
    if (!buf || len == 0) return 0;
    const unsigned char *s = (const unsigned char *)buf;
    /* Only the last sequence can be incomplete: look back at most 3 bytes for
     * a lead byte. */
    size_t back = len < 4 ? len : 4;
    for (size_t k = 1; k <= back; k++) {
        size_t p = len - k;
        unsigned char c = s[p];
        if (is_cont(c)) continue;
        int need = strict_len(c);
        if (need <= 1 || (size_t)need <= k) return len;  /* ASCII, invalid lead, or complete */
        /* Sequence at p is shorter than needed: hold it back only if what is
         * there can still become valid. */
        for (size_t j = 1; j < k; j++) {
            if (!strict_cont_ok(c, (int)j, s[p + j])) return len;
        }
        return p;
    }
    return len;  /* only continuation bytes: can never become valid */
}
