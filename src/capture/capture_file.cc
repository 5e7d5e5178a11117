#include "capture/capture_file.h"

#include <cerrno>
#include <span>
#include <vector>

#include "capture/file_names.h"
#include "capture/recovery.h"

namespace llmtap {

Status RepairTornTail(Env* env, const std::string& path, uint64_t* cut_bytes) {
  *cut_bytes = 0;
  FileInfo info;
  Status s = env->Stat(path, &info);
  if (!s.ok() || !info.exists || info.size == 0) return s;
  // Read backwards in growing windows until a '\n' or the start of the file is found.
  std::string tail;
  for (size_t window = 64 * 1024;; window *= 2) {
    s = env->ReadTail(path, window, &tail);
    if (!s.ok()) return s;
    if (tail.empty() || tail.back() == '\n') return Status::Ok();
    size_t nl = tail.rfind('\n');
    if (nl != std::string::npos || tail.size() >= info.size) {
      uint64_t keep = nl == std::string::npos ? 0 : info.size - tail.size() + nl + 1;
      *cut_bytes = info.size - keep;
      return env->Truncate(path, keep);
    }
  }
}

namespace {

using SidecarName = std::string (*)(const std::string&);
// A capture file's sidecars (file_names.h); the manifest first.
constexpr SidecarName kSidecars[] = {ManifestPathFor, OutcomesPathFor, LegacyOutcomesPathFor,
                                     ShadowPairsPathFor};

bool RegularFileAt(Env* env, const std::string& path) {
  FileInfo info;
  return env->Stat(path, &info).ok() && info.exists && info.is_regular;
}

// The sidecars of `path` (but its manifest) that hold anything.
std::vector<std::string> StraySidecars(Env* env, const std::string& path) {
  std::vector<std::string> found;
  for (SidecarName sidecar : std::span(kSidecars).subspan(1)) {
    FileInfo info;
    if (env->Stat(sidecar(path), &info).ok() && info.exists && info.is_regular && info.size > 0) {
      found.push_back(sidecar(path));
    }
  }
  return found;
}

bool AnySidecarAt(Env* env, const std::string& aside) {
  FileInfo info;
  if (env->Stat(aside, &info).ok() && info.exists) return true;
  for (SidecarName sidecar : kSidecars) {
    if (env->Stat(sidecar(aside), &info).ok() && info.exists) return true;
  }
  return false;
}

// Renames each sidecar of `path` that exists to the same sidecar of `aside`.
void MoveSidecarsAside(Env* env, Logger* logger, const std::string& path, const std::string& aside,
                       bool with_manifest) {
  for (SidecarName sidecar : std::span(kSidecars).subspan(with_manifest ? 0 : 1)) {
    const std::string from = sidecar(path);
    if (!RegularFileAt(env, from)) continue;
    Status ms = env->RenameNoReplace(from, sidecar(aside));
    if (!ms.ok()) logger->Log(LogLevel::kWarning, ms.ToString());
  }
}

}  // namespace

Status OpenNewCapture(Env* env, Logger* logger, const std::string& path,
                      std::unique_ptr<AppendFile>* file) {
  if (path.empty()) return Status::InvalidArgument("capture path is empty");
  Status s = env->CreateDirs(DirName(path), 0700);
  if (!s.ok()) return s;
  FileInfo info;
  s = env->Stat(path, &info);
  if (!s.ok()) return s;
  if (info.is_symlink) {
    return Status::Refused("refusing to write capture through the symlink at " + path +
                           "; point the capture path at a regular file");
  }
  if (info.exists && !info.is_regular) {
    return Status::Refused(path + " exists and is not a regular file");
  }
  if (info.exists && info.size > 0) {
    uint64_t cut = 0;
    s = RepairTornTail(env, path, &cut);
    if (!s.ok()) return s;
    if (cut > 0) {
      logger->Log(LogLevel::kWarning, "cut a torn last line (" + std::to_string(cut) +
                                          " bytes) from the older capture " + path);
    }
    const int64_t now = env->NowWallNanos();
    std::string aside;
    for (int attempt = 0;; ++attempt) {
      aside = AsideName(path, now, attempt);
      s = env->RenameNoReplace(path, aside);
      if (s.ok()) break;
      if (s.err() != EEXIST || attempt >= 1000) return s;
    }
    MoveSidecarsAside(env, logger, path, aside, /*with_manifest=*/true);
    // Left by a run that stopped uncleanly, its manifest is made to describe it (a clean
    // stop's "stopped" manifest already does).
    Status rs = WriteRecoveredManifest(env, aside, cut);
    logger->Log(rs.ok() ? LogLevel::kInfo : LogLevel::kWarning,
                "moved the older capture " + path + " aside to " + aside +
                    (rs.ok() ? "" : "; its manifest could not be rewritten: " + rs.ToString()));
  }
  return env->OpenAppend(path, file);
}

void MoveStraySidecarsAside(Env* env, Logger* logger, const std::string& path) {
  FileInfo info;
  if (!env->Stat(path, &info).ok() || (info.exists && info.size > 0)) return;
  const std::vector<std::string> stray = StraySidecars(env, path);
  if (stray.empty()) return;
  const int64_t now = env->NowWallNanos();
  std::string aside;
  for (int attempt = 0; attempt <= 1000; ++attempt) {
    aside = AsideName(path, now, attempt);
    if (!AnySidecarAt(env, aside)) break;
  }
  MoveSidecarsAside(env, logger, path, aside, /*with_manifest=*/false);
  logger->Log(LogLevel::kInfo, "no older capture at " + path + ", but an older run's " +
                                   stray.front() + (stray.size() > 1 ? " and others" : "") +
                                   ": moved aside beside " + aside);
}

Status ReopenOwnCapture(Env* env, const std::string& path, uint64_t expected_size,
                        std::unique_ptr<AppendFile>* file, uint64_t* size) {
  Status s = env->CreateDirs(DirName(path), 0700);
  if (!s.ok()) return s;
  s = env->OpenAppend(path, file);
  if (!s.ok()) return s;
  uint64_t actual = 0;
  s = (*file)->Size(&actual);
  if (!s.ok()) return s;
  if (actual > expected_size) {
    s = (*file)->Truncate(expected_size);
    if (!s.ok()) return s;
    actual = expected_size;
  } else if (actual < expected_size) {
    // Someone shortened the file under us; keep whole lines only.
    uint64_t cut = 0;
    s = RepairTornTail(env, path, &cut);
    if (!s.ok()) return s;
    actual -= cut;
  }
  *size = actual;
  return Status::Ok();
}

}  // namespace llmtap
