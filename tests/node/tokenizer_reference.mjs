// tokenizer_reference.mjs CORPUS TOKENIZER_JSON OUT_IDS [REPLACED_OUT] [--engine hf|lenml]:
// encodes every document of CORPUS (framed as tokenizer_corpus.mjs writes it) with a reference
// tokenizer, `encode(text, add_special_tokens=False)`, and writes OUT_IDS framed as
// [u32 count][u32 ids...] per document.
//   hf     the Hugging Face `tokenizers` native binding (Rust), the ground truth (default)
//   lenml  @lenml/tokenizers (transformers.js fork, pure JS)
//   none   no encoding (TOKENIZER_JSON unused): just write REPLACED_OUT
// A document is decoded from UTF-8 as Node does (each invalid sequence -> U+FFFD); with
// REPLACED_OUT, the text that was actually encoded is written there in the corpus framing, so
// the C++ side can encode the very same bytes.
import fs from "node:fs";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
let engine = "hf";
const pos = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--engine") engine = args[++i];
  else pos.push(args[i]);
}
const [corpusPath, tokenizerPath, outPath, replacedPath] = pos;
if (!outPath) {
  console.error("usage: tokenizer_reference.mjs CORPUS TOKENIZER_JSON OUT_IDS [REPLACED_OUT] [--engine hf|lenml]");
  process.exit(2);
}
const require = createRequire(import.meta.url);

const corpus = fs.readFileSync(corpusPath);
const docs = [];
for (let off = 0; off < corpus.length;) {
  const len = corpus.readUInt32LE(off);
  docs.push(corpus.toString("utf8", off + 4, off + 4 + len));
  off += 4 + len;
}

let encodeAll;
if (engine === "hf") {
  const { Tokenizer } = require("tokenizers");
  const tok = Tokenizer.fromFile(tokenizerPath);
  encodeAll = async (texts) => {
    const out = [];
    for (let i = 0; i < texts.length; i += 256) {
      const encs = await tok.encodeBatch(texts.slice(i, i + 256), { addSpecialTokens: false });
      for (const e of encs) out.push(e.getIds());
    }
    return out;
  };
} else if (engine === "lenml") {
  const { TokenizerLoader } = require("@lenml/tokenizers");
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerPath, "utf8")),
    tokenizerConfig: {},
  });
  encodeAll = async (texts) => texts.map((t) => tok.encode(t, { add_special_tokens: false }));
} else if (engine === "none") {  // only write REPLACED_OUT
  encodeAll = async () => [];
} else {
  console.error(`unknown engine ${engine}`);
  process.exit(2);
}

const t0 = process.hrtime.bigint();
const all = await encodeAll(docs);
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
let total = 0;
const chunks = [];
for (const ids of all) {
  const buf = Buffer.alloc(4 + 4 * ids.length);
  buf.writeUInt32LE(ids.length, 0);
  for (let i = 0; i < ids.length; i++) buf.writeUInt32LE(ids[i], 4 + 4 * i);
  chunks.push(buf);
  total += ids.length;
}
fs.writeFileSync(outPath, Buffer.concat(chunks));
if (replacedPath) {
  const parts = [];
  for (const d of docs) {
    const b = Buffer.from(d, "utf8");
    const h = Buffer.alloc(4);
    h.writeUInt32LE(b.length);
    parts.push(h, b);
  }
  fs.writeFileSync(replacedPath, Buffer.concat(parts));
}
console.log(`tokenizer_reference(${engine}): ${docs.length} documents, ${total} tokens in ${seconds.toFixed(2)} s`);
