// The subcommands of `shardlm`. Each file cmd_*.cc registers one subcommand on the app;
// main.cc only wires them together and turns a Status into an exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "base/status.h"

namespace shardlm::cli {

// A registered subcommand runs this after parsing; its Status becomes the exit code.
using Action = std::function<Status()>;

void AddGgufCommand(CLI::App& app, Action& action);
void AddTokenizeCommand(CLI::App& app, Action& action);
void AddRunCommand(CLI::App& app, Action& action);
void AddBenchCommand(CLI::App& app, Action& action);
void AddServeCommand(CLI::App& app, Action& action);
void AddShardCommand(CLI::App& app, Action& action);
void AddWorkerCommand(CLI::App& app, Action& action);
// `gguf synth`, registered by AddGgufCommand under its `gguf` subcommand.
void AddGgufSynthCommand(CLI::App& gguf, Action& action);

}  // namespace shardlm::cli
