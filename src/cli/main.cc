// llmtap: one binary, one subcommand per part. See `llmtap --help`.
#include "cli/llmtap_main.h"

int main(int argc, char** argv) { return llmtap::cli::LlmtapMain(argc, argv); }
