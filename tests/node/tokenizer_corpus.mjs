// tokenizer_corpus.mjs OUT SIZE_MB: writes the tokenizer exactness corpus, deterministically
// (fixed seed, files read in sorted order): SIZE_MB megabytes of documents framed as
// [u32 little-endian byte length][bytes]. Kinds, interleaved:
//   code      source files of this repository and of tests/node/node_modules (64 KB slices)
//   chat      prose with contractions in mixed case, numbers, punctuation, markdown
//   cjk       Chinese, Japanese, Korean, with ASCII and full-width punctuation
//   emoji     single, skin tones, ZWJ families, flags, keycaps, mixed with text
//   space     runs of spaces, tabs, \r\n, NBSP, U+3000, U+0085, U+2028, U+FEFF around words
//   numbers   digit runs, decimals, other-script digits, superscripts, Roman numerals
//   scripts   Cyrillic, Greek, Arabic, Devanagari, Thai, combining marks, decomposed Hangul
//   special   chat-template markers, whole and broken (<|im_start|>, <|eot_id|>, <think>, ...)
//   random    random code points from all of the above
//   invalid   text with invalid UTF-8 (truncated, overlong, surrogate, stray bytes)
// Used by run_tokenizer_exactness.sh and bench/tokenizer_bench.sh.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { mulberry32 } from "./mulberry32.mjs";

const [out, sizeArg] = process.argv.slice(2);
if (!out) {
  console.error("usage: tokenizer_corpus.mjs OUT [SIZE_MB]");
  process.exit(2);
}
const target = Math.round(Number(sizeArg ?? 10) * 1024 * 1024);
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");

const rand = mulberry32(0x5eed1234);
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];

// Source files, sorted, skipping the big vocabulary files and bundles.
function listFiles(dir, acc) {
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return acc;
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name === ".git" || e.name.startsWith("build")) continue;
      listFiles(p, acc);
    } else if (/\.(cc|h|cpp|mjs|js|ts|md|sh|py|txt|cmake)$|CMakeLists\.txt$/.test(e.name)) {
      const size = fs.statSync(p).size;
      if (size > 0 && size < 4 * 1024 * 1024 && !/\.map$|\.global\.js$/.test(e.name)) acc.push(p);
    }
  }
  return acc;
}
const codeFiles = [
  ...listFiles(path.join(repo, "src"), []),
  ...listFiles(path.join(repo, "bench"), []),
  ...listFiles(path.join(repo, "scripts"), []),
  ...listFiles(path.join(here, "node_modules"), []),
];
let codeIndex = 0;
let codeOffset = 0;
function code() {
  if (codeFiles.length === 0) return chat();
  const buf = fs.readFileSync(codeFiles[codeIndex % codeFiles.length]);
  const slice = buf.subarray(codeOffset, codeOffset + 65536);
  codeOffset += 65536;
  if (codeOffset >= buf.length) {
    codeIndex++;
    codeOffset = 0;
  }
  return slice;
}

const words = (
  "the of and to in is you that it he was for on are as with his they at be this have from " +
  "or one had by word but not what all were we when your can said there use an each which she " +
  "do how their if will up other about out many then them these so some her would make like " +
  "him into time has look two more write go see number no way could people my than first water " +
  "been call who oil its now find long down day did get come made may part tokenizer server " +
  "latency throughput request response capture replay prefix cache speculative decoding " +
  "internationalization misunderstanding HTTP JSON API GPU CUDA vLLM SGLang Llama Qwen " +
  "naïve café résumé coöperate façade jalapeño Zürich"
).split(" ");
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve",
  "'M", "'LL", "'D", "'sup", "'tis", "'ſ", "’s", "'x"];
const punct = [".", ",", "!", "?", ";", ":", "...", " -", " —", "(", ")", "\"", "'", "`",
  "**", "##", "->", "=>", "::", "{}", "[]", "<>", "/", "\\", "@", "#", "$", "%", "^", "&", "*"];
function sentence() {
  const n = 3 + int(15);
  let s = "";
  for (let i = 0; i < n; i++) {
    let w = pick(words);
    const r = rand();
    if (r < 0.1) w = w.toUpperCase();
    else if (r < 0.25) w = w[0].toUpperCase() + w.slice(1);
    if (rand() < 0.12) w += pick(contractions);
    if (rand() < 0.08) w = String(int(100000) / (rand() < 0.5 ? 1 : 100));
    s += (i ? " " : "") + w;
    if (rand() < 0.15) s += pick(punct);
  }
  return s + pick([".", "!", "?", ".\n", "\n\n", ":\n- ", " "]);
}
function chat() {
  let s = "";
  const n = 2 + int(30);
  for (let i = 0; i < n; i++) {
    s += sentence();
    if (rand() < 0.1) s += "\n```python\ndef f(x):\n    return x ** 2  # comment\n```\n";
  }
  return s;
}

const han = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从";
const kana = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンー";
const hangul = "가나다라마바사아자차카타파하한국어는세계에서많이사용되는언어입니다";
const cjkPunct = ["。", "，", "、", "！", "？", "「", "」", "（", "）", "：", "；", " ", "\n",
  "ABC", "123", "GPU", "　"];
function cjk() {
  let s = "";
  const n = 50 + int(800);
  for (let i = 0; i < n; i++) {
    const r = rand();
    if (r < 0.6) s += han[int(han.length)];
    else if (r < 0.8) s += kana[int(kana.length)];
    else if (r < 0.9) s += hangul[int(hangul.length)];
    else s += pick(cjkPunct);
  }
  return s;
}

const emojis = ["😀", "😂", "🥲", "🤖", "🚀", "❤️", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸",
  "🇯🇵", "🇩🇪", "1️⃣", "#️⃣", "☕", "✨", "🫠", "🧑🏿‍🦱", "🐈‍⬛", "©", "™", "∑", "√", "≠", "→"];
function emoji() {
  let s = "";
  const n = 20 + int(300);
  for (let i = 0; i < n; i++) {
    s += rand() < 0.5 ? pick(emojis) : pick(words);
    s += pick(["", "", " ", "  ", "\n", "!"]);
  }
  return s;
}

const spaces = [" ", "  ", "   ", "        ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n",
  " \n", "\n ", " \t\n  ", "\u00a0", "\u3000", "\u0085", "\u2028", "\u2029", "\ufeff",
  "\u2003", "\u000b", "\u000c", "\u200b"];
function space() {
  let s = "";
  const n = 50 + int(400);
  for (let i = 0; i < n; i++) {
    s += pick(spaces);
    if (rand() < 0.3) s += pick(spaces);
    if (rand() < 0.7) s += pick(words);
    if (rand() < 0.2) s += pick(punct);
  }
  return s;
}

const numberish = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "-2.5e10",
  "1,000,000", "٣٤٥", "१२३", "²³", "½", "Ⅻ", "①②", "0x1F", "v1.2.3", "2024-05-01", "12:30:45",
  "９８７"];
function numbers() {
  let s = "";
  const n = 50 + int(400);
  for (let i = 0; i < n; i++) {
    s += pick(numberish);
    if (rand() < 0.3) s += String(int(1e9)).repeat(1 + int(3));
    s += pick([" ", "", ", ", "\n", "+", "x", "%"]);
  }
  return s;
}

const scriptsText = ["Привет, как дела? Это тест токенизатора.", "Καλημέρα κόσμε, ἀρχή",
  "مرحبا بالعالم، هذا اختبار", "नमस्ते दुनिया, यह एक परीक्षण है", "สวัสดีชาวโลก นี่คือการทดสอบ",
  "שלום עולם", "e\u0301te\u0301 cafe\u0301 A\u030a", "\u1100\u1161\u11a8 \u1102\u1161",
  "ﬁ ﬂ ﬀ Å Ω", "Ǆemal ǅ ǆ", "ſtraße STRASSE", "İstanbul ıi", "Ꭰ Ꭱ Ꭲ", "𝓗𝓮𝓵𝓵𝓸 𝕎𝕠𝕣𝕝𝕕",
  "Tiếng Việt có dấu", "ā ē ī ō ū", "ℌ℮ℓℓ◯"];
function scripts() {
  let s = "";
  const n = 20 + int(200);
  for (let i = 0; i < n; i++) s += pick(scriptsText) + pick([" ", "\n", ". ", "'s ", "'LL "]);
  return s;
}

const specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
  "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>",
  "</think>", "<tool_call>", "</tool_call>", "<|reserved_special_token_5|>", "<|im_sta",
  "<|eot_id", "<|<|im_end|>|>", "< |im_start| >", "<|fim_prefix|>", "<|vision_start|>"];
function special() {
  let s = "";
  const n = 20 + int(200);
  for (let i = 0; i < n; i++) {
    s += pick(specials);
    if (rand() < 0.5) s += pick(["user", "assistant", "system", "\n", "\n\n", " ", "  "]);
    if (rand() < 0.5) s += sentence();
  }
  return s;
}

const pools = [words.join(" "), han, kana, hangul, emojis.join(""), spaces.join(""),
  numberish.join(""), scriptsText.join(""), punct.join(""), "'sStTmMdDrReEvVlL"];
function random() {
  const chars = [...pools.join("")];
  let s = "";
  const n = 100 + int(1000);
  for (let i = 0; i < n; i++) s += chars[int(chars.length)];
  return s;
}

const badBytes = [[0xff], [0xfe], [0x80], [0xbf], [0xc0, 0xaf], [0xc3], [0xe2, 0x82],
  [0xe2, 0x82, 0x41], [0xed, 0xa0, 0x80], [0xf0, 0x9f], [0xf0, 0x9f, 0x98], [0xf4, 0x90, 0x80, 0x80],
  [0xf5], [0xe0, 0x80, 0x80], [0xc2, 0x20], [0x80, 0x80, 0x80]];
function invalid() {
  const parts = [];
  const n = 20 + int(200);
  for (let i = 0; i < n; i++) {
    parts.push(Buffer.from(pick([sentence, () => pick(scriptsText), () => pick(emojis)])()));
    parts.push(Buffer.from(pick(badBytes)));
    if (rand() < 0.3) parts.push(Buffer.from(pick(["a", "B", " ", "1", "\n", "'s", "é"])));
  }
  return Buffer.concat(parts);
}

const kinds = [
  [code, 30], [chat, 20], [cjk, 10], [emoji, 6], [space, 8], [numbers, 6], [scripts, 6],
  [special, 5], [random, 5], [invalid, 4],
];
const totalWeight = kinds.reduce((a, [, w]) => a + w, 0);
function nextDoc() {
  let r = rand() * totalWeight;
  for (const [f, w] of kinds) {
    if ((r -= w) < 0) return f();
  }
  return chat();
}

const fd = fs.openSync(out, "w");
let written = 0;
let docs = 0;
while (written < target) {
  let doc = nextDoc();
  if (typeof doc === "string") doc = Buffer.from(doc, "utf8");
  const header = Buffer.alloc(4);
  header.writeUInt32LE(doc.length);
  fs.writeSync(fd, header);
  fs.writeSync(fd, doc);
  written += doc.length;
  docs++;
}
fs.closeSync(fd);
console.log(`tokenizer_corpus: ${docs} documents, ${written} bytes -> ${out}`);
