#pragma once
// One file of a model, downloaded into modelsDir with resume. Internal to lan/hub (download()).
//
// On disk, for a file "x.gguf" (the last segment of its repository path):
//   modelsDir/.partial/x.gguf.part       the bytes received so far
//   modelsDir/.partial/x.gguf.part.json  {"repo","revision","path","size","sha256"}: what the
//                                        bytes are of; a part whose note names the same repo and
//                                        path but another size or hash (a new upload) starts
//                                        again from 0; one of another repo, revision or path (a
//                                        paused download of a file of the same name) is left
//                                        alone and this download refused
//   modelsDir/.partial/x.gguf.lock       flock()ed while a process downloads x.gguf, so the app
//                                        and the CLI never write one part at once
//   modelsDir/.partial/x.gguf.rejected   a finished part whose SHA-256 was wrong, kept apart
//   modelsDir/x.gguf                     the finished, verified file (moved from .part without
//                                        ever replacing a file of that name)

#include <filesystem>
#include <functional>
#include <string>

#include "lan/hub/hub_client.h"

namespace shoal::lan::hub {

struct PartPaths {
  std::filesystem::path partial;   // modelsDir/.partial
  std::filesystem::path part;      // .partial/<name>.part
  std::filesystem::path note;      // .partial/<name>.part.json
  std::filesystem::path lock;      // .partial/<name>.lock
  std::filesystem::path rejected;  // .partial/<name>.rejected
  std::filesystem::path finished;  // modelsDir/<name>
};
// Throws HubError(BadReply) for a path isSafeRepoPath refuses.
PartPaths partPaths(const std::filesystem::path& modelsDir, const RepoFile& file);

struct PartRequest {
  std::string url;  // resolveUrl of the file
  std::string repo;
  std::string revision;
  RepoFile file;
  std::filesystem::path modelsDir;
  DownloadControl* control = nullptr;
  // Called very often with the bytes of this file on disk so far; `verifying` while hashing.
  std::function<void(uint64_t bytes, bool verifying)> progress;
};

// Fetches (or resumes) the file, verifies it and moves it into modelsDir; returns its path. A
// file already in modelsDir under that name is taken as done when its size and SHA-256 are the
// listed ones, and refused (HubError Local: never replaced) otherwise. Throws HubError as
// download() documents.
std::filesystem::path downloadPart(const HubOptions& options, const PartRequest& request);

}  // namespace shoal::lan::hub
