// trace_gen OUT BYTES [SEED] [CONVERSATIONS] [AGENT_PCT]: writes a synthetic mooncake_payload
// capture of about BYTES bytes for the trace tool benchmarks (bench/trace_bench.sh). Deterministic
// under SEED. Mix: 60% chat (shared system prompts, 1-8 turns of history, some multimodal text
// parts, mostly streaming), 40% completions; prompt text from a word list with JSON escapes
// (\n, \", \u00e9) and UTF-8; Poisson arrivals at ~40 requests/s.
// With CONVERSATIONS > 0, every row is instead a turn of one of that many open multi-turn
// chats (agents and chat products): turn k+1 carries turn k's messages, the answer to it and a
// new user message; a chat ends after 2-24 turns and a new one starts with one of the shared
// system prompts. Rows of one chat are CONVERSATIONS rows apart on average.
// With AGENT_PCT > 0 (conversations only), rows also carry `tools`, and that share of the
// answers is a tool call (an assistant message with tool_calls) followed by one or two tool
// results and no new user message, as an agent loop sends them (bench/sessions_bench.sh).
// Without it the output is what it always was.
// With RESPONSES = 1, also writes OUT.outcomes.ndjson as `llmtap proxy --capture-responses` would
// (bench/specdec_bench.sh): every row's outcome with its response. In conversation mode a row's
// response is exactly the answer the chat's next turn carries (text, or the tool call), and its
// outcome line is written when that turn is (completion order, as a server's are); the last turn
// of a chat and the rows of the mixed mode get an answer drawn from a second generator, so the
// capture itself is the same bytes as without RESPONSES.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

const char* kWords[] = {
    "the",     "model",   "request",  "token",  "latency", "cache",   "prefix",  "server",
    "replay",  "trace",   "GPU",      "batch",  "decode",  "prefill", "stream",  "answer",
    "explain", "why",     "function", "return", "value",   "error",   "résumé",  "naïve",
    "日本語",  "données", "quickly",  "under",  "load",    "between", "several", "replicas",
    "{",       "}",       "x = 1;",   "if",     "else",    "for",     "while",   "print"};

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  size_t Uniform(size_t lo, size_t hi) { return lo + rng() % (hi - lo + 1); }

  void Text(std::string* out, size_t chars) {
    size_t start = out->size();
    while (out->size() - start < chars) {
      out->append(kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))]);
      uint64_t r = rng() % 100;
      if (r < 3) {
        out->append("\\n");
      } else if (r < 4) {
        out->append(" \\\"quoted\\\" ");
      } else if (r < 5) {
        out->append(" caf\\u00e9 ");
      } else if (r < 12) {
        out->append(". ");
      } else {
        out->push_back(' ');
      }
    }
  }
};

}  // namespace

// OUT.outcomes.ndjson: one outcome line per row, holding its response.
struct Sidecar {
  FILE* f = nullptr;
  Gen other{0x616e73};  // answers the capture never shows (its own stream of draws)
  std::string line;

  // `text` and `args`: JSON-escaped already. A tool call when `args` is not null.
  void Write(uint64_t row, uint64_t ts, const std::string& text, const char* args) {
    if (!f) return;
    line.assign("{\"line\":" + std::to_string(row) + ",\"timestamp\":" + std::to_string(ts) +
                ",\"status\":200,\"ttft_ms\":20.0,\"latency_ms\":900.0,\"prompt_tokens\":null,"
                "\"completion_tokens\":null,\"finish_reason\":\"");
    line.append(args ? "tool_calls" : "stop");
    line.append("\",\"cancelled\":false,\"error\":null,\"response\":{\"text\":\"");
    line.append(text);
    line.append("\",\"reasoning\":\"\",\"tool_calls\":[");
    if (args) line.append("{\"name\":\"read_file\",\"arguments\":\"" + std::string(args) + "\"}");
    line.append("],\"truncated\":false}}\n");
    std::fwrite(line.data(), 1, line.size(), f);
  }
  // An answer drawn from the second generator.
  void WriteOther(uint64_t row, uint64_t ts) {
    if (!f) return;
    std::string text;
    other.Text(&text, other.Uniform(50, 800));
    Write(row, ts, text, nullptr);
  }
};

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: trace_gen OUT BYTES [SEED] [CONVERSATIONS] [AGENT_PCT] [RESPONSES]\n");
    return 2;
  }
  FILE* f = std::fopen(argv[1], "wx");
  if (!f) {
    std::perror(argv[1]);
    return 2;
  }
  const uint64_t target = std::strtoull(argv[2], nullptr, 10);
  Gen g(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
  std::exponential_distribution<double> gap(40.0);
  std::string systems[4];
  for (auto& s : systems) g.Text(&s, g.Uniform(200, 1500));
  const char* models[] = {"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"};
  const int max_tokens[] = {64, 128, 256, 512, 1024, 2048};
  double t = 0;
  uint64_t written = 0, rows = 0;
  std::string line;
  const size_t conversations = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 0;
  const uint64_t agent_pct = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 0;
  Sidecar sidecar;
  if (argc > 6 && std::strtoull(argv[6], nullptr, 10) != 0) {
    const std::string path = std::string(argv[1]) + ".outcomes.ndjson";
    sidecar.f = std::fopen(path.c_str(), "wx");
    if (!sidecar.f) {
      std::perror(path.c_str());
      return 2;
    }
  }
  uint64_t calls = 0;
  struct Chat {
    std::string messages;  // the JSON array's elements so far
    size_t turns_left = 0;
    uint64_t pending_row = 0, pending_ts = 0;  // its last row, whose answer the next turn holds
  };
  std::vector<Chat> chats(conversations);
  while (written < target && conversations > 0) {
    Chat& c = chats[g.rng() % conversations];
    bool tool_turn = false;
    if (c.turns_left == 0) {
      if (c.pending_row) sidecar.WriteOther(c.pending_row, c.pending_ts);
      c.messages = "{\"role\":\"system\",\"content\":\"" + systems[g.rng() % 4] + "\"}";
      c.turns_left = g.Uniform(2, 24);
    } else if (agent_pct > 0 && g.rng() % 100 < agent_pct) {
      tool_turn = true;
      std::string id = "call_" + std::to_string(++calls);
      if (c.pending_row) {
        sidecar.Write(c.pending_row, c.pending_ts, "", "{\\\"path\\\":\\\"src/main.cc\\\"}");
      }
      c.messages.append(",{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"" +
                        id +
                        "\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
                        "\"arguments\":\"{\\\"path\\\":\\\"src/main.cc\\\"}\"}}]}");
      for (size_t n = g.Uniform(1, 2); n > 0; --n) {
        c.messages.append(",{\"role\":\"tool\",\"tool_call_id\":\"" + id + "\",\"content\":\"");
        g.Text(&c.messages, g.Uniform(50, 1500));
        c.messages.append("\"}");
      }
    } else {
      c.messages.append(",{\"role\":\"assistant\",\"content\":\"");
      const size_t answer_at = c.messages.size();
      g.Text(&c.messages, g.Uniform(50, 800));
      if (c.pending_row) {
        sidecar.Write(c.pending_row, c.pending_ts, c.messages.substr(answer_at), nullptr);
      }
      c.messages.append("\"}");
    }
    if (!tool_turn) {  // a tool call's results end the turn: no user message
      c.messages.append(",{\"role\":\"user\",\"content\":\"");
      g.Text(&c.messages, g.Uniform(20, 400));
      c.messages.append("\"}");
    }
    --c.turns_left;
    line.assign("{\"timestamp\":");
    line.append(std::to_string(static_cast<uint64_t>(t * 1000)));
    line.append(",\"payload\":{\"model\":\"");
    line.append(models[0]);
    line.append("\",\"messages\":[");
    line.append(c.messages);
    line.append("],\"stream\":true,\"max_tokens\":1024");
    if (agent_pct > 0) {
      line.append(
          ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"read_file\","
          "\"description\":\"Read a file of the repository\",\"parameters\":{\"type\":"
          "\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}}}]");
    }
    line.append("}}\n");
    std::fwrite(line.data(), 1, line.size(), f);
    written += line.size();
    ++rows;
    c.pending_row = rows;
    c.pending_ts = static_cast<uint64_t>(t * 1000);
    t += gap(g.rng);
  }
  for (Chat& c : chats) {
    if (c.pending_row) sidecar.WriteOther(c.pending_row, c.pending_ts);
  }
  while (written < target) {
    line.assign("{\"timestamp\":");
    line.append(std::to_string(static_cast<uint64_t>(t * 1000)));
    line.append(",\"payload\":{\"model\":\"");
    line.append(models[g.rng() % 2]);
    line.append("\",");
    if (g.rng() % 10 < 6) {
      line.append("\"messages\":[{\"role\":\"system\",\"content\":\"");
      line.append(systems[g.rng() % 4]);
      line.append("\"}");
      size_t turns = g.Uniform(1, 8);
      for (size_t i = 0; i < turns; ++i) {
        bool user = i % 2 == 0;
        line.append(user ? ",{\"role\":\"user\",\"content\":"
                         : ",{\"role\":\"assistant\",\"content\":");
        if (user && g.rng() % 10 == 0) {
          line.append("[{\"type\":\"text\",\"text\":\"");
          g.Text(&line, g.Uniform(50, 2000));
          line.append("\"}]}");
        } else {
          line.push_back('"');
          g.Text(&line, g.Uniform(50, 2000));
          line.append("\"}");
        }
      }
      line.append("],\"stream\":");
      line.append(g.rng() % 10 < 8 ? "true" : "false");
    } else {
      line.append("\"prompt\":\"");
      g.Text(&line, g.Uniform(100, 6000));
      line.append("\",\"stream\":");
      line.append(g.rng() % 2 ? "true" : "false");
    }
    line.append(",\"max_tokens\":");
    line.append(std::to_string(max_tokens[g.rng() % 6]));
    line.append(",\"temperature\":0.7}}\n");
    std::fwrite(line.data(), 1, line.size(), f);
    written += line.size();
    ++rows;
    sidecar.WriteOther(rows, static_cast<uint64_t>(t * 1000));
    t += gap(g.rng);
  }
  if (std::fclose(f) != 0 || (sidecar.f && std::fclose(sidecar.f) != 0)) {
    std::perror(argv[1]);
    return 2;
  }
  std::printf("%llu rows, %llu bytes\n", static_cast<unsigned long long>(rows),
              static_cast<unsigned long long>(written));
  return 0;
}
