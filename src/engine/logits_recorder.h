// LogitsRecorder: writes rows of logits to a file as raw little-endian float32, no header
// (the fixtures' `.f32` format: np.fromfile(path, "<f4").reshape(rows, n_vocab)).
//
// Goals: `run --logits-out`: row t = the logits generated token t was chosen from; write
// errors reported with the path; the file is complete after Close.
// Non-goals: any header or metadata (the shape is known to the caller).
//
// Thread safety: one thread. Lifetime: the file is closed by Close or the destructor.
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace shardlm {

class LogitsRecorder {
 public:
  static Result<std::unique_ptr<LogitsRecorder>> Open(const std::string& path);
  ~LogitsRecorder();
  LogitsRecorder(const LogitsRecorder&) = delete;
  LogitsRecorder& operator=(const LogitsRecorder&) = delete;

  Status Append(std::span<const float> row);
  Status Close();
  int rows() const { return rows_; }

 private:
  LogitsRecorder(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
  int rows_ = 0;
};

}  // namespace shardlm
