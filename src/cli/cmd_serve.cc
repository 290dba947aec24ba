// `shardlm serve`: the OpenAI-compatible HTTP server over the continuous-batching engine.
//
// Goals: one command to a working endpoint: with no -m, a small random-weight model is
// synthesized once into the user's cache folder (and the log says so) so a first run needs
// no download; the chat template comes from the GGUF (or --chat-template-file; ChatML
// when neither, logged); logs on stderr, one line per request; binds 127.0.0.1 unless told
// otherwise, takes its API key from a file or the environment so `ps` does not show it, and
// warns when it listens beyond loopback without one (README "Security"); SIGINT/SIGTERM
// stop it cleanly; `--devices` /
// `--layer-split` split the layers into stages (checked before anything loads) and the
// log shows one line per stage; `--slot-save-path` (or `--kv-cache-dir`) enables /slots
// save and restore in that folder, under `--slot-save-budget`; the cache and slot folders
// are private (created 0700; another user's is refused before the model loads).
// Non-goals: daemonizing, TLS, several models.
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "cache/byte_size.h"
#include "cache/private_folder.h"
#include "cli/commands.h"
#include "cli/kv_pool_flags.h"
#include "cli/kv_type_flag.h"
#include "cli/placement_flags.h"
#include "cli/prefill_worker_process.h"
#include "cli/synth_model.h"
#include "engine/scheduler.h"
#include "pipeline/model_loader.h"
#include "server/http_server.h"
#include "server/pipeline_metrics.h"
#include "server/request_guard.h"

namespace shardlm::cli {
namespace {

struct ServeFlags {
  std::string model_path;
  KvPoolFlags kv_pool;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string api_key_file;
  std::string cors_origin;
  std::string chat_template_file;
  int n_parallel = 4;
  int n_ctx = 4096;
  int n_batch = 512;
  // Prompt tokens per step while other sequences decode. 64 keeps a running stream's
  // inter-token gap near one 64-token prefill step (~0.25 s for a 0.6B model on 2 cores)
  // while a long prompt arrives; 0 lets a prompt take the whole batch.
  int prefill_chunk = 64;
  int max_queue = 64;
  int n_threads = 0;
  int http_threads = 0;
  std::string alias;
  bool no_prefix_cache = false;
  int cache_pages = 0;
  std::string kv_cache_dir;
  std::string kv_cache_budget = "8GiB";
  std::string kv_type = "f16";
  std::string window_kv = "ring";
  std::string slot_save_path;
  std::string slot_save_budget = "8GiB";
  bool embeddings = false;
  PlacementFlags placement;
  std::string prefill_worker;
  std::string disagg;
  int disagg_min_tokens = 256;
};

void DeclareFlags(CLI::App& cmd, ServeFlags& f) {
  cmd.add_option("-m,--model", f.model_path,
                 "GGUF model file (none: synthesize a small qwen3 model once and serve it)");
  cmd.add_option("--host", f.host, "Address to bind")->capture_default_str();
  cmd.add_option("--port", f.port, "Port to listen on (0: any free port)")->capture_default_str();
  cmd.add_option("--api-key", f.api_key,
                 "Require 'Authorization: Bearer KEY' (not on /health); visible to `ps`: "
                 "prefer --api-key-file or SHARDLM_API_KEY");
  cmd.add_option("--api-key-file", f.api_key_file,
                 "Read the API key from the first line of this file");
  cmd.add_option("--cors-origin", f.cors_origin,
                 "Let web pages of this one origin (e.g. http://localhost:3000) call the server; "
                 "without it, browsers' cross-origin requests are refused");
  cmd.add_option("--chat-template-file", f.chat_template_file,
                 "Jinja chat template to use instead of the model's");
  cmd.add_option("--parallel", f.n_parallel, "Sequences decoded together (slots)")
      ->capture_default_str();
  cmd.add_option("-c,--ctx-size", f.n_ctx, "Context size per sequence, in tokens")
      ->capture_default_str();
  cmd.add_option("-b,--batch-size", f.n_batch, "Most tokens per forward pass")
      ->capture_default_str();
  cmd.add_option("--prefill-chunk", f.prefill_chunk,
                 "Most prompt tokens per step while other streams decode (0: no limit)")
      ->capture_default_str();
  cmd.add_option("--max-queue", f.max_queue, "Requests waiting beyond the slots (then 503)")
      ->capture_default_str();
  cmd.add_option("-t,--threads", f.n_threads, "Compute threads (0: every core)")
      ->capture_default_str();
  cmd.add_option("--http-threads", f.http_threads,
                 "HTTP handler threads (0: max(2 * parallel + 8, 32))")
      ->capture_default_str();
  cmd.add_option("-a,--alias", f.alias, "Model name reported by /v1/models");
  cmd.add_flag("--no-prefix-cache", f.no_prefix_cache,
               "Do not reuse the KV pages of common prompt prefixes across requests");
  cmd.add_option("--cache-pages", f.cache_pages,
                 "KV pages reserved for cached prefixes beyond the slots' own (64 tokens each)")
      ->capture_default_str();
  cmd.add_option("--kv-cache-dir", f.kv_cache_dir,
                 "Persist full KV pages of the prefix cache in this folder (created if missing) "
                 "and load them after a restart");
  cmd.add_option("--kv-cache-budget", f.kv_cache_budget,
                 "Most bytes of --kv-cache-dir files for this model and split (e.g. 512MiB, 8GiB); "
                 "the least used are evicted")
      ->capture_default_str();
  DeclareKvTypeFlag(cmd, f.kv_type);
  DeclareWindowKvFlag(cmd, f.window_kv);
  DeclareKvPoolFlags(cmd, f.kv_pool);
  cmd.add_option("--slot-save-path", f.slot_save_path,
                 "Folder of /slots save and restore files (created if missing; default: the "
                 "slots subfolder of --kv-cache-dir; neither: save and restore are off)");
  cmd.add_option("--slot-save-budget", f.slot_save_budget,
                 "Most bytes of slot files in the slot folder (e.g. 2GiB); a save past it is "
                 "refused (HTTP 507), no file is evicted")
      ->capture_default_str();
  cmd.add_flag("--embeddings", f.embeddings,
               "Serve POST /v1/embeddings: the mean over the input's positions of the final "
               "hidden state after the output norm, L2-normalised");
  DeclarePlacementFlags(cmd, f.placement);
  cmd.add_option("--prefill-worker", f.prefill_worker,
                 "Prefill long prompts on this worker (`shardlm worker --role prefill --listen "
                 "unix:NAME`), into the KV pages this server decodes from, while the running "
                 "streams go on decoding here");
  cmd.add_option("--disagg", f.disagg,
                 "prefill=cpu:A-B,decode=cpu:C-D: start a prefill worker on cores A-B and decode "
                 "on C-D (the same as --prefill-worker with a worker started by hand); without "
                 "decode=, the decode side is --devices (e.g. a split)");
  cmd.add_option("--disagg-min-tokens", f.disagg_min_tokens,
                 "Prompts with fewer uncached tokens prefill here (cheaper than the worker)")
      ->capture_default_str();
}

void Log(const std::string& line) { std::fprintf(stderr, "serve: %s\n", line.c_str()); }

// --disagg: the threads this server starts from here on (the engine loop, HTTP, model loading)
// run on the decode stages' cores, so none of them is scheduled beside the worker's compute: each
// decode step waits for the engine thread, and a thread queued behind the worker on its core adds
// a scheduler time slice to that step. (The worker's supervisor, started before, keeps every core;
// a worker pins itself.) Nothing to confine when a decode stage is unpinned.
void ConfineToDecodeCores(const PlacementOptions& placement) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string cores;
  for (const DeviceSpec& device : placement.devices) {
    if (device.remote()) continue;
    if (device.cores.empty()) return;
    for (int core : device.cores) {
      CPU_SET(core, &set);
      cores += (cores.empty() ? "" : ",") + std::to_string(core);
    }
  }
  if (cores.empty()) return;
  if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
    Log(fmt::format("could not keep this server's threads on cores {}: {}", cores,
                    std::strerror(errno)));
    return;
  }
  Log(fmt::format("this server's threads run on the decode cores ({})", cores));
}

std::filesystem::path CacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "shardlm";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "shardlm";
  }
  return std::filesystem::temp_directory_path() / "shardlm";
}

// The synthetic model's path, written once (temp file, then rename).
Result<std::string> EnsureSynthModel() {
  std::filesystem::path dir = CacheDir();
  std::filesystem::path path = dir / "synth-qwen3-tiny-q8_0.gguf";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    Log("no -m given: serving the synthetic model " + path.string());
    return path.string();
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create {}: {}", dir.string(), ec.message());
  SHARDLM_ASSIGN_OR_RETURN(SynthSpec spec, SynthPreset("qwen3", "tiny"));
  spec.type = "q8_0";
  spec.seed = 0;
  SHARDLM_TRY(ValidateSynthSpec(spec));
  Log("no -m given: synthesizing a random-weight qwen3 tiny q8_0 model (seed 0) into " +
      path.string());
  SHARDLM_ASSIGN_OR_RETURN(GgufWriter writer, BuildSynthModel(spec, 0));
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  SHARDLM_TRY(writer.WriteToFile(tmp.string()));
  std::filesystem::rename(tmp, path, ec);
  if (ec) return IoError("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
  return path.string();
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open chat template file {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<std::string> ChatTemplateSource(const ServeFlags& flags, const GgufFile& file) {
  if (!flags.chat_template_file.empty()) return ReadTextFile(flags.chat_template_file);
  Result<std::string_view> t = file.GetString("tokenizer.chat_template");
  if (!t.ok()) return std::string();
  return std::string(t.value());
}

// The disk tier's folder, created privately with its parents.
Result<std::string> PrepareKvCacheDir(const ServeFlags& flags) {
  if (flags.kv_cache_dir.empty()) return std::string();
  if (flags.no_prefix_cache) {
    return InvalidArgument("--kv-cache-dir needs the prefix cache: drop --no-prefix-cache");
  }
  SHARDLM_TRY(EnsurePrivateFolder(flags.kv_cache_dir, "--kv-cache-dir folder"));
  return flags.kv_cache_dir;
}

// The /slots file folder: --slot-save-path (created privately with its parents now, so a
// bad path fails at startup), else DIR/slots of --kv-cache-dir (created by the first save,
// so the cache folder holds only cache files until slots are used; checked now when it
// exists, and at every use), else none.
Result<std::string> PrepareSlotDir(const ServeFlags& flags) {
  if (flags.slot_save_path.empty()) {
    if (flags.kv_cache_dir.empty()) return std::string();
    const std::filesystem::path dir = std::filesystem::path(flags.kv_cache_dir) / "slots";
    const Status checked = CheckPrivateFolder(dir, "slot folder (the slots of --kv-cache-dir)");
    if (!checked.ok() && checked.code() != StatusCode::kNotFound) return checked;
    return dir.string();
  }
  SHARDLM_TRY(EnsurePrivateFolder(flags.slot_save_path, "--slot-save-path folder"));
  return flags.slot_save_path;
}

// The API key: --api-key, else the first line of --api-key-file, else $SHARDLM_API_KEY, else
// none. A key file readable by others is refused: the key would not be secret.
Result<std::string> ApiKey(const ServeFlags& flags) {
  if (!flags.api_key.empty()) return flags.api_key;
  if (!flags.api_key_file.empty()) {
    std::error_code ec;
    const auto perms = std::filesystem::status(flags.api_key_file, ec).permissions();
    if (ec) return NotFound("cannot read --api-key-file {}: {}", flags.api_key_file, ec.message());
    using P = std::filesystem::perms;
    if ((perms & (P::group_read | P::others_read)) != P::none) {
      return InvalidArgument("--api-key-file {} is readable by other users: chmod 600 it",
                             flags.api_key_file);
    }
    std::ifstream in(flags.api_key_file);
    std::string key;
    std::getline(in, key);
    if (!key.empty() && key.back() == '\r') key.pop_back();
    if (key.empty()) return InvalidArgument("--api-key-file {} is empty", flags.api_key_file);
    return key;
  }
  if (const char* env = std::getenv("SHARDLM_API_KEY"); env && *env) return std::string(env);
  return std::string();
}

std::string MiB(int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

server::HttpServer* g_server = nullptr;

void OnSignal(int) {
  if (g_server) g_server->Stop();
}

Status RunServe(const ServeFlags& given) {
  ServeFlags flags = given;
  // --disagg: this server decodes on the decode cores; a child worker prefills on the others.
  std::unique_ptr<PrefillWorkerProcess> worker_process;
  if (!flags.disagg.empty()) {
    if (!flags.prefill_worker.empty()) {
      return InvalidArgument("--disagg starts its own worker: drop --prefill-worker");
    }
    SHARDLM_ASSIGN_OR_RETURN(DisaggSpec spec, ParseDisaggSpec(flags.disagg));
    // The decode side: decode=DEVICE, or --devices (a split), not both.
    if (spec.decode_devices.empty() == flags.placement.devices.empty()) {
      return InvalidArgument(
          "--disagg: name the decode side once, as decode=cpu:C-D or with --devices (which may "
          "list a split)");
    }
    if (!spec.decode_devices.empty()) flags.placement.devices = spec.decode_devices;
    SHARDLM_ASSIGN_OR_RETURN(worker_process, PrefillWorkerProcess::Start(spec.prefill_cores));
    flags.prefill_worker = worker_process->socket();
    Log(fmt::format("prefill worker started on cores {} ({})", spec.prefill_cores,
                    flags.prefill_worker));
  }
  if (!flags.prefill_worker.empty() && flags.prefill_worker.rfind("unix:", 0) != 0) {
    return InvalidArgument("--prefill-worker '{}': expected unix:NAME or unix:PATH",
                           flags.prefill_worker);
  }
  SHARDLM_ASSIGN_OR_RETURN(PlacementOptions placement, ParsePlacement(flags.placement));
  if (worker_process != nullptr) ConfineToDecodeCores(placement);
  SHARDLM_ASSIGN_OR_RETURN(KvType kv_type, ParseKvTypeFlag(flags.kv_type));
  SHARDLM_ASSIGN_OR_RETURN(WindowKv window_kv, ParseWindowKvFlag(flags.window_kv));
  Result<uint64_t> budget = ParseByteSize(flags.kv_cache_budget);
  if (!budget.ok()) return InvalidArgument("--kv-cache-budget: {}", budget.status().message());
  Result<uint64_t> slot_budget = ParseByteSize(flags.slot_save_budget);
  if (!slot_budget.ok() || *slot_budget == 0) {
    return InvalidArgument("--slot-save-budget: {}", slot_budget.ok()
                                                         ? "must be more than 0"
                                                         : slot_budget.status().message());
  }
  SHARDLM_ASSIGN_OR_RETURN(std::string kv_cache_dir, PrepareKvCacheDir(flags));
  SHARDLM_ASSIGN_OR_RETURN(std::string slot_dir, PrepareSlotDir(flags));
  SHARDLM_ASSIGN_OR_RETURN(std::string api_key, ApiKey(flags));
  std::string model_path = flags.model_path;
  if (model_path.empty()) {
    SHARDLM_ASSIGN_OR_RETURN(model_path, EnsureSynthModel());
  }
  SHARDLM_ASSIGN_OR_RETURN(LoadedModel loaded,
                           LoadModelFile(model_path, ModelLoadOptions(placement)));
  SHARDLM_ASSIGN_OR_RETURN(std::string tmpl, ChatTemplateSource(flags, *loaded.file));
  SchedulerOptions so;
  so.n_parallel = flags.n_parallel;
  so.n_ctx = flags.n_ctx;
  so.n_batch = flags.n_batch;
  so.prefill_chunk = flags.prefill_chunk;
  so.max_queue = flags.max_queue;
  so.threads = flags.n_threads;
  so.model_name = flags.alias;
  so.prefix_cache = !flags.no_prefix_cache;
  so.cache_pages = flags.cache_pages;
  so.kv_type = kv_type;
  so.window_kv = window_kv;
  SHARDLM_ASSIGN_OR_RETURN(
      ParsedKvPool kv_pool,
      ParseKvPoolFlags(flags.kv_pool, flags.n_parallel, *loaded.model, kv_type, window_kv));
  so.kv_pool = kv_pool.pool;
  so.kv_tier = kv_pool.tier;
  so.kv_cache_dir = kv_cache_dir;
  so.kv_cache_budget = *budget;
  so.slot_save_budget = *slot_budget;
  so.embeddings = flags.embeddings;
  so.log_requests = false;  // the server logs one line per request, with its id
  so.placement = std::move(placement);
  so.placement.model_path = model_path;
  if (!flags.prefill_worker.empty()) so.prefill_worker = flags.prefill_worker.substr(5);
  so.disagg_min_tokens = flags.disagg_min_tokens;
  if (worker_process != nullptr) {
    // (The worker process outlives the engine: it was made first.)
    so.on_prefill_worker_lost = [process = worker_process.get()](pid_t pid) { process->Kill(pid); };
  }
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> engine,
                           Scheduler::Create(std::move(loaded), so));
  for (const std::string& line : DescribePlacement(engine->info().stages)) Log(line);
  if (so.bounded_kv()) Log(DescribeKvPool(kv_pool));
  if (!kv_cache_dir.empty()) {
    const EngineStats stats = engine->Stats();
    Log(fmt::format("kv cache on disk: {} ({} files, {} for this model and split; budget {})",
                    kv_cache_dir, stats.kv_disk_files, MiB(stats.kv_disk_bytes),
                    MiB(int64_t(*budget))));
  }
  if (!slot_dir.empty()) {
    Log(fmt::format("slot files (/slots save, restore): {} (budget {})", slot_dir,
                    MiB(int64_t(*slot_budget))));
  }
  server::ServerOptions opts;
  opts.slot_save_dir = slot_dir;
  opts.host = flags.host;
  opts.port = flags.port;
  opts.api_key = api_key;
  opts.cors_origin = flags.cors_origin;
  opts.chat_template = tmpl;
  opts.n_threads = flags.http_threads;
  opts.log = Log;
  opts.metrics_extra = [&scheduler = *engine] {
    return server::PipelineMetricsText(scheduler.pipeline_counters(), scheduler.info().stages,
                                       scheduler.stage_stats());
  };
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<server::HttpServer> http,
                           server::HttpServer::Create(*engine, opts));
  SHARDLM_TRY(http->Bind());
  Log(fmt::format("model {} ({} parallel, ctx {}, KV {}), listening on http://{}:{}",
                  engine->info().model_name, flags.n_parallel, flags.n_ctx, flags.kv_type,
                  flags.host, http->port()));
  if (!server::IsLoopbackHost(flags.host) && api_key.empty()) {
    Log(
        fmt::format("warning: listening on {} with no API key: anyone who can reach it can "
                    "use the model and the /slots files (set --api-key-file)",
                    flags.host));
  }
  g_server = http.get();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  http->Run();
  g_server = nullptr;
  Log("stopped");
  return Status::Ok();
}

}  // namespace

void AddServeCommand(CLI::App& app, Action& action) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  DeclareFlags(*cmd, *flags);
  cmd->callback([flags, &action] { action = [flags] { return RunServe(*flags); }; });
}

}  // namespace shardlm::cli
