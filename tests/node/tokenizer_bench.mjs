// tokenizer_bench.mjs CORPUS TOKENIZER_JSON [REPS]: single-thread encode throughput of the
// Hugging Face `tokenizers` native binding on a framed corpus (tokenizer_corpus.mjs), texts
// decoded before timing. Two ways, best of REPS each:
//   encode       one awaited encode() per document (what a Node caller does)
//   encodeBatch  the whole corpus in one call; run with RAYON_NUM_THREADS=1 so Rust uses one
//                thread (bench/tokenizer_bench.sh sets it)
import fs from "node:fs";
import { createRequire } from "node:module";

const [corpusPath, tokenizerPath, repsArg] = process.argv.slice(2);
const reps = Number(repsArg ?? 3);
const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");
let t0 = process.hrtime.bigint();
const tok = Tokenizer.fromFile(tokenizerPath);
const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
const corpus = fs.readFileSync(corpusPath);
const docs = [];
let bytes = 0;
for (let off = 0; off < corpus.length;) {
  const len = corpus.readUInt32LE(off);
  const text = corpus.toString("utf8", off + 4, off + 4 + len);
  docs.push(text);
  bytes += Buffer.byteLength(text);
  off += 4 + len;
}
const opts = { addSpecialTokens: false };
async function time(f) {
  let best = Infinity;
  let tokens = 0;
  for (let r = 0; r < reps; r++) {
    t0 = process.hrtime.bigint();
    tokens = await f();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return { best, tokens };
}
const one = await time(async () => {
  let n = 0;
  for (const d of docs) n += (await tok.encode(d, null, opts)).getLength();
  return n;
});
const batch = await time(async () => {
  let n = 0;
  for (const e of await tok.encodeBatch(docs, opts)) n += e.getLength();
  return n;
});
console.log(`hf      load ${tokenizerPath}: ${loadS.toFixed(3)} s`);
for (const [name, r] of [["encode", one], ["encodeBatch", batch]]) {
  console.log(`hf      ${name}: ${bytes} bytes, ${r.tokens} tokens, best of ${reps}: ` +
    `${r.best.toFixed(3)} s, ${(bytes / r.best / 1e6).toFixed(1)} MB/s`);
}
