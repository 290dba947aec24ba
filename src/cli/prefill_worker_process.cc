// PrefillWorkerProcess (prefill_worker_process.h): fork/exec of `shardlm worker`, the wait for
// its socket and the supervisor that restarts it.
#include "cli/prefill_worker_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "ipc/socket_dir.h"

namespace shardlm::cli {
namespace {

constexpr auto kListenTimeout = std::chrono::seconds(60);
constexpr auto kRestartDelay = std::chrono::seconds(1);
constexpr auto kStopGrace = std::chrono::seconds(5);  // SIGTERM to SIGKILL when the server stops

// "cpu:A" or "cpu:A-B" → "A-B".
Result<std::string> CoreRange(std::string_view device) {
  constexpr std::string_view kCpu = "cpu:";
  if (device.rfind(kCpu, 0) != 0 || device.size() == kCpu.size()) {
    return InvalidArgument("--disagg prefill={}: expected cpu:A or cpu:A-B (the worker's cores)",
                           device);
  }
  std::string range(device.substr(kCpu.size()));
  if (range.find('-') == std::string::npos) range += "-" + range;
  return range;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

Result<DisaggSpec> ParseDisaggSpec(const std::string& text) {
  DisaggSpec spec;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view part(text.data() + begin, end - begin);
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    if (key == "prefill" && !value.empty()) {
      SHARDLM_ASSIGN_OR_RETURN(spec.prefill_cores, CoreRange(value));
    } else if (key == "decode" && !value.empty()) {
      spec.decode_devices = std::string(value);
    } else {
      return InvalidArgument("--disagg '{}': expected prefill=cpu:A-B,decode=cpu:C-D", text);
    }
    begin = end + 1;
  }
  if (spec.prefill_cores.empty()) {
    return InvalidArgument("--disagg '{}': name the worker's cores, prefill=cpu:A-B", text);
  }
  return spec;
}

PrefillWorkerProcess::PrefillWorkerProcess(std::string exe, std::string cores, std::string socket)
    : exe_(std::move(exe)), cores_(std::move(cores)), socket_(std::move(socket)) {}

Result<std::unique_ptr<PrefillWorkerProcess>> PrefillWorkerProcess::Start(
    const std::string& cores) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return IoError("cannot find this executable: {}", std::strerror(errno));
  exe[n] = '\0';
  const std::string name = "prefill-" + std::to_string(::getpid());
  SHARDLM_ASSIGN_OR_RETURN(const std::string path, ResolveSocketPath(name));
  std::unique_ptr<PrefillWorkerProcess> process(
      new PrefillWorkerProcess(exe, cores, "unix:" + name));
  ::unlink(path.c_str());  // a stale socket of an earlier process with this pid
  SHARDLM_ASSIGN_OR_RETURN(const pid_t pid, process->Spawn());
  // It listens once its socket file exists (bound and listening in one step).
  const auto deadline = std::chrono::steady_clock::now() + kListenTimeout;
  struct stat st {};
  while (::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return Unavailable("the prefill worker ({} worker --cores {}) ended before listening: {}",
                         exe, cores, DescribeExit(status));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Unavailable("the prefill worker did not listen on {} within {} s", path,
                         kListenTimeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  process->supervisor_ = std::thread(&PrefillWorkerProcess::Supervise, process.get());
  return process;
}

Result<pid_t> PrefillWorkerProcess::Spawn() {
  std::vector<std::string> args = {exe_,       "worker", "--role",  "prefill",
                                   "--listen", socket_,  "--cores", cores_};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return IoError("fork: {}", std::strerror(errno));
  if (pid == 0) {
    // The worker must not outlive the server, even one killed with SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::execv(exe_.c_str(), argv.data());
    ::_exit(127);
  }
  std::lock_guard<std::mutex> lock(mu_);
  child_ = pid;
  return pid;
}

void PrefillWorkerProcess::Supervise() {
  while (!stopping_.load()) {
    pid_t pid;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pid = child_;
    }
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      child_ = -1;
    }
    if (stopping_.load()) return;
    std::fprintf(stderr, "serve: the prefill worker ended (%s); starting it again\n",
                 DescribeExit(status).c_str());
    std::this_thread::sleep_for(kRestartDelay);
    if (stopping_.load() || !Spawn().ok()) return;
  }
}

void PrefillWorkerProcess::Kill(pid_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid <= 0 || pid != child_) return;
  std::fprintf(stderr, "serve: the server lost the prefill worker (pid %d); ending it\n", int(pid));
  ::kill(pid, SIGKILL);
}

PrefillWorkerProcess::~PrefillWorkerProcess() {
  stopping_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (child_ > 0) {
      ::kill(child_, SIGTERM);
      ::kill(child_, SIGCONT);  // a stopped child takes its SIGTERM only once it runs
    }
  }
  // A child that does not end in time (hung) is killed: the server must be able to exit.
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (child_ <= 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (child_ > 0) ::kill(child_, SIGKILL);
  }
  if (supervisor_.joinable()) supervisor_.join();
}

}  // namespace shardlm::cli
