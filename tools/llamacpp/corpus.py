#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer_corpus.json: hand-picked strings that stress a byte-level BPE
tokenizer (pre-tokenizer regex classes, UTF-8 byte fallback, whitespace rules, special tokens).

Each entry is {"category": ..., "text": ...}. Invisible or confusable characters are written as
\\u escapes so the source shows what the string holds. Every string is valid UTF-8 (lone
surrogates cannot be, so none appear).

The SmolLM2 pre-tokenizer ("smollm" in llama.cpp) splits digits one by one, recognises only
lower-case ASCII contractions, groups letters (\\p{L}) with one optional leading space, and keeps
whitespace runs apart from the word that follows; many entries sit on those boundaries.

Run: python3 tools/llamacpp/corpus.py   (no dependencies; rewrites the JSON in place)
"""

import json
import pathlib
import unicodedata

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "tokenizer_corpus.json"

BASIC = [
    "",
    "a",
    "A",
    "Hello",
    "Hello world",
    "Hello, world!",
    " Hello",
    "hello world.",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX",
    "camelCaseIdentifier",
    "snake_case_identifier",
    "SCREAMING_SNAKE_CASE",
    "kebab-case-word",
    "x",
    "I",
    "ok.",
    "Mr. Smith went to Washington D.C. in the U.S.A.",
]

CONTRACTIONS = [
    "don't",
    "Don't",
    "DON'T",
    "I'LL",
    "I'll",
    "i'll",
    "it's",
    "it\u2019s",  # typographic apostrophe: not an ASCII contraction
    "we're they've she'd I'm",
    "WE'RE THEY'VE SHE'D I'M",
    "rock 'n' roll",
    "'s",
    "'tis the season",
    "the cat's toy",
    "students' books",
    "''quoted''",
    "O'Brien O'Neil d'Artagnan",
    "y'all'd've",
]

# NFC and NFD spellings of the same text tokenize differently in a byte-level BPE; both are kept.
_ACCENTED = [
    "caf\u00e9",
    "na\u00efve r\u00e9sum\u00e9",
    "\u00c5ngstr\u00f6m",
    "S\u00e3o Paulo",
    "Z\u00fcrich Stra\u00dfe",
    "\u0141\u00f3d\u017a",
    "Dvo\u0159\u00e1k",
    "\u00e0 la cr\u00e8me br\u00fbl\u00e9e",
    "\u1ea0\u1ebf Vi\u1ec7t Nam",
    "Espa\u00f1a ma\u00f1ana",
]
UNICODE_ACCENTS = []
for s in _ACCENTED:
    UNICODE_ACCENTS.append(unicodedata.normalize("NFC", s))
    UNICODE_ACCENTS.append(unicodedata.normalize("NFD", s))

COMBINING = [
    "e\u0301",  # e + combining acute
    "a\u0300\u0301\u0302\u0303\u0304",  # stacked marks
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u0301 leading combining mark",
    "n\u0303o",
    "q\u0307\u0323",
    "\u1e9b\u0323",
    "\u0915\u094d\u0937",  # Devanagari conjunct with virama
    "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",  # Hebrew with niqqud
    "\u0627\u064e\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629\u064f",  # Arabic with harakat
]

EMOJI = [
    "\U0001f600",
    "\U0001f600\U0001f601\U0001f602",
    "I love \U0001f355 and \U0001f363!",
    "\U0001f44d\U0001f3fd",  # skin tone
    "\U0001f44b\U0001f3fb\U0001f44b\U0001f3ff",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",  # family ZWJ
    "\U0001f469\u200d\U0001f4bb",  # woman technologist
    "\U0001f3f3\ufe0f\u200d\U0001f308",  # rainbow flag
    "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5\U0001f1e9\U0001f1ea",  # flags US JP DE
    "\U0001f1fa",  # lone regional indicator
    "\u2764\ufe0f",  # heart + VS16
    "\u2764",
    "1\ufe0f\u20e3",  # keycap
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",  # Scotland tag sequence
    "emoji\U0001f525glued\U0001f525together",
    "\U0001f9d1\U0001f3fe\u200d\U0001f91d\u200d\U0001f9d1\U0001f3fb",
]

CJK = [
    "\u4f60\u597d",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4.",
    "\u1100\u1161\u11a8",  # Hangul conjoining jamo (NFD form of 각)
    "\uac01",
    "\U00020000\U0002a6d6",  # CJK extension B (4-byte UTF-8)
    "\uff28\uff45\uff4c\uff4c\uff4f",  # full-width Latin
    "\u4e2d\u6587English\u6df7\u5408",
    "\u3000\u5168\u89d2\u7a7a\u683c\u3000",
]

RTL_AND_INDIC = [
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 123 English",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u05e2\u05d1\u05e8\u05d9\u05ea and English \u05de\u05e2\u05d5\u05e8\u05d1",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u0935\u093e\u0915\u094d\u092f\u0964",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e40\u0e27\u0e49\u0e19\u0e27\u0e23\u0e23\u0e04",
    "\u0dc3\u0dd2\u0d82\u0dc4\u0dbd",  # Sinhala
    "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8",  # Georgian
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u200f\u0639\u0631\u0628\u064a\u200e",  # RTL / LTR marks
    "\u202eevil override\u202c",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n\tprint(i)",
    "if __name__ == \"__main__\":\n    main()",
    "lambda x: x**2 if x > 0 else -x",
    "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n    pass\n",
    "#include <iostream>\nint main() { std::cout << \"hi\\n\"; return 0; }",
    "template <typename T> constexpr auto f(T&& t) -> decltype(auto) { return std::forward<T>(t); }",
    "std::vector<std::pair<int, float>> v{{1, 2.5f}};",
    "x->y = *p++ + ~q & 0xFF | 0b1010 ^ 077;",
    "a <<= 2; b >>= 3; c != d && e || !f;",
    "// comment\n/* block\n   comment */",
    "{\"key\": \"value\", \"n\": 42, \"arr\": [1, 2.5, true, null]}",
    "{\n  \"nested\": {\n    \"deep\": [\n      {}\n    ]\n  }\n}",
    "<!DOCTYPE html><html><head><title>T</title></head><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "<div id=\"main\">\n  <a href=\"https://example.com/?a=1&b=2\">link</a>\n</div>",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done",
    "ls -la | grep -v '^d' | awk '{print $9}' > out.txt 2>&1",
    "curl -sSL https://example.com/install.sh | sudo bash -s -- --yes",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "fn main() { let v: Vec<u8> = vec![0; 16]; println!(\"{:?}\", v); }",
    "const f = async (x) => { await g(x ?? 0); };",
    "$ git commit -m \"fix: handle \\\"quotes\\\"\"",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "    indented four\n        indented eight",
    "\t\ttwo tabs",
]

WHITESPACE = [
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\r\n\r\n",
    "\r",
    " \n ",
    "\t \t",
    "          ",  # ten spaces
    "                                                  ",  # fifty spaces
    "\n\n\n\n\n\n\n\n",
    "a  b",
    "a   b",
    "a\tb",
    "a\nb",
    "a\r\nb",
    "trailing space ",
    "trailing spaces   ",
    " leading space",
    "   leading spaces",
    "\nleading newline",
    "trailing newline\n",
    "line one\nline two\n\nline four",
    "windows\r\nline\r\nendings\r\n",
    "non\u00a0breaking\u00a0space",
    "\u00a0",
    "\u3000",
    "ideographic\u3000space",
    "thin\u2009space en\u2002space em\u2003space",
    "zero\u200bwidth\u200bspace",
    "\u200b",
    "\ufeffBOM at start",
    "vertical\u000btab and form\u000cfeed",
    "line\u2028separator para\u2029separator",
    "\u0085next line",
    "mixed \t\n\r\n \u00a0\u3000 whitespace",
]

DIGITS = [
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345678901234567890",
    "3.14159",
    "3.14159265358979323846264338327950288419716939937510",
    "-273.15",
    "+1e-10",
    "6.022e23",
    "1,000,000",
    "1.000.000,50",
    "$1,234.56",
    "\u20ac99.99",
    "50%",
    "+1 (555) 123-4567",
    "+44 20 7946 0958",
    "2024-02-29T23:59:59Z",
    "12:30:45.123",
    "192.168.1.1",
    "0x1F 0o17 0b1010",
    "abc123def456",
    "A1B2C3",
    "iPhone15 Pro Max 256GB",
    "COVID-19",
    "v1.2.3-rc.4+build.5",
    "\u00b2\u00b3\u00b9 \u00bd \u00bc \u2153",  # superscripts, vulgar fractions (\p{N})
    "\u2160\u2161\u2162 \u216b",  # Roman numerals (\p{Nl})
    "\u0661\u0662\u0663\u0664",  # Arabic-Indic digits
    "\u0967\u0968\u0969",  # Devanagari digits
    "\uff11\uff12\uff13",  # full-width digits
    "\u2460\u2461\u2462",  # circled digits
    "\U0001d7ce\U0001d7cf\U0001d7d0",  # mathematical bold digits
    "1st 2nd 3rd 4th",
    "1/2 3/4",
]

PUNCTUATION = [
    "!!!",
    "???",
    "?!?!",
    "...",
    "\u2026",
    "---",
    "\u2014\u2013-",
    "***bold*** __under__",
    "!@#$%^&*()_+-=[]{}|;':\",./<>?`~",
    "((()))[[[]]]{{{}}}",
    "\"double\" 'single' `back`",
    "\u201ccurly\u201d \u2018quotes\u2019 \u00abguillemets\u00bb \u300cCJK\u300d",
    "a.b,c;d:e!f?g",
    "end.",
    "=>",
    "::",
    "<<>>",
    "###",
    "# Heading\n## Subheading\n- item\n* item\n1. item",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "\u00a9\u00ae\u2122\u00a7\u00b6\u2020\u2021",
    "\u2190\u2191\u2192\u2193\u21d2\u21d4",
    "\u2200x\u2208\u211d: x\u00b2\u22650",
    "\u00bf\u00a1Qu\u00e9?!",
]

URLS_EMAILS = [
    "https://www.example.com",
    "https://example.com/path/to/page?query=1&other=two#frag",
    "http://localhost:8080/api/v1/chat/completions",
    "ftp://files.example.org/pub/file.tar.gz",
    "www.wikipedia.org/wiki/Byte_pair_encoding",
    "https://xn--nxasmq6b.example/\u00fcnic\u00f6de?q=\u65e5\u672c",
    "user@example.com",
    "first.last+tag@sub.domain.co.uk",
    "Contact: support@shoal.dev or admin@[192.168.0.1]",
    "mailto:someone@example.com?subject=Hi%20there",
    "git@github.com:owner/repo.git",
    "C:\\Users\\name\\Documents\\file.txt",
    "/usr/local/lib/python3.11/site-packages/",
    "~/.config/shoal/settings.json",
]

# Special-token text: with parse_special these become single control tokens; without, plain text.
SPECIAL = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nHello<|im_end|>\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|>",
    "<|im_start|><|im_start|><|im_start|>",
    "word<|im_end|>word",
    "hello<|endoftext|>",
    "<|endoftext|>hello",
    " <|im_start|> ",
    "\n<|im_end|>\n",
    "<|im_sta",
    "<|im_start",
    "im_start|>",
    "<|im_end|",
    "<|IM_START|>",
    "< |im_start| >",
    "<|im_start|>>",
    "<<|im_end|>",
    "<|endoftext|><|endoftext|>",
    "<repo_name>shoal<file_sep>main.cpp",
    "<jupyter_code>print(1)<jupyter_output>1",
    "<empty_output>",
    "<|unknown_token|>",
    "<s></s>[INST]",
]

ODD_UNICODE = [
    "\ufffd",
    "replacement \ufffd\ufffd character",
    "\ue000\ue001\uf8ff",  # private use area (BMP)
    "\U000f0000\U0010fffd",  # supplementary private use
    "\U0010ffff",  # last code point
    "\u0000",  # NUL is valid UTF-8
    "nul\u0000inside",
    "\u0001\u0002\u001f\u007f",  # control characters
    "\u00ad",  # soft hyphen
    "soft\u00adhyphen",
    "\ufeff",
    "\ufe0f",
    "\u200d",
    "\U0001d54f\U0001d552\U0001d55f",  # mathematical double-struck letters
    "\u0130stanbul \u0131",  # Turkish dotted/dotless i
    "\u1e9e\u00df",  # capital and small sharp s
    "\ufb01 \ufb02",  # ligatures fi fl
    "\u2126 \u03a9",  # ohm sign vs omega
    "\u212b \u00c5",  # angstrom sign vs A-ring
    "\U0001f130\U0001f131",  # squared letters
]

MIXED = [
    "Hello \u4e16\u754c \u043c\u0438\u0440 \u0639\u0627\u0644\u0645 \U0001f30d!",
    "Tokyo\u6771\u4eacMoscow\u041c\u043e\u0441\u043a\u0432\u0430",
    "price: \u00a5100 / $0.91 / \u20ac0.85",
    "\u03b1\u03b2\u03b3 abc \u0430\u0431\u0432",  # Greek, Latin, Cyrillic look-alikes
    "p\u0430ypal.com",  # Cyrillic a inside Latin word
    "\u05e9\u05dc\u05d5\u05dd123abc",
    "\u0928\u092e\u0938\u094d\u0924\u0947 hello \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "def \u4f60\u597d(): return '\U0001f600'",
    "I\u2019m going to the caf\u00e9 \u2014 want anything? \U0001f60a",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u2014 \u00a1All\u00ed!",
]

LONG_PARAGRAPH = (
    "Byte-pair encoding starts from single bytes and repeatedly merges the most frequent adjacent "
    "pair into a new symbol, so common words become one token while rare words, names and numbers "
    "are spelled out in pieces. The merge order learned during training decides every split: two "
    "tokenizers with the same vocabulary but a different merge table will disagree on text they have "
    "never seen. Pre-tokenization runs first, cutting the text at spaces, digits and punctuation so "
    "that merges never cross those boundaries; each piece is then mapped byte by byte onto printable "
    "characters before the merges apply. Decoding reverses the byte mapping, which is why a token can "
    "end in the middle of a multi-byte character and why streaming output must hold back incomplete "
    "UTF-8 sequences until the next token arrives. In 2024, models shipped with vocabularies of "
    "32,000 to 256,000 entries; this one has 49,152."
)

LONG = [
    LONG_PARAGRAPH,
    LONG_PARAGRAPH.replace(" ", "\n"),
    "Supercalifragilisticexpialidocious",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "a" * 300,
    "ab" * 150,
    "Donaudampfschifffahrtselektrizit\u00e4tenhauptbetriebswerkbauunterbeamtengesellschaft",
    "x" * 64 + "y" * 64 + "z" * 64,
    "\U0001f600" * 40,
    "\u4e00" * 100,
    "0123456789" * 20,
    "=" * 120,
    "ha" * 80 + "!",
]


def build():
    groups = [
        ("basic", BASIC),
        ("contraction", CONTRACTIONS),
        ("accent_nfc_nfd", UNICODE_ACCENTS),
        ("combining", COMBINING),
        ("emoji", EMOJI),
        ("cjk", CJK),
        ("rtl_indic_other_scripts", RTL_AND_INDIC),
        ("code", CODE),
        ("whitespace", WHITESPACE),
        ("digits", DIGITS),
        ("punctuation", PUNCTUATION),
        ("url_email_path", URLS_EMAILS),
        ("special_token_text", SPECIAL),
        ("odd_unicode", ODD_UNICODE),
        ("mixed_scripts", MIXED),
        ("long", LONG),
    ]
    seen = set()
    strings = []
    for category, items in groups:
        for text in items:
            # Some NFC/NFD pairs coincide (already-composed strings); keep each text once.
            if text in seen:
                continue
            seen.add(text)
            text.encode("utf-8")  # raises on a lone surrogate
            strings.append({"category": category, "text": text})
    return strings


def main():
    strings = build()
    doc = {
        "description": (
            "Tokenizer stress corpus for byte-level BPE (generated by tools/llamacpp/corpus.py; "
            "edit that script, not this file). Expected token ids for the default model are in "
            "llamacpp_smollm2.json."
        ),
        "count": len(strings),
        "strings": strings,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, ensure_ascii=True, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(strings)} strings)")


if __name__ == "__main__":
    main()
