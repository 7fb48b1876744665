#pragma once
// What the Hugging Face Hub client returns: repositories found by a search, the GGUF models of
// one repository (split files grouped), and the progress of a download. Plain data, no I/O.
//
// Shapes follow the Hub's documented HTTP API (huggingface.co/docs/hub/api):
//   GET {endpoint}/api/models?search=TEXT&filter=gguf&sort=downloads|lastModified&direction=-1
//       &limit=N                     -> [{"id", "downloads", "likes", "lastModified", "gated"...}]
//   GET {endpoint}/api/models/{repo}/tree/{revision}?recursive=true
//                                    -> [{"type":"file","path","size","oid",
//                                         "lfs":{"oid":<sha256 hex>,"size","pointerSize"}}]
//   GET {endpoint}/{repo}/resolve/{revision}/{path}   -> the file (302 to a CDN, Range honoured)

#include <cstdint>
#include <string>
#include <vector>

namespace shoal::lan::hub {

// One repository of a search result.
struct RepoSummary {
  std::string id;         // "owner/name"
  int64_t downloads = 0;  // the Hub's recent download count
  int64_t likes = 0;
  std::string lastModified;  // ISO 8601 as the Hub writes it; empty when not sent
  bool gated = false;        // the Hub answers 401/403 for its files without an accepted token
};

enum class SearchSort { Downloads, Recent };

// One file of a repository as the tree lists it.
struct RepoFile {
  std::string path;    // relative to the repository root, '/'-separated
  uint64_t size = 0;   // bytes (the LFS object's size for LFS files)
  std::string sha256;  // lower-case hex of the LFS object; empty for a non-LFS file
};

// One model of a repository: a single .gguf file, or every part of a split model
// ("name-00001-of-00003.gguf" ... "-00003-of-00003.gguf"), in part order.
struct ModelFile {
  std::string name;             // display name: the path, or the first part's path for splits
  std::string quantization;     // from the file name ("Q4_K_M", "IQ4_XS", "F16"), may be empty
  std::vector<RepoFile> parts;  // one entry unless split; part i is parts[i]
  uint64_t totalBytes = 0;      // sum of the parts' sizes
  bool complete = true;         // false when a split model misses one of its parts
};

// Progress of one download, reported from the downloading thread.
struct DownloadProgress {
  uint64_t doneBytes = 0;   // of every part, including what an earlier run left
  uint64_t totalBytes = 0;  // 0 while unknown
  double bytesPerS = 0;     // recent transfer rate; 0 while unknown
  int part = 0;             // 0-based part being fetched
  int parts = 1;
  bool verifying = false;  // hashing a finished part
};

}  // namespace shoal::lan::hub
