// `shardlm`: one binary, one subcommand per job. Logs go to stderr; stdout
// carries only what the subcommand produces (generated text, token ids, JSON).
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"shardlm: a GGUF inference server that moves the KV cache where it is needed"};
  app.require_subcommand(1);
  shardlm::cli::Action action;
  shardlm::cli::AddGgufCommand(app, action);
  shardlm::cli::AddTokenizeCommand(app, action);
  shardlm::cli::AddRunCommand(app, action);
  shardlm::cli::AddBenchCommand(app, action);
  shardlm::cli::AddServeCommand(app, action);
  shardlm::cli::AddShardCommand(app, action);
  shardlm::cli::AddWorkerCommand(app, action);
  CLI11_PARSE(app, argc, argv);
  if (!action) return 0;
  shardlm::Status status = action();
  if (!status.ok()) {
    std::fprintf(stderr, "shardlm: error: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
