// Two small workloads for the model tests: repetitive code editing and free chat.
#pragma once

#include <string>
#include <vector>

namespace llmtap::sim::testing {

// A C++ function, as a user pastes it into a code-editing request.
inline std::string CodeFile(int variant) {
  std::string v = std::to_string(variant);
  return "#include <vector>\n#include <string>\n\nstruct Item" + v +
         " {\n  std::string name;\n  int count = 0;\n  double price = 0.0;\n};\n\n"
         "double Total" +
         v + "(const std::vector<Item" + v +
         ">& items) {\n"
         "  double total = 0.0;\n  for (const Item" +
         v +
         "& item : items) {\n"
         "    if (item.count <= 0) continue;\n    total += item.price * item.count;\n  }\n"
         "  return total;\n}\n\n"
         "int Count" +
         v + "(const std::vector<Item" + v +
         ">& items) {\n"
         "  int count = 0;\n  for (const Item" +
         v +
         "& item : items) {\n"
         "    if (item.count <= 0) continue;\n    count += item.count;\n  }\n"
         "  return count;\n}\n\n"
         "std::vector<std::string> Names" +
         v + "(const std::vector<Item" + v +
         ">& items) {\n"
         "  std::vector<std::string> names;\n  for (const Item" +
         v +
         "& item : items) {\n"
         "    if (item.count <= 0) continue;\n    names.push_back(item.name);\n  }\n"
         "  return names;\n}\n";
}

// A code-editing chat: the file, an edit request, the model's previous answer (the file again)
// and a follow-up edit, the shape agentic coding tools send.
inline std::string CodeEditPrompt(int variant) {
  const std::string file = CodeFile(variant);
  return "<|im_start|>system\nYou are a coding assistant. Reply with the whole updated file."
         "<|im_end|>\n<|im_start|>user\nHere is my file:\n```cpp\n" +
         file +
         "```\nRename `count` to `quantity` "
         "everywhere.<|im_end|>\n<|im_start|>assistant\n```cpp\n" +
         file +
         "```<|im_end|>\n<|im_start|>user\nNow also skip items with a negative price."
         "<|im_end|>\n<|im_start|>assistant\n";
}

inline std::vector<std::string> ChatPrompts() {
  return {
      "<|im_start|>user\nWhat are three good day trips from Lisbon in spring, and how do I get "
      "there without a car?<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>user\nExplain like I'm ten why the sky looks blue during the day but red at "
      "sunset.<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>system\nYou are a friendly assistant.<|im_end|>\n<|im_start|>user\nWrite a "
      "short poem about autumn leaves falling on a quiet river.<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start|>user\nMy sourdough starter smells like nail polish remover. Is it dead, and "
      "what should I change in how I feed it?<|im_end|>\n<|im_start|>assistant\n",
  };
}

}  // namespace llmtap::sim::testing
